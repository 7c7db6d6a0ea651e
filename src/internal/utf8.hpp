// The one UTF-8 validity check of the library.
#pragma once

#include <cstddef>

namespace hf3fs_meta::internal {

// The length of the valid UTF-8 sequence that starts `p` (of `n` >= 1 bytes), or 0 if none does:
// overlong forms, surrogates and code points above U+10FFFF are not valid. The one UTF-8 check of
// the library: the JSON body check (json.hpp) and the server's path echo (service.cpp) both use it.
inline std::size_t utf8_sequence_length(const unsigned char* p, std::size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
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
    return 0;
  }
  if (length > n || p[1] < low || p[1] > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace hf3fs_meta::internal
