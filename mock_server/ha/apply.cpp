#include "ha/apply.hpp"

#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"

namespace hf3fs_meta::server::ha {

durable::Result<void> apply_entry(MetadataState& state, const LogEntry& entry, durable::Recovered& out,
                                  bool to_sink) {
  const std::string name = "etcd log entry " + std::to_string(entry.last_seq);
  if (entry.last_seq <= out.seq) {
    // Its records are all applied already: the log holds them twice, or the caller read the entry
    // twice. Either way not skipped in silence.
    return durable::Error{durable::Errc::inconsistent, name + " holds no record after record " +
                                                           std::to_string(out.seq) + ", the last applied"};
  }
  if (entry.batch.size() < durable::kRecordHeaderSize) {
    return durable::Error{durable::Errc::corrupt, name + ": " + std::to_string(entry.batch.size()) +
                                                      " bytes hold no record"};
  }
  const std::uint64_t first = durable::record_span(entry.batch).seq;
  if (first > out.seq + 1) {
    return durable::Error{durable::Errc::inconsistent,
                          name + " begins at record " + std::to_string(first) + ", after record " +
                              std::to_string(out.seq + 1) + ": this member needs a snapshot"};
  }
  // The reader takes a journal file: the entry's records behind a journal file's header.
  std::string file = durable::file_header(durable::kJournalMagic);
  file += entry.batch;
  // replay_journal also says where a data dir's last journal file ends: not the entry's business.
  auto journal = std::move(out.journal);
  const auto valid_bytes = out.journal_valid_bytes;
  const auto journal_bytes = out.journal_bytes;
  auto replayed = durable::replay_journal(name, file, /*last=*/false, state, out, first, to_sink);
  out.journal = std::move(journal);
  out.journal_valid_bytes = valid_bytes;
  out.journal_bytes = journal_bytes;
  if (!replayed) return replayed;
  if (out.seq != entry.last_seq) {
    return durable::Error{durable::Errc::inconsistent, name + " ends at record " + std::to_string(out.seq) +
                                                           ", not at the record its key names"};
  }
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta::server::ha
