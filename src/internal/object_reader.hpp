// read_object: reads a body that should be a JSON object with RapidJSON's SAX reader, in place (the
// strings handed over point into a copy of the body), without building a DOM. Every decoder of a
// batch message, request or answer, is a sink of this one reader: it hands over the members the
// sink names, their lists' elements, and the values inside those elements; deeper values are only
// counted. The sink judges at the end, so that a decoder reports what a whole-document check would,
// in its own order, and a repeated member counts by its last occurrence (as Python's json.loads
// keeps it): each occurrence starts with value(), which must forget the earlier one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "internal/json.hpp"

#include <rapidjson/reader.h>

namespace hf3fs_meta::internal {

// One JSON value as the reader hands it over; a list or an object only by its kind.
struct Scalar {
  enum class Kind { null, boolean, integer, big_integer, real, string, array, object };
  Scalar() = default;
  explicit Scalar(Kind k) : kind(k) {}
  Kind kind = Kind::null;
  bool boolean = false;
  std::int64_t integer = 0;  // for Kind::integer (big_integer: an integer beyond 64 bits)
  std::string_view string;   // for Kind::string: into the parsed copy
};

// The 64-bit integer a value is, or why not: what every integer field of the protocol requires.
inline IntCheck read_int64(const Scalar& s, std::int64_t& out) {
  if (s.kind == Scalar::Kind::integer) {
    out = s.integer;
    return IntCheck::ok;
  }
  return s.kind == Scalar::Kind::big_integer ? IntCheck::out_of_range : IntCheck::not_integer;
}

// A sink provides:
//   int field(std::string_view name);        // the index of a member it reads, or -1
//   void value(int field, const Scalar&);     // the member's value (again: forget the earlier one)
//   void element(int field, std::size_t index, const Scalar&);                 // of the member's list
//   void item(int field, std::size_t index, std::size_t position, const Scalar&);  // inside an element
//   void element_end(int field, std::size_t index, std::size_t count);  // a list/object element ends
//   void list_end(int field, std::size_t count);                        // the member's list ends
template <class Sink>
class ObjectReader : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, ObjectReader<Sink>> {
 public:
  // Deeper than any message of the protocol, and shallow enough for RapidJSON's recursive parser
  // (a few stack frames per level) on any thread's stack.
  static constexpr int kMaxDepth = 64;

  explicit ObjectReader(Sink& sink) : sink_(sink) {}
  bool root_is_object() const { return root_is_object_; }
  bool too_deep() const { return depth_ >= kMaxDepth; }

  bool Null() { return value(Scalar{}); }
  bool Bool(bool b) {
    Scalar s{Scalar::Kind::boolean};
    s.boolean = b;
    return value(s);
  }
  bool Int(int i) { return integer(i); }
  bool Uint(unsigned u) { return integer(u); }
  bool Int64(std::int64_t i) { return integer(i); }
  bool Uint64(std::uint64_t u) {
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return value(Scalar{Scalar::Kind::big_integer});
    }
    return integer(static_cast<std::int64_t>(u));
  }
  bool Double(double d) { return value(Scalar{beyond_int64(d) ? Scalar::Kind::big_integer : Scalar::Kind::real}); }
  bool String(const char* text, rapidjson::SizeType length, bool) {
    Scalar s{Scalar::Kind::string};
    s.string = std::string_view(text, length);
    return value(s);
  }
  bool Key(const char* text, rapidjson::SizeType length, bool) {
    if (depth_ == 1 && root_is_object_) field_ = sink_.field(std::string_view(text, length));
    return true;
  }
  bool StartObject() { return open(Scalar::Kind::object); }
  bool StartArray() { return open(Scalar::Kind::array); }
  bool EndObject(rapidjson::SizeType) { return close(); }
  bool EndArray(rapidjson::SizeType) { return close(); }

 private:
  // Depths: 1 inside the root object, 2 inside a member's list, 3 inside one of its elements.
  bool integer(std::int64_t i) {
    Scalar s{Scalar::Kind::integer};
    s.integer = i;
    return value(s);
  }

  bool value(const Scalar& s) {
    if (field_ < 0) return true;
    if (depth_ == 1) {
      sink_.value(field_, s);
    } else if (in_list_ && depth_ == 2) {
      sink_.element(field_, index_++, s);
    } else if (in_list_ && depth_ == 3) {
      sink_.item(field_, index_, position_++, s);
    }
    return true;
  }

  bool open(Scalar::Kind kind) {
    if (too_deep()) return false;  // stops the parse
    if (depth_ == 0) {
      root_is_object_ = kind == Scalar::Kind::object;
    } else if (field_ >= 0) {
      if (depth_ == 1) {
        sink_.value(field_, Scalar{kind});
        in_list_ = kind == Scalar::Kind::array;
        index_ = 0;
      } else if (in_list_ && depth_ == 2) {
        sink_.element(field_, index_, Scalar{kind});
        position_ = 0;
      } else if (in_list_ && depth_ == 3) {
        sink_.item(field_, index_, position_++, Scalar{kind});
      }
    }
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (in_list_ && depth_ == 1) {
      in_list_ = false;
      sink_.list_end(field_, index_);
    } else if (in_list_ && depth_ == 2) {
      sink_.element_end(field_, index_++, position_);
    }
    return true;
  }

  Sink& sink_;
  int depth_ = 0;
  bool root_is_object_ = false;
  int field_ = -1;         // the sink's index of the root member being read, or -1
  bool in_list_ = false;   // that member's value is a list
  std::size_t index_ = 0;     // elements of the list so far
  std::size_t position_ = 0;  // values of the current element so far
};

struct ReadResult {
  std::string not_json;  // why the body is not JSON; empty if it is
  bool object = false;   // it is, and its root is an object
};

// Parses `body` in place in `buffer` (which the sink's string views then point into), handing the
// sink what it asks for. RapidJSON's recursive parser, which is faster than its iterative one, with
// the nesting bounded by the handler.
template <class Sink>
ReadResult read_object(std::string_view body, std::string& buffer, Sink& sink) {
  ReadResult result;
  result.not_json = check_json_text(body);
  if (!result.not_json.empty()) return result;
  rapidjson::InsituStringStream stream(insitu_copy(buffer, body));
  ObjectReader<Sink> handler(sink);
  thread_local rapidjson::Reader reader;  // keeps its stack between parses
  const rapidjson::ParseResult parsed = reader.Parse<rapidjson::kParseInsituFlag>(stream, handler);
  if (parsed.IsError() && handler.too_deep()) {
    result.not_json = "nested deeper than " + std::to_string(ObjectReader<Sink>::kMaxDepth) + " levels at offset " +
                      std::to_string(parsed.Offset());
  } else if (parsed.IsError()) {
    result.not_json = parse_error_text(parsed.Code(), parsed.Offset());
  } else {
    result.object = handler.root_is_object();
  }
  return result;
}

}  // namespace hf3fs_meta::internal
