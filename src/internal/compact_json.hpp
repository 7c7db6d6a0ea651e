// The codec's fast paths, for the shapes that carry whole batches (128 keys per allocate, about
// 1,250 per exists):
// - SizedWriter writes compact JSON into a std::string sized once up front (no append calls);
// - AnswerCursor recognises the compact answers FastAPI and the reference server render. It never
//   judges: when it meets anything else it gives up, and the caller parses with RapidJSON, which
//   gives the result or the error message. So it may only accept what that parse accepts, with the
//   same result.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "internal/json.hpp"

namespace hf3fs_meta::internal {

// Writes into a string resized once to a bound, then cut to what was written. The bound counts each
// string as if it needed no escape (size + 2 quotes): string() grows the buffer for one that does.
class SizedWriter {
 public:
  SizedWriter(std::string& out, std::size_t bound) : out_(out) {
    out_.resize(bound);
    p_ = out_.data();
  }
  static constexpr std::size_t kIntBound = 20;  // "-9223372036854775808"
  static std::size_t string_bound(std::string_view s) { return s.size() + 2; }

  void raw(std::string_view s) {
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void ch(char c) { *p_++ = c; }
  void integer(std::int64_t v) { p_ = std::to_chars(p_, p_ + kIntBound, v).ptr; }
  void string(std::string_view s) {
    if (is_clean(s, false)) {
      *p_++ = '"';
      raw(s);
      *p_++ = '"';
      return;
    }
    std::string escaped;
    append_json_string(escaped, s);
    const std::size_t offset = static_cast<std::size_t>(p_ - out_.data());
    out_.resize(out_.size() + escaped.size() - string_bound(s));
    p_ = out_.data() + offset;
    raw(escaped);
  }
  void finish() {
    // A bound that was too small has already written past the string's size: stop right here.
    if (p_ > out_.data() + out_.size()) std::abort();
    out_.resize(static_cast<std::size_t>(p_ - out_.data()));
  }

 private:
  std::string& out_;
  char* p_;
};

// The first byte from `p` that is not printable ASCII other than '"' and '\\', or `end`.
inline const char* scan_plain(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i below_space = _mm_set1_epi8(0x1F);
  const __m128i above_tilde = _mm_set1_epi8(0x7F);
  for (; end - p >= 16; p += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    __m128i bad = _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_max_epu8(x, above_tilde), x));
    if (const int mask = _mm_movemask_epi8(bad)) return p + __builtin_ctz(static_cast<unsigned>(mask));
  }
#endif
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\') return p;
  }
  return end;
}

// True if `s` appears in JSON as its own bytes between quotes, and is valid JSON text that way.
inline bool is_plain_ascii(std::string_view s) { return scan_plain(s.data(), s.data() + s.size()) == s.data() + s.size(); }

// A recogniser for the common forms of the protocol's bodies: objects of known members, each at
// most once, lists, 64-bit integers, booleans, null, and strings of printable ASCII without escapes.
// Each method consumes what it recognises and returns true, or returns false (the caller then
// falls back to RapidJSON).
class JsonCursor {
 public:
  explicit JsonCursor(std::string_view body) : p_(body.data()), end_(body.data() + body.size()) {}

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

  // A string of printable ASCII without escapes; `out` points into the body.
  bool plain_string(std::string_view& out) {
    if (!lit('"')) return false;
    const char* stop = scan_plain(p_, end_);
    if (stop == end_ || *stop != '"') return false;
    out = std::string_view(p_, static_cast<std::size_t>(stop - p_));
    p_ = stop + 1;
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
