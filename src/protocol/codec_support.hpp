// The pieces of the wire codec that its two halves share (codec_client.cpp: the client's requests
// and its checks of the answers; codec_server.cpp: the server's strict decoders and its answers):
// the names both use, the refusal, and the parts of the SAX sinks (internal/object_reader.hpp).
// Internal: only the codec's own files include it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "hf3fs_meta/protocol.hpp"

#include "internal/compact_json.hpp"
#include "internal/field_text.hpp"
#include "internal/json.hpp"
#include "internal/object_reader.hpp"

namespace hf3fs_meta::protocol::detail {

using internal::append_int;
using internal::append_json_string;
using internal::find_member;
using internal::indexed;
using internal::IntCheck;
using internal::JsonWriter;
using internal::ParsedJson;
using internal::read_int64;
using internal::Scalar;
using internal::string_of;
using rapidjson::Value;
using Kind = internal::Scalar::Kind;

inline DecodeError refuse(std::string message) { return DecodeError{std::move(message)}; }

// ---- Pieces of the sinks (object_reader.hpp) ----

// The member of one name, as its last occurrence left it; for a list, the first bad element's
// message (later elements are not looked at).
struct Member {
  bool present = false;
  Scalar value;  // a list or an object only by its kind
  std::string error;

  void start(const Scalar& s) {
    present = true;
    value = s;
    error.clear();
  }
  bool is_list() const { return present && value.kind == Kind::array; }
  bool failed() const { return !error.empty(); }
  void fail(std::string message) {
    if (error.empty()) error = std::move(message);
  }
};

// The values of one element of a list, for elements that are pairs.
struct Pair {
  Kind kind = Kind::null;
  Scalar first;
  Scalar second;

  void start(const Scalar& s) {
    kind = s.kind;
    first = second = Scalar{};
  }
  void item(std::size_t position, const Scalar& s) {
    if (position == 0) first = s;
    if (position == 1) second = s;
  }
  bool is_pair(std::size_t count) const { return kind == Kind::array && count == 2; }
};

// A sink's defaults: no elements with values inside.
struct SinkBase {
  void item(int, std::size_t, std::size_t, const Scalar&) {}
  void element_end(int, std::size_t, std::size_t) {}
  void list_end(int, std::size_t) {}
};

}  // namespace hf3fs_meta::protocol::detail
