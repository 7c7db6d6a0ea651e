#include "ha/log.hpp"

#include <charconv>

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
  auto read = etcd.range(range);
  if (!read) return read.error();
  std::uint64_t expected = after_seq + 1;
  for (KeyValue& kv : read.value().kvs) {
    const std::uint64_t seq = keys.seq_of(kv.key);
    if (seq != expected) {
      return broken_log("the log has no entry " + std::to_string(expected) + " (found " +
                        (seq == 0 ? "a key that is not an entry" : "entry " + std::to_string(seq)) +
                        "): it was compacted away, so this member needs a snapshot");
    }
    out.entries.push_back({seq, std::move(kv.value), kv.mod_revision});
    ++expected;
  }
  if (out.entries.empty()) {
    return broken_log("the log's tip is " + std::to_string(tip.value().seq) + " but it has no entry after " +
                      std::to_string(after_seq) + ": they were compacted away, so this member needs a snapshot");
  }
  return out;
}

LogWriter::LogWriter(EtcdClient& etcd, const Keys& keys, std::int64_t fence, Tip tip)
    : etcd_(etcd), keys_(keys), fence_(fence), tip_(tip) {}

EtcdResult<LogWriter::Appended> LogWriter::append(std::string_view batch) {
  if (failed_) return broken_log("this log writer already failed: it appends nothing more");
  const std::uint64_t seq = tip_.seq + 1;
  TxnRequest txn;
  txn.compare.push_back({keys_.leader(), Compare::Target::create, Compare::Result::equal, fence_, {}});
  txn.compare.push_back({keys_.tip(), Compare::Target::mod, Compare::Result::equal, tip_.mod_revision, {}});
  txn.success.emplace_back(PutRequest{keys_.entry(seq), std::string(batch)});
  txn.success.emplace_back(PutRequest{keys_.tip(), std::to_string(seq)});
  auto answer = etcd_.txn(txn);
  if (!answer) {
    failed_ = true;
    return answer.error();
  }
  if (!answer.value().succeeded) {
    failed_ = true;
    return broken_log("fenced: the leader key is no longer this member's (fence " + std::to_string(fence_) +
                      "), or the log's tip moved past " + std::to_string(tip_.seq) + "; nothing was appended");
  }
  tip_ = Tip{seq, answer.value().revision, answer.value().revision};
  return Appended{seq, answer.value().revision};
}

}  // namespace hf3fs_meta::server::ha
