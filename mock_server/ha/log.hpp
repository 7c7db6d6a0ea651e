// The replicated log in etcd (keys.hpp): the leader appends batches of journal records, standbys
// and a new leader read them back in order. Seqs are the records' own (the journal's), so a member
// that recovered up to record S from its data dir reads on from the entry that holds S + 1.
//
// An append is one Txn: if the leader key's create revision is still the writer's fence and the
// tip key was last changed where the writer left it, put the entry and move the tip. The first
// compare keeps a deposed leader out; the second keeps two writers with one fence (which a bug
// could make) from interleaving. A failed compare applies nothing: the writer is fenced.
//
// The same compares make an append safe to repeat: of all copies of one Txn at most one commits
// (the first moves the tip, and the tip never comes back). So when an append's answer is lost (its
// member stopped, say), the writer sends it again through another member instead of giving up, and
// the Txn's failure branch reads the entry and the tip back: a copy that committed before shows its
// bytes there; a tip left where the writer left it lets the repeat commit; anything else means the
// entry can never commit. Only when no member answers within the etcd call's timeout does the
// outcome stay unknown.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"

namespace hf3fs_meta::server::ha {

// The log's last entry as etcd has it.
struct Tip {
  std::uint64_t seq{0};          // the last record's; 0: an empty log
  std::int64_t mod_revision{0};  // the tip key's; 0 when there is none
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
  // Appends `batch`, the records after seq() up to `last_seq`, as the next entry. A batch whose
  // records are not exactly seq() + 1 to `last_seq` (record_run) is refused before etcd is asked:
  // two entries never hold one record, so a log is never forked. An attempt whose answer was lost
  // is repeated (see the top) until the log says what became of the entry or the etcd call's
  // timeout has passed since the first. Errors: not_applied when fenced (the message says so), when
  // the batch does not follow the tip, or when etcd certainly did not take it; unknown when no
  // member answered in time (the entry may yet be in the log: the writer must step down and read
  // the log to learn it). After any error the writer appends nothing more.
  EtcdResult<Appended> append(std::string_view batch, std::uint64_t last_seq);

  std::uint64_t seq() const noexcept { return tip_.seq; }
  bool failed() const noexcept { return failed_; }

 private:
  // Sends `txn` (the append of `batch`) until its outcome is known or the time is up.
  EtcdResult<Appended> send(const TxnRequest& txn, std::string_view batch, std::uint64_t last_seq);
  // What a compare that failed after a lost answer says, from the failure branch's reads.
  EtcdResult<Appended> read_back(const TxnResponse& failed, std::string_view batch, std::uint64_t last_seq,
                                 const EtcdError& lost) const;
  EtcdError fenced() const;

  EtcdClient& etcd_;
  const Keys& keys_;
  std::int64_t fence_;
  Tip tip_;
  bool failed_ = false;
};

}  // namespace hf3fs_meta::server::ha
