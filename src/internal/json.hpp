// JSON helpers of the protocol library: the one writer (exactly what Python's json.dumps renders for
// FastAPI: compact, ensure_ascii=False, lowercase \u00xx escapes), the one check of a body's text
// (UTF-8, control bytes) before RapidJSON parses it, and the RapidJSON reading helpers the decoders
// and the error classifier share. Not installed: RapidJSON must not leak into public headers.
//
// RapidJSON's settings (RAPIDJSON_HAS_STDSTRING, RAPIDJSON_SSE2) come from one CMake interface
// target, hf3fs_meta_rapidjson, that every target including RapidJSON links: translation units
// that disagree on them would see two different RapidJSONs in one program.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#if !defined(RAPIDJSON_HAS_STDSTRING)
#error "link hf3fs_meta_rapidjson: RapidJSON's settings live on that one target"
#endif
#include "internal/utf8.hpp"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hf3fs_meta::internal {

// ---- Writing ----

// The length of the leading run of `s` that a JSON string holds as is: no byte below 0x20, no '"',
// no '\\'. Bytes >= 0x80 pass (the text stays UTF-8), unless `kAsciiOnly`: then the run is also
// valid UTF-8 as it stands (the fast path reads strings without validating them). The library's one
// scanner for this check: the writer and the fast path (compact_json.hpp) both use it.
template <bool kAsciiOnly = false>
std::size_t clean_prefix(std::string_view s) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i below_space = _mm_set1_epi8(0x1F);
  for (; i + 16 <= s.size(); i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
    __m128i bad = _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x));  // x <= 0x1F
    if constexpr (kAsciiOnly) bad = _mm_or_si128(bad, x);                        // x >= 0x80: the sign bit
    if (const int mask = _mm_movemask_epi8(bad)) return i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
  }
#endif
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"' || c == '\\' || (kAsciiOnly && c >= 0x80)) return i;
  }
  return s.size();
}

// The most bytes `s` can take as a JSON string literal: every byte a \u00xx escape, and the quotes.
inline std::size_t escaped_bound(std::string_view s) { return 6 * s.size() + 2; }

// Writes `s` as a JSON string literal at `p`, which has room for escaped_bound(s) bytes; returns
// the end of what it wrote.
inline char* write_json_string(char* p, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  *p++ = '"';
  for (;;) {
    const std::size_t run = clean_prefix(s);
    std::memcpy(p, s.data(), run);
    p += run;
    if (run == s.size()) break;
    const auto c = static_cast<unsigned char>(s[run]);
    s.remove_prefix(run + 1);
    *p++ = '\\';
    switch (c) {
      case '"': *p++ = '"'; break;
      case '\\': *p++ = '\\'; break;
      case '\b': *p++ = 'b'; break;
      case '\f': *p++ = 'f'; break;
      case '\n': *p++ = 'n'; break;
      case '\r': *p++ = 'r'; break;
      case '\t': *p++ = 't'; break;
      default: {
        const char escape[5] = {'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        std::memcpy(p, escape, sizeof escape);
        p += sizeof escape;
      }
    }
  }
  *p++ = '"';
  return p;
}

// Writes compact JSON into `out`. Every write first makes room for itself, so no write can pass the
// end of the buffer; the bound given up front only saves the reallocations a good guess avoids.
class JsonWriter {
 public:
  static constexpr std::size_t kIntBound = 20;  // "-9223372036854775808"
  // A string's bound when it needs no escape (the common case: md5-hex keys).
  static std::size_t string_bound(std::string_view s) { return s.size() + 2; }

  JsonWriter(std::string& out, std::size_t bound) : out_(out), start_(out.size()) {
    out_.resize(start_ + bound);
    p_ = out_.data() + start_;
    end_ = out_.data() + out_.size();
  }
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  void raw(std::string_view s) {
    room(s.size());
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void ch(char c) {
    room(1);
    *p_++ = c;
  }
  void integer(std::int64_t v) {
    room(kIntBound);
    p_ = std::to_chars(p_, end_, v).ptr;
  }
  void string(std::string_view s) {
    if (clean_prefix(s) != s.size()) {
      room(escaped_bound(s));
      p_ = write_json_string(p_, s);
      return;
    }
    room(string_bound(s));
    *p_++ = '"';
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
    *p_++ = '"';
  }
  // Cuts `out` to what was written.
  void finish() { out_.resize(static_cast<std::size_t>(p_ - out_.data())); }

 private:
  void room(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) grow(n);
  }
  void grow(std::size_t n) {
    const std::size_t used = static_cast<std::size_t>(p_ - out_.data());
    out_.resize(std::max(2 * out_.size(), used + n));
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  std::string& out_;
  std::size_t start_;
  char* p_;
  char* end_;
};

// Appends `s` as a JSON string literal.
inline void append_json_string(std::string& out, std::string_view s) {
  JsonWriter w(out, JsonWriter::string_bound(s));
  w.string(s);
  w.finish();
}

inline void append_int(std::string& out, std::int64_t value) {
  char buffer[24];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  out.append(buffer, end);
}

// ---- Reading ----

// Checks a body's text as Python's json.loads would before parsing it: valid UTF-8, and no control
// byte but tab, LF and CR (JSON allows those three as whitespace only, and no control byte inside
// a string). Returns the error text, empty if fine.
//
// RapidJSON is then run without its own encoding check (a byte-by-byte transcoder). The control-
// byte rule also makes RapidJSON 1.1's SSE2 string scanner exact: it lets 0x1A-0x1F through inside
// a string (found by fuzz/request_decoders.cpp), and no body holding one gets that far.
inline std::string check_json_text(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    // Blocks of printable ASCII and spaces, the bulk of any body, at once.
#if defined(__SSE2__)
    if (i + 16 <= n) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      const __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1F)), x);  // x <= 0x1F
      if (_mm_movemask_epi8(_mm_or_si128(x, control)) == 0) {  // and no x >= 0x80
        i += 16;
        continue;
      }
    }
