// JSON helpers of the protocol library: a writer that renders exactly what Python's json.dumps
// renders for FastAPI (compact, ensure_ascii=False, lowercase \u00xx escapes), and the RapidJSON
// reading helpers the decoders and the error classifier share. Not installed: RapidJSON must not
// leak into public headers.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

// Not RAPIDJSON_SSE2: RapidJSON 1.1's SSE2 in-situ string scanner lets a raw control character
// through once a string is 16 bytes long, which JSON (and Python's json.loads) refuse; found by
// fuzz/request_decoders.cpp, kept in fuzz/regressions/ and codec_test.
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hf3fs_meta::internal {

// True if any of the 8 bytes of `word` needs an escape: below 0x20, '"' or '\\' (exact, no false
// negatives; the bit tricks are those of "Bit Twiddling Hacks", haszero/hasless).
inline bool word_needs_escape(std::uint64_t word) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull;
  constexpr std::uint64_t kHighs = 0x8080808080808080ull;
  const auto has_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHighs; };
  const std::uint64_t below_space = (word - kOnes * 0x20) & ~word & kHighs;
  return (below_space | has_zero(word ^ (kOnes * '"')) | has_zero(word ^ (kOnes * '\\'))) != 0;
}

// True if no byte of `s` needs an escape in a JSON string: none below 0x20, no '"', no '\\'. With
// `ascii_only`, also none above 0x7E: such a string is valid JSON text between quotes, byte for byte.
inline bool is_clean(std::string_view s, bool ascii_only) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i below_space = _mm_set1_epi8(0x1F);
  const __m128i above_tilde = _mm_set1_epi8(0x7F);
  for (; i + 16 <= s.size(); i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
    __m128i bad = _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x));  // x <= 0x1F
    if (ascii_only) bad = _mm_or_si128(bad, _mm_cmpeq_epi8(_mm_max_epu8(x, above_tilde), x));  // x >= 0x7F
    if (_mm_movemask_epi8(bad) != 0) return false;
  }
#endif
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == '"' || c == '\\' || (ascii_only && c >= 0x7F)) return false;
  }
  return true;
}

// Appends `s` as a JSON string literal. Bytes >= 0x80 pass through: the text stays UTF-8, as
// FastAPI's JSONResponse (ensure_ascii=False) and our client encoders both want.
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t run = 0;  // start of the pending run of bytes that need no escape
  std::size_t i = 0;
  while (i < s.size()) {
    if (i + 8 <= s.size()) {
      std::uint64_t word;
      std::memcpy(&word, s.data() + i, 8);
      if (!word_needs_escape(word)) {
        i += 8;
        continue;
      }
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out.append(s.data() + run, i - run);
    run = ++i;
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default: {
        const char escape[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(escape, sizeof escape);
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

inline void append_int(std::string& out, std::int64_t value) {
  char buffer[24];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  out.append(buffer, end);
}

// ---- Reading ----

// The offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and
// code points above U+10FFFF included), or npos. Runs of ASCII go 8 bytes at a time.
inline std::size_t invalid_utf8_offset(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + length > n || p[i + 1] < low || p[i + 1] > high) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

// Checks a body as Python's json.loads would before parsing: no NUL byte (the in-place parser
// stops at one), valid UTF-8. Returns the error text, empty if fine.
inline std::string precheck_body(std::string_view text) {
  if (text.empty()) return {};  // memchr must not see the null pointer of an empty string_view
  if (const void* nul = std::memchr(text.data(), 0, text.size())) {
    return "NUL byte at offset " + std::to_string(static_cast<const char*>(nul) - text.data());
  }
  if (const std::size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos) {
    return "invalid UTF-8 at offset " + std::to_string(bad);
  }
  return {};
}

// A NUL-terminated, writable copy of a body for RapidJSON's in-place parsing (strings then point
// into the copy). The copy reuses this thread's buffer, so a
// call costs no allocation once the thread has seen a body that large.
class InsituCopy {
 public:
  explicit InsituCopy(std::string_view text) {
    thread_local std::string buffer;
    thread_local bool busy = false;
    if (!busy) {
      busy = true;
      busy_ = &busy;
      copy_ = &buffer;
    }
    // The terminating NUL, and 15 more bytes: RapidJSON's SSE2 scanners (off, see above) read
    // whole aligned 16-byte blocks past it.
    copy_->reserve(text.size() + kPadding);
    copy_->assign(text.data(), text.size());
    copy_->append(kPadding, '\0');
  }
  ~InsituCopy() {
    if (!busy_) return;
    *busy_ = false;
    // A huge body once must not pin its memory to the thread for good.
    if (copy_->capacity() > (std::size_t{1} << 20)) std::string().swap(*copy_);
  }
  InsituCopy(const InsituCopy&) = delete;
  InsituCopy& operator=(const InsituCopy&) = delete;
  char* data() { return copy_->data(); }

 private:
  static constexpr std::size_t kPadding = 16;
  std::string own_;
  std::string* copy_ = &own_;
  bool* busy_ = nullptr;
};

inline std::string parse_error_text(rapidjson::ParseErrorCode code, std::size_t offset) {
  return std::string(rapidjson::GetParseError_En(code)) + " at offset " + std::to_string(offset);
}

// A parsed body (DOM), for the decoders that must see the whole request before judging it. The
// DOM's first allocations come from a buffer inside the object.
class ParsedJson {
 public:
  ParsedJson() : pool_(pool_buffer_, sizeof pool_buffer_), doc_(&pool_) {}
  ParsedJson(const ParsedJson&) = delete;
  ParsedJson& operator=(const ParsedJson&) = delete;

  // Refuses what Python's json.loads refuses, except NaN/Infinity, which no field of the protocol
  // can take anyway.
  bool parse(std::string_view text) {
    error_ = precheck_body(text);
    if (!error_.empty()) return false;
    copy_.emplace(text);
    doc_.ParseInsitu<rapidjson::kParseIterativeFlag>(copy_->data());  // iterative: no stack per nesting level
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
  std::optional<InsituCopy> copy_;
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

// JSON integers as Python reads them, limited to 64 bits. Booleans and floats (1.0 too) are not
// integers. RapidJSON stores an integer literal beyond 64 bits as a double, so an integral double
// of magnitude >= 2^63 is reported as out of range (a float literal that large is too).
inline IntCheck read_int64(const rapidjson::Value& value, std::int64_t& out) {
  if (value.IsInt64()) {
    out = value.GetInt64();
    return IntCheck::ok;
  }
  if (value.IsUint64()) return IntCheck::out_of_range;
  if (value.IsDouble()) {
    const double d = value.GetDouble();
    if (std::isfinite(d) && std::fabs(d) >= 9223372036854775808.0) return IntCheck::out_of_range;
  }
  return IntCheck::not_integer;
}

}  // namespace hf3fs_meta::internal
