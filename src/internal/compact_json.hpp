// JsonCursor: the codec's fast path, for the compact forms of the bodies that carry whole batches
// (128 keys per allocate, about 1,250 per exists), as our client, vLLM's client, FastAPI and our
// server write them. RapidJSON's SAX reader (object_reader.hpp) reads every message in full; alone,
// it cost the server 17% (exists) and 12% (allocate) more CPU per request on bench/run's loads
// (docs/performance.md, "JSON decoding"), so the cursor goes first. It never judges: when it meets anything else it gives
// up, and the caller reads the body with RapidJSON, which gives the result or the error message.
// So it may only accept what RapidJSON accepts, with the same result: fuzz/request_decoders.cpp
// and fuzz/answer_decoders.cpp compare the two on every input.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "internal/json.hpp"

namespace hf3fs_meta::internal {

// Whether the decoders on this thread try the fast path first: always, except in the differential
// fuzz targets, which run each decoder with and without it and require the same outcome.
bool& fast_path_enabled();

// A recogniser for the common forms of the protocol's bodies: objects of known members, each at
// most once, lists, 64-bit integers, booleans, null, and strings of ASCII without escapes.
// Each method consumes what it recognises and returns true, or returns false (the caller then
// falls back to RapidJSON).
class JsonCursor {
 public:
  // With the fast path off (fast_path_enabled()), a cursor sees no text, so it recognises nothing.
  explicit JsonCursor(std::string_view body)
      : p_(body.data()), end_(body.data() + (fast_path_enabled() ? body.size() : 0)) {}

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool lit(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool lit(std::string_view s) {
    if (static_cast<std::size_t>(end_ - p_) >= s.size() && std::memcmp(p_, s.data(), s.size()) == 0) {
      p_ += s.size();
      return true;
    }
    return false;
  }
  bool at_end() {
    ws();
    return p_ == end_;
  }

  // A JSON integer (no leading zeros, no fraction or exponent) that fits 64 bits.
  bool integer(std::int64_t& value) {
    const char* q = p_;
    const bool negative = q < end_ && *q == '-';
    if (negative) ++q;
    const char* digits = q;
    std::uint64_t magnitude = 0;
    // Up to 18 digits cannot overflow; longer numbers take from_chars' checked path.
    while (q < end_ && q - digits < 18 && *q >= '0' && *q <= '9') {
      magnitude = magnitude * 10 + static_cast<unsigned>(*q++ - '0');
    }
    if (q == digits || (*digits == '0' && q - digits > 1)) return false;
    if (q < end_ && (*q == '.' || *q == 'e' || *q == 'E')) return false;
    if (q < end_ && *q >= '0' && *q <= '9') {
      const auto [ptr, ec] = std::from_chars(p_, end_, value);
      if (ec != std::errc() || (ptr < end_ && (*ptr == '.' || *ptr == 'e' || *ptr == 'E'))) return false;
      p_ = ptr;
      return true;
    }
    value = negative ? -static_cast<std::int64_t>(magnitude) : static_cast<std::int64_t>(magnitude);
    p_ = q;
    return true;
  }

  bool boolean(bool& value) {
    const std::size_t left = static_cast<std::size_t>(end_ - p_);
    if (left >= 4 && std::memcmp(p_, "true", 4) == 0) {
      value = true;
      p_ += 4;
      return true;
    }
    if (left >= 5 && std::memcmp(p_, "false", 5) == 0) {
      value = false;
      p_ += 5;
      return true;
    }
    return false;
  }

  // A string of ASCII without escapes (so valid UTF-8 as it stands); `out` points into the body.
  bool plain_string(std::string_view& out) {
    if (!lit('"')) return false;
    const std::string_view rest(p_, static_cast<std::size_t>(end_ - p_));
    const std::size_t length = clean_prefix<true>(rest);
    if (length == rest.size() || rest[length] != '"') return false;
    out = rest.substr(0, length);
    p_ += length + 1;
    return true;
  }

  // A list: `element(index)` reads each element.
  template <class Element>
  bool list(Element&& element) {
    if (!lit('[')) return false;
    ws();
    if (lit(']')) return true;
    for (std::size_t i = 0;; ++i) {
      if (!element(i)) return false;
      ws();
      if (lit(']')) return true;
      if (!lit(',')) return false;
      ws();
    }
  }

  // A two-element list, [first, second] (vLLM's [key, prefix] and [key, page] pairs): each reader
  // reads its element.
  template <class First, class Second>
  bool pair(First&& first, Second&& second) {
    if (!lit('[')) return false;
    ws();
    if (!first()) return false;
    ws();
    if (!lit(',')) return false;
    ws();
    if (!second()) return false;
    ws();
    return lit(']');
  }

  // An object whose members are among `names` (N <= 8), each at most once: `member(index)` reads
  // the value of names[index]. Python keeps the last of a repeated member; we fall back instead.
  template <std::size_t N, class Member>
  bool object(const std::string_view (&names)[N], Member&& member) {
    static_assert(N <= 8);
    ws();
    if (!lit('{')) return false;
    ws();
    if (lit('}')) return true;
    unsigned seen = 0;
    for (;;) {
      std::string_view name;
      if (!plain_string(name)) return false;
      std::size_t index = 0;
      while (index < N && names[index] != name) ++index;
      if (index == N || (seen & (1u << index))) return false;
      seen |= 1u << index;
      ws();
      if (!lit(':')) return false;
      ws();
      if (!member(index)) return false;
      ws();
      if (lit('}')) return true;
      if (!lit(',')) return false;
      ws();
    }
  }

  // {"<field>": [e0, ..., e(count-1)]}, with an optional integer "rank" member: a success answer.
  template <class Element>
  bool list_answer(std::string_view field, std::size_t count, Element&& element) {
    const std::string_view names[] = {field, "rank"};
    bool seen_field = false;
    const bool ok = object(names, [&](std::size_t index) {
      if (index == 1) {
        std::int64_t rank = 0;
        return integer(rank);
      }
      seen_field = true;
      std::size_t n = 0;
      const bool listed = list([&](std::size_t i) {
        n = i + 1;
        return i < count && element(*this, i);
      });
      return listed && n == count;
    });
    return ok && seen_field && at_end();
  }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace hf3fs_meta::internal
