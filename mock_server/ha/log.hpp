// The replicated log in etcd (keys.hpp): the leader appends batches of journal records, standbys
// and a new leader read them back in order. Seqs are the records' own (the journal's), so a member
// that recovered up to record S from its data dir reads on from the entry that holds S + 1.
//
// An append is one Txn: if the leader key's create revision is still the writer's fence and the
// tip key holds the seq just before the entry's first record, put the entry and move the tip. The
// first compare keeps a deposed leader out; the second puts every entry at exactly the tip + 1, so
// two entries never hold one record (two writers with one fence, which a bug could make, cannot
// interleave either). A failed compare applies nothing.
//
// Comparing the tip's value (not its mod revision) lets an append be sent before the one before it
// has committed: its compare names a seq known at once. Appends therefore overlap (the journal
// keeps several in flight, Journal::Options::replicate_in_flight), each over its own connection.
// etcd may take them in another order than sent: one that arrives before the entry it follows
// fails its compare with the tip short of it, waits for that entry's append to end, and is sent
// again. The log takes them in order whatever happens: an entry commits only on the one before it.
//
// The same compares make an append safe to repeat: of all copies of one Txn at most one commits
// (the first moves the tip, and the tip never comes back). So when an append's answer is lost (its
// member stopped, say), the writer sends it again through another member instead of giving up, and
// the Txn's failure branch reads the entry and the tip back: a copy that committed before shows its
// bytes there; a tip left short of the entry lets a repeat commit; anything else means the entry
// can never commit. Only when no member answers within the etcd call's timeout does the outcome
// stay unknown.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"

namespace hf3fs_meta::server::ha {

// The log's last entry as etcd has it.
struct Tip {
  std::uint64_t seq{0};          // the last record's; 0: an empty log
  std::int64_t revision{0};      // the store's revision when read
};

EtcdResult<Tip> read_tip(EtcdClient& etcd, const Keys& keys);
// The seq the tip key's value holds; an error naming the key when it holds none.
EtcdResult<std::uint64_t> tip_seq(const Keys& keys, const KeyValue& kv);

struct LogEntry {
  std::uint64_t last_seq{0};  // of its last record
  std::string batch{};
  std::int64_t revision{0};  // the revision that put it
};

// The entries that hold the records after `after_seq`, in order, at most `limit` (0: all up to the
// tip), read at one revision. The first may also hold records up to `after_seq`. None while the tip
// is past `after_seq` means they were compacted away: an error that says the reader needs a
// snapshot. (Whether the records run on without a gap is for their reader: the journal's framing
// carries each record's seq.)
struct LogRead {
  std::vector<LogEntry> entries;
  std::int64_t revision{0};  // the store's revision the read saw
};
EtcdResult<LogRead> read_log(EtcdClient& etcd, const Keys& keys, std::uint64_t after_seq, std::int64_t limit = 0);

// The seqs of a batch's first and last records, read from the journal's framing (log_format.hpp,
// durable::record_span): an error unless the batch is whole records, each numbered one after the one
// before. (Checksums are for the reader that applies them: durable::replay_journal.)
struct RecordRun {
  std::uint64_t first{0};
  std::uint64_t last{0};
};
EtcdResult<RecordRun> record_run(std::string_view batch);

class LogWriter {
 public:
  // A leader's writer, fenced by `fence`, appending after `tip` (read after the campaign was won,
  // and after the log up to it was replayed).
  LogWriter(EtcdClient& etcd, const Keys& keys, std::int64_t fence, Tip tip);

  struct Appended {
    std::uint64_t seq = 0;
    std::int64_t revision = 0;
    // Not empty when an attempt's answer was lost and the log then said the entry is in (by a
    // repeat, or by that attempt): what was lost, for the leader's log.
    std::string lost_answer{};
  };
  // Appends `batch`, the records after the last batch handed to it up to `last_seq`, as the next
  // entry. Safe to call from several threads at once, each with the next batch in the records'
  // order: a call whose batch does not follow the last one handed over waits (within the etcd
  // call's timeout) for the call with the records before it to begin. A batch whose records are
  // not exactly the next ones (record_run) is refused before etcd is asked: two entries never hold
  // one record, so a log is never forked. An attempt whose answer was lost, or that reached etcd
  // before the entry it follows, is repeated (see the top) until the log says what became of the
  // entry or the etcd call's timeout has passed since the first. Errors: not_applied when fenced
  // (the message says so), when the batch does not follow, when the entry before it was not
  // appended, or when etcd certainly did not take it; unknown when no member answered in time (the
  // entry may yet be in the log: the writer must step down and read the log to learn it). After
  // any error the writer appends nothing more.
  EtcdResult<Appended> append(std::string_view batch, std::uint64_t last_seq);

  // The last record appended, and whether an append failed.
  std::uint64_t seq() const;
  bool failed() const;

 private:
  // Sends `txn` (the append of `batch`, after record `after`) until its outcome is known or
  // `deadline` has passed.
  EtcdResult<Appended> send(const TxnRequest& txn, std::string_view batch, std::uint64_t after,
                            std::uint64_t last_seq, EtcdClient::Deadline deadline);
  // What the failure branch of a compare that failed says (its reads of the entry and the tip).
  enum class Verdict : std::uint8_t { taken, early, compacted, fenced };
  EtcdResult<std::pair<Verdict, std::int64_t>> verdict(const TxnResponse& failed, std::string_view batch,
                                                       std::uint64_t after, std::uint64_t last_seq,
                                                       bool lost) const;
  // Waits until the entry ending at record `after` is appended (true), or its append failed or
  // `deadline` passed (false).
  bool wait_for_append_of(std::uint64_t after, EtcdClient::Deadline deadline);
  EtcdError fenced(std::uint64_t after) const;
  bool failed_locked() const noexcept { return failed_from_ != ~std::uint64_t{0}; }

  EtcdClient& etcd_;
  const Keys& keys_;
  std::int64_t fence_;
  mutable std::mutex mutex_;        // what follows
  std::condition_variable moved_;   // handed_, appended_ or failed_from_ moved
  std::uint64_t handed_;            // the last record of the last batch handed to append()
  std::uint64_t appended_;          // the last record the log took from this writer (or its tip)
  std::uint64_t failed_from_ = ~std::uint64_t{0};  // the first record of the first batch that failed
};

}  // namespace hf3fs_meta::server::ha