#else
    if (i + 8 <= n) {
      constexpr std::uint64_t kOnes = 0x0101010101010101ull;
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      // No byte >= 0x80 and none below 0x20 ("Bit Twiddling Hacks", hasless).
      if (((word | ((word - kOnes * 0x20) & ~word)) & (kOnes * 0x80)) == 0) {
        i += 8;
        continue;
      }
    }
#endif
    const unsigned char c = p[i];
    if ((c >= 0x20 && c < 0x80) || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (c == 0) {
      return "NUL byte at offset " + std::to_string(i);
    } else if (c < 0x20) {
      return "control character at offset " + std::to_string(i);
    } else if (const std::size_t length = utf8_sequence_length(p + i, n - i)) {
      i += length;
    } else {
      return "invalid UTF-8 at offset " + std::to_string(i);
    }
  }
  return {};
}

// Makes `buffer` a NUL-terminated, writable copy of `text` for RapidJSON's in-place parsing (its
// strings then point into `buffer`), and returns it. 16 bytes of padding: RapidJSON's SSE2 scanners
// read whole aligned 16-byte blocks, up to one past the terminating NUL.
inline char* insitu_copy(std::string& buffer, std::string_view text) {
  constexpr std::size_t kPadding = 16;
  buffer.reserve(text.size() + kPadding);
  buffer.assign(text.data(), text.size());
  buffer.append(kPadding, '\0');
  return buffer.data();
}

// This thread's buffer for a parse whose strings are copied out before it ends: a call costs no
// allocation once the thread has seen a body that large. A nested use gets a buffer of its own.
class ScratchBuffer {
 public:
  ScratchBuffer() {
    thread_local std::string buffer;
    thread_local bool busy = false;
    if (!busy) {
      busy = true;
      busy_ = &busy;
      buffer_ = &buffer;
    }
  }
  ~ScratchBuffer() {
    if (!busy_) return;
    *busy_ = false;
    // A huge body once must not pin its memory to the thread for good.
    if (buffer_->capacity() > (std::size_t{1} << 20)) std::string().swap(*buffer_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  std::string& get() { return *buffer_; }

 private:
  std::string own_;
  std::string* buffer_ = &own_;
  bool* busy_ = nullptr;
};

inline std::string parse_error_text(rapidjson::ParseErrorCode code, std::size_t offset) {
  return std::string(rapidjson::GetParseError_En(code)) + " at offset " + std::to_string(offset);
}

// A parsed body (DOM), for the small messages whose decoders read nested values (initialize, error
// details); the batch messages are read without a DOM (object_reader.hpp). The DOM's first
// allocations come from a buffer inside the object.
class ParsedJson {
 public:
  ParsedJson() : pool_(pool_buffer_, sizeof pool_buffer_), doc_(&pool_) {}
  ParsedJson(const ParsedJson&) = delete;
  ParsedJson& operator=(const ParsedJson&) = delete;

  // Refuses what Python's json.loads refuses, except NaN/Infinity, which no field of the protocol
  // can take anyway.
  bool parse(std::string_view text) {
    error_ = check_json_text(text);
    if (!error_.empty()) return false;
    doc_.ParseInsitu<rapidjson::kParseIterativeFlag>(insitu_copy(scratch_.get(), text));  // iterative: no stack per nesting level
    if (doc_.HasParseError()) {
      error_ = parse_error_text(doc_.GetParseError(), doc_.GetErrorOffset());
      return false;
    }
    return true;
  }
  const rapidjson::Value& root() const { return doc_; }
  const std::string& error_text() const { return error_; }

 private:
  char pool_buffer_[8192];
  rapidjson::MemoryPoolAllocator<> pool_;
  rapidjson::Document doc_;
  ScratchBuffer scratch_;
  std::string error_;
};

// The member Python's dict would keep: with a repeated name, json.loads keeps the last one.
inline const rapidjson::Value* find_member(const rapidjson::Value& object, std::string_view name) {
  const rapidjson::Value* found = nullptr;
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    if (std::string_view(it->name.GetString(), it->name.GetStringLength()) == name) found = &it->value;
  }
  return found;
}

inline std::string_view string_of(const rapidjson::Value& value) {
  return {value.GetString(), value.GetStringLength()};
}

enum class IntCheck { ok, not_integer, out_of_range };

// An integral double of this magnitude or more is an integer literal beyond 64 bits to RapidJSON
// (it stores those as doubles), or a float literal that large: out of range either way.
inline bool beyond_int64(double d) { return std::isfinite(d) && std::fabs(d) >= 9223372036854775808.0; }

// JSON integers as Python reads them, limited to 64 bits. Booleans and floats (1.0 too) are not
// integers.
inline IntCheck read_int64(const rapidjson::Value& value, std::int64_t& out) {
  if (value.IsInt64()) {
    out = value.GetInt64();
    return IntCheck::ok;
  }
  if (value.IsUint64()) return IntCheck::out_of_range;
  if (value.IsDouble() && beyond_int64(value.GetDouble())) return IntCheck::out_of_range;
  return IntCheck::not_integer;
}

}  // namespace hf3fs_meta::internal
