// Shared by the fuzz targets: a check that stops the run (libFuzzer keeps the input that failed it),
// and reading a RapidJSON DOM as the oracle of the differential checks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "hf3fs_meta/protocol_server.hpp"
#include "internal/compact_json.hpp"  // the codec's fast path, to turn off
#include "internal/json.hpp"          // RapidJSON with the codec's settings

// An expression, so that `return HF3FS_FUZZ_CHECK(...);` ends a check function.
#define HF3FS_FUZZ_CHECK(cond) ::hf3fs_meta::fuzz::check(static_cast<bool>(cond), #cond, __FILE__, __LINE__)

namespace hf3fs_meta::fuzz {

inline void check(bool ok, const char* what, const char* file, int line) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", what, file, line);
  std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// RapidJSON's own reading of a body: true if it is a JSON object.
inline bool parse_object(std::string_view text, rapidjson::Document& doc) {
  doc.Parse<rapidjson::kParseIterativeFlag>(text.data(), text.size());
  return !doc.HasParseError() && doc.IsObject();
}

// The member Python's json.loads keeps when a name repeats (the last one), as the codec reads it.
using internal::find_member;

inline bool is_string(const rapidjson::Value& value, std::string_view want) {
  return value.IsString() && std::string_view(value.GetString(), value.GetStringLength()) == want;
}

inline bool is_int64(const rapidjson::Value* value, std::int64_t want) {
  return value && value->IsInt64() && value->GetInt64() == want;
}

// The differential test of the codec's fast path (compact_json.hpp) against RapidJSON: `decode()`
// gives the same outcome with it and without it (RapidJSON alone): the same value, or the same
// refusal word for word.
inline bool same(const protocol::AllocateRequest& a, const protocol::AllocateRequest& b) {
  return a.rank == b.rank && a.keys == b.keys;
}
inline bool same(const protocol::ConfirmWriteRequest& a, const protocol::ConfirmWriteRequest& b) {
  return a.rank == b.rank && a.confirmations == b.confirmations && a.pages_to_release == b.pages_to_release &&
         a.release_keys == b.release_keys;
}
inline bool same(const protocol::BatchExistsRequest& a, const protocol::BatchExistsRequest& b) { return a.keys == b.keys; }
inline bool same(const protocol::GetLocationsRequest& a, const protocol::GetLocationsRequest& b) {
  return a.rank == b.rank && a.keys == b.keys;
}
template <class T>
bool same(const T& a, const T& b) {
  return a == b;
}

template <class Decode>
void check_fast_path_agrees(Decode decode) {
  const auto with_fast_path = decode();
  internal::fast_path_enabled() = false;
  const auto without = decode();
  internal::fast_path_enabled() = true;
  HF3FS_FUZZ_CHECK(with_fast_path.has_value() == without.has_value());
  if (with_fast_path) return HF3FS_FUZZ_CHECK(same(with_fast_path.value(), without.value()));
  HF3FS_FUZZ_CHECK(with_fast_path.error().message == without.error().message);
}

}  // namespace hf3fs_meta::fuzz
