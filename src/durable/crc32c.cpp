#include "durable/crc32c.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define HF3FS_META_CRC32C_SSE42 1
#endif

namespace hf3fs_meta::durable {
namespace {

#ifdef HF3FS_META_CRC32C_SSE42
__attribute__((target("sse4.2"))) std::uint32_t extend_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t n) noexcept {
  std::uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

#endif

}  // namespace

bool Crc32c::hardware() noexcept {
#ifdef HF3FS_META_CRC32C_SSE42
  static const bool has = [] {
    __builtin_cpu_init();  // may run before the constructors that would otherwise do it
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

void Crc32c::process_bytes(const void* data, std::size_t size) noexcept {
#ifdef HF3FS_META_CRC32C_SSE42
  if (hardware()) {
    state_ = extend_sse42(state_, static_cast<const unsigned char*>(data), size);
    return;
  }
#endif
  software_.process_bytes(data, size);
}

std::uint32_t Crc32c::checksum() const noexcept { return hardware() ? ~state_ : software_.checksum(); }

std::uint32_t crc32c(std::string_view bytes) noexcept {
  Crc32c c;
  c.process_bytes(bytes.data(), bytes.size());
  return c.checksum();
}

}  // namespace hf3fs_meta::durable
