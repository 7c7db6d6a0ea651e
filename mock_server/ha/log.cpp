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
    : etcd_(etcd), keys_(keys), fence_(fence), handed_(tip.seq), appended_(tip.seq) {}

std::uint64_t LogWriter::seq() const {
  std::lock_guard lock(mutex_);
  return appended_;
}

bool LogWriter::failed() const {
  std::lock_guard lock(mutex_);
  return failed_locked();
}

EtcdResult<LogWriter::Appended> LogWriter::append(std::string_view batch, std::uint64_t last_seq) {
  const auto deadline = std::chrono::steady_clock::now() + etcd_.options().call_timeout;
  const auto run = record_run(batch);
  std::unique_lock lock(mutex_);
  // The journal hands batches out in order, but their calls may get here in another.
  moved_.wait_until(lock, deadline, [&] { return failed_locked() || !run || run.value().first <= handed_ + 1; });
  if (failed_locked()) return broken_log("this log writer already failed: it appends nothing more");
  // Exactly the records after the last batch: a batch that begins at or before it would give a
  // record a second entry (a fork that followers cannot apply), one that begins after it a gap.
  // Either means the journal no longer numbers records as the log does: the leader must step down
  // and read the log again, so nothing more is appended.
  if (!run || run.value().first != handed_ + 1 || run.value().last != last_seq) {
    failed_from_ = std::min(failed_from_, handed_ + 1);
    moved_.notify_all();
    return broken_log("an entry of records " +
                      (run ? std::to_string(run.value().first) + "-" + std::to_string(run.value().last)
                           : "that cannot be read (" + run.error().message + ")") +
                      ", said to end at record " + std::to_string(last_seq) + ", does not follow record " +
                      std::to_string(handed_) + " (the last handed to the log): nothing was appended");
  }
  const std::uint64_t after = handed_;
  handed_ = last_seq;
  moved_.notify_all();
  lock.unlock();

  TxnRequest txn;
  txn.compare.push_back({keys_.leader(), Compare::Target::create, Compare::Result::equal, fence_, {}});
  if (after == 0) {  // the first entry ever: no tip yet
    txn.compare.push_back({keys_.tip(), Compare::Target::mod, Compare::Result::equal, 0, {}});
  } else {
    txn.compare.push_back({keys_.tip(), Compare::Target::value, Compare::Result::equal, 0, std::to_string(after)});
  }
  txn.success.emplace_back(PutRequest{keys_.entry(last_seq), std::string(batch)});
  txn.success.emplace_back(PutRequest{keys_.tip(), std::to_string(last_seq)});
  // Read when the compare fails (verdict), at the revision it failed at.
  txn.failure.emplace_back(RangeRequest{keys_.entry(last_seq)});
  txn.failure.emplace_back(RangeRequest{keys_.tip()});
  auto appended = send(txn, batch, after, last_seq, deadline);

  lock.lock();
  if (appended) {
    appended_ = std::max(appended_, last_seq);
  } else {
    failed_from_ = std::min(failed_from_, after + 1);
  }
  moved_.notify_all();
  return appended;
}

