#include "durable/log_writer.hpp"

#include <cstring>

#include "durable/coding.hpp"
#include "durable/crc32c.hpp"

namespace hf3fs_meta::durable {

std::string file_header(std::string_view magic, std::uint32_t version) {
  std::string out(magic);
  put_u32(out, version);
  put_u32(out, crc32c(out));
  return out;
}

void LogWriter::add_record(std::uint64_t seq, std::string_view payload) {
  const std::size_t header_at = reserve_header();
  dest_.append(payload);
  finish_record(seq, header_at);
}

std::size_t LogWriter::reserve_header() {
  const std::size_t header_at = dest_.size();
  dest_.append(kRecordHeaderSize, '\0');
  return header_at;
}

// The header reserved at `header_at`, for the payload after it (up to the end of dest_), and the
// payload's checksum after it.
void LogWriter::finish_record(std::uint64_t seq, std::size_t header_at) {
  const std::size_t payload_at = header_at + kRecordHeaderSize;
  const auto payload_len = static_cast<std::uint32_t>(dest_.size() - payload_at);
  std::memcpy(dest_.data() + header_at, &seq, 8);
  std::memcpy(dest_.data() + header_at + 8, &payload_len, 4);
  const std::uint32_t header_crc = crc32c(std::string_view(dest_).substr(header_at, 12));
  std::memcpy(dest_.data() + header_at + 12, &header_crc, 4);
  put_u32(dest_, crc32c(std::string_view(dest_).substr(payload_at, payload_len)));
}

}  // namespace hf3fs_meta::durable
