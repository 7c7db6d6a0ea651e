// LogFollower: a standby's reading of the replicated log. It catches up with read_log from the last
// record it applied, then follows a watch on the log's keys from the revision that read saw, handing
// every entry, in order and once, to `apply`. When the watch ends (its etcd member died, or etcd
// canceled it), it reads again from where it is, through whichever member answers, and watches
// again. It stops for good when an entry cannot be applied or the log no longer holds what it needs
// (compacted: the member needs a snapshot), and says why.
//
// Entries are applied only as a run: each begins at the record after the last one applied. Only the
// first may also hold records the member has, when it started inside that entry (a snapshot or a
// data dir cut within a batch); whether it did is read from the log (the entry that holds the
// member's last record ends there or not). An entry that does not follow (a gap, or records the
// member already applied from another entry: a forked log) ends following with an error naming
// the seqs: nothing is skipped.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <optional>
#include <mutex>
#include <string>
#include <thread>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"
#include "ha/log.hpp"

namespace hf3fs_meta::server::ha {

// Whether `entry` follows a member whose last applied record is `applied`: it ends past it and
// begins right after it, or at or before it when `may_overlap` (the member's last record may be
// inside an entry: see above). The error names the seqs: the log has a gap or holds a record twice.
EtcdResult<void> check_follows(const LogEntry& entry, std::uint64_t applied, bool may_overlap);
// The same, given the entry's record run as record_run(entry.batch) read it.
EtcdResult<void> check_follows(const LogEntry& entry, const EtcdResult<RecordRun>& run, std::uint64_t applied,
                               bool may_overlap);

class LogFollower {
 public:
  // The entry's records after the member's applied seq, applied; an error says why it could not be.
  using Apply = std::function<EtcdResult<void>(const LogEntry& entry)>;
  // Following ended for good (not by stop()): why (needs_snapshot: the log no longer holds what the
  // member needs; an Apply error keeps its own flags).
  using Ended = std::function<void(EtcdError why)>;

  struct Options {
    std::int64_t read_limit = 64;                      // entries per catch-up read
    std::chrono::milliseconds retry_after{200};        // after a failed read, or a watch that ended at once
    // A watch through a member that lost its quorum stays open and silent. Every this long the tip
    // is read (through any member that answers): past what was applied, with no entry since the
    // last look, the watch has stalled and is started anew.
    std::chrono::milliseconds stall_check{2000};
    // Called with the log's tip as each such read saw it (on the follower's thread): a watch that
    // trickles is not stalled, yet the member falls behind, and only the tip says how far.
    std::function<void(std::uint64_t tip)> saw_tip{};
  };

  // Follows from the record after `applied_seq` on a thread of its own.
  LogFollower(EtcdClient& etcd, const Keys& keys, std::uint64_t applied_seq, Apply apply, Ended ended,
              Options options);
  LogFollower(EtcdClient& etcd, const Keys& keys, std::uint64_t applied_seq, Apply apply, Ended ended)
      : LogFollower(etcd, keys, applied_seq, std::move(apply), std::move(ended), Options{}) {}
  ~LogFollower();  // stop()
  LogFollower(const LogFollower&) = delete;
  LogFollower& operator=(const LogFollower&) = delete;

  void stop();
  // The last record applied.
  std::uint64_t applied() const noexcept { return applied_.load(std::memory_order_acquire); }
  // How many times it read the log to catch up (1 + one per watch that ended or stalled).
  std::uint64_t catch_ups() const noexcept { return catch_ups_.load(std::memory_order_relaxed); }

 private:
  void run();
  // Reads entries until the tip: the revision to watch from next; none after a failure (failed_
  // set: following ends) or when etcd did not answer (try again).
  std::optional<std::int64_t> catch_up();
  // Hands `entry` on unless it was handed on already; false once following failed (it did not
  // follow the last applied record, or apply refused it).
  bool deliver(const LogEntry& entry);
  // Before the first entry: whether the member's last record ends an entry (the next must then
  // begin right after it). False when etcd did not answer (try again).
  bool find_start();
  void fail(EtcdError why);
  bool wait_for(std::chrono::milliseconds duration);  // false: stopping
  // Waits while the watch delivers; returns when it ended, stalled, following failed, or stop().
  void watch_while_live();

  EtcdClient& etcd_;
  const Keys& keys_;
  Apply apply_;
  Ended ended_;
  Options options_;
  std::atomic<std::uint64_t> applied_;
  std::atomic<std::uint64_t> catch_ups_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;      // under mutex_
  bool watch_ended_ = false;   // under mutex_
  EtcdError why_;              // under mutex_: the failure that ends following
  std::atomic<bool> failed_{false};  // why_ is set: nothing more is applied
  // Where the next entry must begin: used by whichever thread delivers, the follower's (catch-up)
  // or its watch's, never both at once (a watch starts after a catch-up and is joined before the
  // next). Until the start is found, or while the member's last record is inside an entry, the
  // first entry may begin at or before it.
  bool start_found_ = false;
  bool at_entry_end_ = false;
  std::int64_t delivered_revision_ = 0;  // of the last entry handed on (0: none yet)
  std::thread thread_;
};

}  // namespace hf3fs_meta::server::ha
