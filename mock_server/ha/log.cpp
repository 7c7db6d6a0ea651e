#include "ha/log.hpp"

#include <charconv>

#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"

namespace hf3fs_meta::server::ha {

namespace {

EtcdError broken_log(std::string message) {
  return EtcdError{EtcdError::Kind::not_applied, 0, std::move(message)};
}

}  // namespace

EtcdResult<Tip> read_tip(EtcdClient& etcd, const Keys& keys) {
  auto read = etcd.range({keys.tip()});
  if (!read) return read.error();
  Tip tip;
  tip.revision = read.value().revision;
  if (read.value().kvs.empty()) return tip;
  const KeyValue& kv = read.value().kvs.front();
  const auto [end, ec] = std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), tip.seq);
  if (ec != std::errc() || end != kv.value.data() + kv.value.size() || tip.seq == 0) {
    return broken_log("the log's tip key " + keys.tip() + " holds \"" + kv.value.substr(0, 40) +
                      "\", not a seq: was it written by hf3fs-meta?");
  }
  tip.mod_revision = kv.mod_revision;
  return tip;
}

EtcdResult<LogRead> read_log(EtcdClient& etcd, const Keys& keys, std::uint64_t after_seq, std::int64_t limit) {
  // The tip and the entries from one revision, so that entries below the tip are all there.
  auto tip = read_tip(etcd, keys);
  if (!tip) return tip.error();
  LogRead out;
  out.revision = tip.value().revision;
  if (tip.value().seq <= after_seq) return out;
  RangeRequest range{keys.entry(after_seq + 1), keys.entry(tip.value().seq + 1)};
  range.limit = limit;
  range.revision = tip.value().revision;
  auto read = etcd.range_large(range);
  if (!read) return read.error();
  for (KeyValue& kv : read.value().kvs) {
    const std::uint64_t last_seq = keys.seq_of(kv.key);
    if (last_seq == 0) return broken_log("the log holds " + kv.key + ", which is not an entry's key");
    out.entries.push_back({last_seq, std::move(kv.value), kv.mod_revision});
  }
  // The entry holding record after_seq + 1 was compacted away when none is left, or when the first
  // left begins after it (its records' framing says where: durable::record_span).
  const bool compacted = out.entries.empty() || (out.entries.front().batch.size() >= durable::kRecordHeaderSize &&
                                                  durable::record_span(out.entries.front().batch).seq > after_seq + 1);
  if (compacted) {
    return EtcdError{EtcdError::Kind::not_applied, 0,
                     "the log's tip is record " + std::to_string(tip.value().seq) + " but no entry holds record " +
                         std::to_string(after_seq + 1) + ": it was compacted away, so this member needs a snapshot",
                     /*needs_snapshot=*/true};
  }
  return out;
}

EtcdResult<RecordRun> record_run(std::string_view batch) {
  RecordRun run;
  std::size_t at = 0;
  while (at < batch.size()) {
    if (batch.size() - at < durable::kRecordHeaderSize) {
      return broken_log("a batch of " + std::to_string(batch.size()) + " bytes has " + std::to_string(batch.size() - at) +
                        " bytes at offset " + std::to_string(at) + " that are no record header");
    }
    const durable::RecordSpan record = durable::record_span(batch.substr(at));
    if (record.size > batch.size() - at) {
      return broken_log("record " + std::to_string(record.seq) + " at offset " + std::to_string(at) +
                        " runs past the end of its batch");
    }
    if (at > 0 && record.seq != run.last + 1) {
      return broken_log("record " + std::to_string(record.seq) + " follows record " + std::to_string(run.last) +
                        " in one batch");
    }
    if (at == 0) run.first = record.seq;
    run.last = record.seq;
    at += record.size;
  }
  if (at == 0) return broken_log("an empty batch holds no record");
  return run;
}

LogWriter::LogWriter(EtcdClient& etcd, const Keys& keys, std::int64_t fence, Tip tip)
    : etcd_(etcd), keys_(keys), fence_(fence), tip_(tip) {}

EtcdResult<LogWriter::Appended> LogWriter::append(std::string_view batch, std::uint64_t last_seq) {
  if (failed_) return broken_log("this log writer already failed: it appends nothing more");
  // Exactly the records after the tip: a batch that begins at or before it would give a record a
  // second entry (a fork that followers cannot apply), one that begins after it a gap. Either means
  // the journal no longer numbers records as the log does: the leader must step down and read the
  // log again, so nothing more is appended.
  const auto run = record_run(batch);
  if (!run || run.value().first != tip_.seq + 1 || run.value().last != last_seq) {
    failed_ = true;
    return broken_log("an entry of records " +
                      (run ? std::to_string(run.value().first) + "-" + std::to_string(run.value().last)
                           : "that cannot be read (" + run.error().message + ")") +
                      ", said to end at record " + std::to_string(last_seq) +
                      ", does not follow the tip, record " + std::to_string(tip_.seq) + ": nothing was appended");
  }
  TxnRequest txn;
  txn.compare.push_back({keys_.leader(), Compare::Target::create, Compare::Result::equal, fence_, {}});
  txn.compare.push_back({keys_.tip(), Compare::Target::mod, Compare::Result::equal, tip_.mod_revision, {}});
  txn.success.emplace_back(PutRequest{keys_.entry(last_seq), std::string(batch)});
  txn.success.emplace_back(PutRequest{keys_.tip(), std::to_string(last_seq)});
  auto answer = etcd_.txn(txn);
  if (!answer) {
    failed_ = true;
    return answer.error();
  }
  if (!answer.value().succeeded) {
    failed_ = true;
    return broken_log("fenced: the leader key is no longer this member's (fence " + std::to_string(fence_) +
                      "), or the log's tip moved past record " + std::to_string(tip_.seq) + "; nothing was appended");
  }
  tip_ = Tip{last_seq, answer.value().revision, answer.value().revision};
  return Appended{last_seq, answer.value().revision};
}

}  // namespace hf3fs_meta::server::ha
