#include "durable/log_reader.hpp"

#include <algorithm>
#include <cstring>

#include "durable/coding.hpp"
#include "durable/crc32c.hpp"

namespace hf3fs_meta::durable {

RecordSpan record_span(std::string_view bytes) {
  Reader in(bytes);
  RecordSpan out;
  std::uint32_t length = 0;
  in.u64(out.seq);
  in.u32(length);
  out.size = kRecordHeaderSize + length + kRecordTrailerSize;
  return out;
}

Result<std::uint32_t> check_file_header(std::string_view bytes, std::string_view magic, std::uint32_t newest) {
  if (bytes.size() < kFileHeaderSize) return Error{Errc::corrupt, "file header truncated"};
  if (bytes.substr(0, magic.size()) != magic) return Error{Errc::corrupt, "not a " + std::string(magic) + " file"};
  Reader in(bytes.substr(8));
  std::uint32_t version = 0;
  std::uint32_t crc = 0;
  in.u32(version);
  in.u32(crc);
  if (crc != crc32c(bytes.substr(0, 12))) return Error{Errc::corrupt, "file header checksum mismatch"};
  if (version < kFormatVersion || version > newest) {
    return Error{Errc::unsupported, "unknown format version " + std::to_string(version) + " (this server reads " +
                                        std::to_string(kFormatVersion) +
                                        (newest > kFormatVersion ? ".." + std::to_string(newest) : "") + ")"};
  }
  return version;
}

LogReader::LogReader(const std::filesystem::path& path, std::string_view bytes, bool last, std::uint64_t first_seq,
                     CorruptionReporter& reporter)
    : path_(path), all_(bytes), last_(last), next_seq_(first_seq), reporter_(reporter) {}

std::string LogReader::where(std::size_t offset) const {
  return "journal " + path_.string() + " at offset " + std::to_string(offset);
}

Result<bool> LogReader::start() {
  started_ = true;
  if (all_.size() < kFileHeaderSize && last_) {
    // An empty file (a crash right after it was created) has nothing to cut: nothing to report.
    if (!all_.empty()) reporter_.dropped(all_.size(), "a torn file header of " + path_.string());
    return false;
  }
  if (auto version = check_file_header(all_, kJournalMagic); !version) {
    return Error{version.error().code, where(0) + ": " + version.error().message};
  }
  at_ = kFileHeaderSize;
  return true;
}

Result<std::optional<LogRecord>> LogReader::torn(std::size_t left) {
  if (!last_) return Error{Errc::corrupt, where(at_) + ": torn record in a journal that is not the last"};
  reporter_.dropped(left, "a torn record at " + where(at_));
  done_ = true;
  return std::nullopt;
}

Result<std::optional<LogRecord>> LogReader::read() {
  if (!started_) {
    auto started = start();
    if (!started) return std::move(started).error();
    done_ = !started.value();
  }
  if (done_ || at_ >= all_.size()) return std::nullopt;
  const std::size_t left = all_.size() - at_;
  Reader header(all_.substr(at_, std::min(left, kRecordHeaderSize)));
  std::uint64_t seq = 0;
  std::uint32_t len = 0;
  std::uint32_t crc = 0;
  const bool whole_header = header.u64(seq) && header.u32(len) && header.u32(crc);
  if (whole_header && crc != crc32c(all_.substr(at_, 12))) {
    return Error{Errc::corrupt, where(at_) + ": record header checksum mismatch"};
  }
  if (!whole_header || left < kRecordHeaderSize + std::size_t{len} + kRecordTrailerSize) return torn(left);
  if (seq != next_seq_) {
    return Error{Errc::inconsistent,
                 where(at_) + ": record " + std::to_string(seq) + ", expected " + std::to_string(next_seq_)};
  }
  const std::string_view payload = all_.substr(at_ + kRecordHeaderSize, len);
  std::uint32_t payload_crc = 0;
  std::memcpy(&payload_crc, all_.data() + at_ + kRecordHeaderSize + len, 4);
  if (payload_crc != crc32c(payload)) return Error{Errc::corrupt, where(at_) + ": record payload checksum mismatch"};
  const LogRecord record{seq, payload, at_};
  at_ += kRecordHeaderSize + len + kRecordTrailerSize;
  ++next_seq_;
  return record;
}

}  // namespace hf3fs_meta::durable
