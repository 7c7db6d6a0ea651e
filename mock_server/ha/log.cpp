#include "ha/log.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <thread>
#include <variant>

#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"

namespace hf3fs_meta::server::ha {

namespace {

EtcdError broken_log(std::string message) {
  return EtcdError{EtcdError::Kind::not_applied, 0, std::move(message)};
}

}  // namespace

EtcdResult<std::uint64_t> tip_seq(const Keys& keys, const KeyValue& kv) {
  std::uint64_t seq = 0;
  const auto [end, ec] = std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), seq);
  if (ec != std::errc() || end != kv.value.data() + kv.value.size() || seq == 0) {
    return broken_log("the log's tip key " + keys.tip() + " holds \"" + kv.value.substr(0, 40) +
                      "\", not a seq: was it written by hf3fs-meta?");
  }
  return seq;
}

EtcdResult<Tip> read_tip(EtcdClient& etcd, const Keys& keys) {
  auto read = etcd.range({keys.tip()});
  if (!read) return read.error();
  Tip tip;
  tip.revision = read.value().revision;
  if (read.value().kvs.empty()) return tip;
  const KeyValue& kv = read.value().kvs.front();
  auto seq = tip_seq(keys, kv);
  if (!seq) return seq.error();
  tip.seq = seq.value();
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
  // Read only after a lost answer (read_back), at the revision of the failed compare.
  txn.failure.emplace_back(RangeRequest{keys_.entry(last_seq)});
  txn.failure.emplace_back(RangeRequest{keys_.tip()});
  auto appended = send(txn, batch, last_seq);
  if (!appended) {
    failed_ = true;
    return appended.error();
  }
  tip_ = Tip{last_seq, appended.value().revision, appended.value().revision};
  return appended;
}

EtcdResult<LogWriter::Appended> LogWriter::send(const TxnRequest& txn, std::string_view batch,
                                                std::uint64_t last_seq) {
  // Rounds of attempts that fail at once (no member has a leader) are spaced so as not to spin.
  constexpr auto kRoundsApart = std::chrono::milliseconds(50);
  const auto deadline = std::chrono::steady_clock::now() + etcd_.options().call_timeout;
  std::optional<EtcdError> lost;  // the first attempt whose answer was lost: it may have committed
  for (;;) {
    const auto round = std::chrono::steady_clock::now();
    auto answer = etcd_.txn(txn, deadline);
    if (answer && answer.value().succeeded) {
      return Appended{last_seq, answer.value().revision, lost ? lost->message : std::string()};
    }
    if (answer) return lost ? read_back(answer.value(), batch, last_seq, *lost) : fenced();
    if (answer.error().kind == EtcdError::Kind::unknown && !lost) lost = answer.error();
    // Certainly not taken, and no copy before it may have been: nothing was appended.
    if (!lost) return answer.error();
    if (std::chrono::steady_clock::now() >= deadline) {
      return EtcdError{EtcdError::Kind::unknown, answer.error().code,
                       "the answer to the entry of records up to " + std::to_string(last_seq) + " was lost (" +
                           lost->message + ") and no etcd member said within " +
                           std::to_string(etcd_.options().call_timeout.count()) +
                           " ms whether the log took it; the last: " + answer.error().message};
    }
    std::this_thread::sleep_until(std::min(round + kRoundsApart, deadline));
  }
}

EtcdResult<LogWriter::Appended> LogWriter::read_back(const TxnResponse& failed, std::string_view batch,
                                                     std::uint64_t last_seq, const EtcdError& lost) const {
  const auto* entry = failed.responses.size() == 2 ? std::get_if<RangeResponse>(&failed.responses[0]) : nullptr;
  const auto* tip = failed.responses.size() == 2 ? std::get_if<RangeResponse>(&failed.responses[1]) : nullptr;
  if (!entry || !tip) {
    return EtcdError{EtcdError::Kind::unknown, 0,
                     "etcd's answer to a repeated append holds no reads of the entry and the tip (after " +
                         lost.message + ")"};
  }
  // Entries are put only at the tip + 1, so whatever holds this key holds records after seq(): the
  // same bytes are this entry (put by a copy whose answer was lost).
  if (!entry->kvs.empty() && entry->kvs.front().value == batch) {
    return Appended{last_seq, entry->kvs.front().mod_revision, lost.message};
  }
  std::uint64_t tip_now = 0;
  if (!tip->kvs.empty()) {
    auto seq = tip_seq(keys_, tip->kvs.front());
    if (!seq) return seq.error();
    tip_now = seq.value();
  }
  // The tip reached this entry's key, and the entry is gone: compacted away, whoever wrote it.
  if (entry->kvs.empty() && tip_now >= last_seq) {
    return EtcdError{EtcdError::Kind::unknown, 0,
                     "after a lost answer (" + lost.message + "), the log's tip is record " + std::to_string(tip_now) +
                         " and its entry up to record " + std::to_string(last_seq) +
                         " was compacted away: whose it was cannot be told"};
  }
  // Another's entry at this key, or a tip that moved short of it or a fence that is gone: the tip
  // will never again be where this writer left it, so no copy can commit.
  return fenced();
}

EtcdError LogWriter::fenced() const {
  return broken_log("fenced: the leader key is no longer this member's (fence " + std::to_string(fence_) +
                    "), or the log's tip moved past record " + std::to_string(tip_.seq) + "; nothing was appended");
}

}  // namespace hf3fs_meta::server::ha
