#include "ha/verify_log.hpp"

#include <filesystem>

#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "ha/follower.hpp"
#include "ha/log.hpp"

namespace hf3fs_meta::server::ha {
namespace {

// Checks each record's checksums and numbers, as a journal file's reader does: the entry's records
// behind a journal file's header, none of them torn.
struct NothingDropped final : durable::CorruptionReporter {
  void dropped(std::size_t, std::string_view) override {}
};

std::string check_records(const LogEntry& entry, std::uint64_t first_seq) {
  const std::filesystem::path name = "log entry " + std::to_string(entry.last_seq);  // the reader keeps a reference
  std::string file = durable::file_header(durable::kJournalMagic);
  file += entry.batch;
  NothingDropped reporter;
  durable::LogReader reader(name, file, /*last=*/false, first_seq, reporter);
  for (;;) {
    auto record = reader.read();
    if (!record) return record.error().message;
    if (!record.value()) return std::string();
  }
}

// What is wrong with `entry`, whose records are `run` (record_run: read once an entry), the one after
// record `applied` (0 and `first`: the oldest left).
std::string check_entry(const LogEntry& entry, const EtcdResult<RecordRun>& run, std::uint64_t applied, bool first) {
  if (!run) return "log entry " + std::to_string(entry.last_seq) + ": " + run.error().message;
  if (auto follows = check_follows(entry, run, first ? run.value().first - 1 : applied, false); !follows) {
    return follows.error().message;
  }
  return check_records(entry, run.value().first);
}

}  // namespace

EtcdResult<LogVerdict> verify_log(EtcdClient& etcd, const Keys& keys, std::int64_t page) {
  auto tip = read_tip(etcd, keys);
  if (!tip) return tip.error();
  LogVerdict out;
  out.revision = tip.value().revision;
  const std::string end = prefix_end(keys.log_prefix());  // entries past the tip would be wrong too
  std::string from = keys.log_prefix();
  for (bool more = true; more && out.problem.empty();) {
    RangeRequest range{from, end};
    range.limit = page;
    range.revision = out.revision;
    auto read = etcd.range(range);
    if (!read) return read.error();
    more = read.value().more;
    for (const KeyValue& kv : read.value().kvs) {
      const LogEntry entry{keys.seq_of(kv.key), kv.value, kv.mod_revision};
      const auto run = record_run(entry.batch);
      out.problem = entry.last_seq == 0 ? "the log holds " + kv.key + ", which is not an entry's key"
                                        : check_entry(entry, run, out.last_seq, out.entries == 0);
      if (!out.problem.empty()) break;
      if (out.entries++ == 0) out.first_seq = run.value().first;
      out.last_seq = entry.last_seq;
      out.bytes += entry.batch.size();
      from = kv.key + '\0';
    }
  }
  if (out.problem.empty() && out.last_seq != tip.value().seq) {
    out.problem = "the log's entries end at record " + std::to_string(out.last_seq) + " but its tip says record " +
                  std::to_string(tip.value().seq);
  }
  return out;
}

}  // namespace hf3fs_meta::server::ha
