// Writes the framing of log_format.hpp: file headers, and records into a buffer (the journal
// serializes under the state's lock and writes the buffer later, outside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "durable/log_format.hpp"

namespace hf3fs_meta::durable {

// kFileHeaderSize bytes.
std::string file_header(std::string_view magic, std::uint32_t version = kFormatVersion);

class LogWriter {
 public:
  explicit LogWriter(std::string& dest) noexcept : dest_(dest) {}

  // Appends a record around a payload.
  void add_record(std::uint64_t seq, std::string_view payload);
  // Appends a record whose payload `encode(dest)` appends in place (no copy of it): the header is
  // filled in once its length is known.
  template <class Encode>
  void add_record_encoded(std::uint64_t seq, Encode&& encode) {
    const std::size_t header_at = reserve_header();
    encode(dest_);
    finish_record(seq, header_at);
  }

 private:
  std::size_t reserve_header();
  void finish_record(std::uint64_t seq, std::size_t header_at);
  std::string& dest_;
};

}  // namespace hf3fs_meta::durable