EtcdResult<LogWriter::Appended> LogWriter::send(const TxnRequest& txn, std::string_view batch, std::uint64_t after,
                                                std::uint64_t last_seq, EtcdClient::Deadline deadline) {
  // Rounds of attempts that fail at once (no member has a leader) are spaced so as not to spin.
  constexpr auto kRoundsApart = std::chrono::milliseconds(50);
  std::optional<EtcdError> lost;  // the first attempt whose answer was lost: it may have committed
  const auto too_late = [&](const std::string& last) {
    return EtcdError{EtcdError::Kind::unknown, 0,
                     "the answer to the entry of records up to " + std::to_string(last_seq) + " was lost (" +
                         lost->message + ") and no etcd member said within " +
                         std::to_string(etcd_.options().call_timeout.count()) +
                         " ms whether the log took it; the last: " + last};
  };
  for (;;) {
    const auto round = std::chrono::steady_clock::now();
    auto answer = etcd_.txn(txn, deadline);
    if (answer && answer.value().succeeded) {
      return Appended{last_seq, answer.value().revision, lost ? lost->message : std::string()};
    }
    if (answer) {
      auto said = verdict(answer.value(), batch, after, last_seq, lost.has_value());
      if (!said) return said.error();
      switch (said.value().first) {
        case Verdict::taken:
          return Appended{last_seq, said.value().second, lost ? lost->message : std::string()};
        case Verdict::early:
          // Sent again once the entry before it is in; if that never comes, neither does this one.
          if (wait_for_append_of(after, deadline)) continue;
          if (lost) return too_late("the entry before it was not appended");
          return broken_log("the entry before records " + std::to_string(after + 1) + "-" + std::to_string(last_seq) +
                            " was not appended, so neither was this one");
        case Verdict::compacted:
          return EtcdError{EtcdError::Kind::unknown, 0,
                           "after a lost answer (" + lost->message +
                               "), the log's entry up to record " + std::to_string(last_seq) +
                               " was compacted away: whose it was cannot be told"};
        case Verdict::fenced:
          return fenced(after);
      }
    }
    if (answer.error().kind == EtcdError::Kind::unknown && !lost) lost = answer.error();
    // Certainly not taken, and no copy before it may have been: nothing was appended.
    if (!lost) return answer.error();
    if (std::chrono::steady_clock::now() >= deadline) return too_late(answer.error().message);
    std::this_thread::sleep_until(std::min(round + kRoundsApart, deadline));
  }
}

EtcdResult<std::pair<LogWriter::Verdict, std::int64_t>> LogWriter::verdict(const TxnResponse& failed,
                                                                           std::string_view batch,
                                                                           std::uint64_t after,
                                                                           std::uint64_t last_seq,
                                                                           bool lost) const {
  const auto* entry = failed.responses.size() == 2 ? std::get_if<RangeResponse>(&failed.responses[0]) : nullptr;
  const auto* tip = failed.responses.size() == 2 ? std::get_if<RangeResponse>(&failed.responses[1]) : nullptr;
  if (!entry || !tip) {
    return EtcdError{EtcdError::Kind::unknown, 0,
                     "etcd's answer to an append whose compare failed holds no reads of the entry and the tip"};
  }
  // Entries are put only at the tip + 1, so whatever holds this key holds records after `after`:
  // the same bytes, after an answer was lost, are this entry (put by that copy). (Without one, they
  // are another writer's, who had the same fence: this one is fenced.)
  if (lost && !entry->kvs.empty() && entry->kvs.front().value == batch) {
    return std::pair{Verdict::taken, entry->kvs.front().mod_revision};
  }
  std::uint64_t tip_now = 0;
  if (!tip->kvs.empty()) {
    auto seq = tip_seq(keys_, tip->kvs.front());
    if (!seq) return seq.error();
    tip_now = seq.value();
  }
  if (tip_now < after) return std::pair{Verdict::early, failed.revision};
  // The tip reached this entry's key, and the entry is gone: compacted away, whoever wrote it.
  if (lost && entry->kvs.empty() && tip_now >= last_seq) return std::pair{Verdict::compacted, failed.revision};
  // Another's entry at this key, or a tip that moved elsewhere, or a fence that is gone: the tip
  // will never again be where this entry follows, so no copy can commit.
  return std::pair{Verdict::fenced, failed.revision};
}

bool LogWriter::wait_for_append_of(std::uint64_t after, EtcdClient::Deadline deadline) {
  std::unique_lock lock(mutex_);
  moved_.wait_until(lock, deadline, [&] { return appended_ >= after || failed_from_ <= after; });
  return appended_ >= after;
}

EtcdError LogWriter::fenced(std::uint64_t after) const {
  return broken_log("fenced: the leader key is no longer this member's (fence " + std::to_string(fence_) +
                    "), or the log's tip moved past record " + std::to_string(after) +
                    "; nothing was appended");
}

}  // namespace hf3fs_meta::server::ha
