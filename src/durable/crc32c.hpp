// CRC32C (Castagnoli) of the data directory's files: the SSE4.2 crc32 instruction where the CPU has
// it (recovery checks every byte of a snapshot and a journal: Boost's table-driven CRC was a fifth of
// its time), Boost.CRC otherwise; both give the same value (tested against each other).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/crc.hpp>

namespace hf3fs_meta::durable {

// A checksum computed piece by piece: process_bytes(), then checksum().
class Crc32c {
 public:
  void process_bytes(const void* data, std::size_t size) noexcept;
  std::uint32_t checksum() const noexcept;

  // The reference: Boost.CRC's CRC32C, the fallback of a CPU without SSE4.2.
  using Software = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;
  static bool hardware() noexcept;  // the crc32 instruction is used

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;  // the instruction's running value
  Software software_;
};

std::uint32_t crc32c(std::string_view bytes) noexcept;

}  // namespace hf3fs_meta::durable
