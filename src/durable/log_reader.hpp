// Reads the framing of log_format.hpp, as leveldb's log::Reader: a file header, then records with
// their checksums and numbers checked, and the torn-tail rule applied (what it drops goes to a
// CorruptionReporter; anything else wrong is an error naming the file and the offset).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "durable/error.hpp"
#include "durable/log_format.hpp"

namespace hf3fs_meta::durable {

// Checks a file header, accepting versions kFormatVersion..newest; returns the version.
Result<std::uint32_t> check_file_header(std::string_view bytes, std::string_view magic,
                                        std::uint32_t newest = kFormatVersion);

// The seq and whole size (header, payload, trailer) of the record whose header begins `bytes` (at
// least kRecordHeaderSize of them). Unchecked: for bytes this process framed itself, or that a
// LogReader checks next (the journal's batches for replication, a replicated log's entries).
struct RecordSpan {
  std::uint64_t seq = 0;
  std::size_t size = 0;
};
RecordSpan record_span(std::string_view bytes);

// Told what a reader dropped instead of failing: the torn tail of the last journal file.
class CorruptionReporter {
 public:
  virtual ~CorruptionReporter() = default;
  // `bytes` bytes at the end of the file were dropped; `why` says what they were and where
  // ("a torn record at journal P at offset O").
  virtual void dropped(std::size_t bytes, std::string_view why) = 0;
};

struct LogRecord {
  std::uint64_t seq = 0;
  std::string_view payload;  // checksum checked
  std::size_t offset = 0;    // of its header in the file
};

// One journal file's bytes. `last`: the newest file, to which the torn-tail rule applies;
// `first_seq`: the number its first record must have.
class LogReader {
 public:
  LogReader(const std::filesystem::path& path, std::string_view bytes, bool last, std::uint64_t first_seq,
            CorruptionReporter& reporter);

  // The next record, or none at the end (a torn tail dropped), or an error naming the file and offset.
  Result<std::optional<LogRecord>> read();
  // Where the next record goes: the end of the last whole record (0 for a torn file header).
  std::size_t end() const noexcept { return at_; }
  // "journal P at offset O", for errors about a record.
  std::string where(std::size_t offset) const;

 private:
  Result<bool> start();  // false: nothing to read (an empty or torn file header)
  Result<std::optional<LogRecord>> torn(std::size_t left);

  const std::filesystem::path& path_;
  std::string_view all_;
  bool last_;
  std::uint64_t next_seq_;
  CorruptionReporter& reporter_;
  std::size_t at_ = 0;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace hf3fs_meta::durable
