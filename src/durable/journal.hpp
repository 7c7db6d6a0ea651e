// The journal writer: the change sink of a durable MetadataState (docs/design.md, "Journal records", "Disk errors").
//
// append() runs under the state's lock and only serializes the record into memory, so records are
// in apply order. write_through() does the write(2), outside the lock, for every record appended so
// far (one writer at a time: a caller that finds its record already written returns at once). A
// syncer thread does every fdatasync: `always` waiters are woken when one covers their record (group
// commit: one fdatasync for all the records written meanwhile; nobody waits on a timer), `everysec`
// syncs at most a second after a write, `no` leaves it to the OS. A failed write or sync sticks:
// the journal refuses further writes until a snapshot has put memory and disk in agreement again.
//
// What is acknowledged: with Options::replicate (--ha-etcd), a record once the replicated log has it;
// otherwise, with `always`, a record once an fdatasync covered it; with `everysec` and
// `no`, a record once its write(2) succeeded (a later failed sync takes nothing back: those changes
// were answered, and the next snapshot makes them durable). After a failure, roll_back() cuts the
// files back to the end of the last acknowledged record, so that recovering from them gives the
// state every acknowledged change made and no other (Store::roll_back).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "durable/data_dir.hpp"
#include "durable/record.hpp"

namespace hf3fs_meta::durable {

enum class FsyncMode { always, everysec, no };
// The modes' names (--fsync, logs): parse_fsync_mode, to_string and the option's help read this.
struct FsyncModeName {
  FsyncMode mode;
  std::string_view name;
};
inline constexpr FsyncModeName kFsyncModes[] = {
    {FsyncMode::always, "always"}, {FsyncMode::everysec, "everysec"}, {FsyncMode::no, "no"}};
std::optional<FsyncMode> parse_fsync_mode(std::string_view text);
std::string_view to_string(FsyncMode mode) noexcept;
std::string fsync_mode_names(std::string_view separator);  // "always|everysec|no" with "|"

struct JournalStats {
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;  // written, all files
  std::uint64_t fsyncs = 0;
  std::uint64_t fsync_ns_total = 0;
  std::uint64_t fsync_ns_max = 0;
  std::uint64_t disk_errors = 0;
};

// While alive, records appended by this thread carry `tag` (the request being handled).
class TagScope {
 public:
  explicit TagScope(const DedupTag* tag) noexcept;
  ~TagScope();
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  const DedupTag* previous_;
};

class Journal {
 public:
  struct Options {
    std::filesystem::path dir;
    FsyncMode mode = FsyncMode::everysec;
    // The last request-id answers are kept for the next snapshot, in the dedup cache's compact form,
    // up to the weight the cache may hold (the server's --dedup-max-bytes, dedup_weight()), the
    // oldest dropped first: the answers the cache still holds are the newest, and weigh no more.
    // (Only a record whose answer the cache did not keep, a 503's, also weighs here.)
    std::size_t dedup_retained_bytes = std::size_t{256} << 20;
    // --ha-etcd: not empty, a record is acknowledged once this has put it in the
    // replicated log, and not before (whatever the fsync mode says of the local files). Replicator
    // threads hand it the records written and not yet handed over, framed as in the files
    // (log_format.hpp), whole and in order, at most replicate_batch_bytes at a time (a larger record
    // alone, which etcd refuses beyond its request limit, 1.5 MiB by default: a record is bounded by
    // the request that made it, --max-body-bytes, which --ha-etcd must keep below that), at most
    // replicate_in_flight calls at a time: what is written while they are all busy goes into the
    // next (group commit). The calls begin in the records' order but may overlap and end in any
    // order; their outcomes are settled in the records' order. `last_seq` is the batch's last
    // record. A failure fails the journal as a failed write does: the batch's
    // records and every later one are answered 503 and rolled back. A local failure (a write, a
    // sync) does not stop it: what was written before it is still replicated and answered as the
    // log's answer says, only the records never written are answered 503 at once, and roll_back
    // waits for those replications, keeping every record the log took. The fsync mode is then `no`:
    // what is acknowledged is in the replicated log, and the local files only make a restart
    // quicker (a rotated file is still synced, as is the last at a clean shutdown).
    std::function<Result<void>(std::string_view records, std::uint64_t last_seq)> replicate{};
    std::size_t replicate_batch_bytes = std::size_t{1} << 20;
    // More than one call in flight keeps the log busy while the clients an append answered send
    // their next changes (docs/performance.md, "High availability"); 1 is one call at a time.
    std::size_t replicate_in_flight = 1;
    // Group commit that fills its batches: before a batch goes while none is in flight, wait up to
    // this long until as many records wait as the last batch carried plus those written while it
    // was under way (the clients it answered send their next changes about a round trip later, so a
    // batch carries every client's change, not half of them). 0: a batch goes at once.
    std::chrono::microseconds replicate_gather{0};
  };
  // What a waiter on a record is told: success once an fdatasync covered it (replicated, with
  // Options::replicate; or acknowledged before any failure), the failure (Errc::journal_failed)
  // otherwise.
  using Done = std::function<void(const Result<void>& durable)>;

  // Continues the journal recovery ended in (its torn tail cut off), or starts journal-<seq+1>.
  static Result<std::unique_ptr<Journal>> open(Options options, const Recovered& recovered);
  ~Journal();  // writes and syncs what is left (a clean shutdown loses nothing)
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The change sink. Under the state's lock.
  void append(const Change& change);
  // The last record this thread appended since reset_thread_seq() (0: none): the caller's record.
  static std::uint64_t thread_seq() noexcept;
  static void reset_thread_seq() noexcept;

  // write(2) of every record appended so far, if `seq` is not written yet. An error
  // (Errc::journal_failed): not on disk.
  Result<void> write_through(std::uint64_t seq);
  // Calls `done` once `seq` is synced, or replicated (or that failed): at once on this thread if it already is,
  // otherwise on the syncer thread.
  void when_durable(std::uint64_t seq, Done done);

  // Snapshots. At the instant the image is taken (under the state's lock): records after `seq` go to
  // a new file.
  void rotate_at(std::uint64_t seq);
  // Then, outside the state's lock: the request-id answers up to `seq` still kept, for the snapshot.
  // Copied a few thousand at a time: when every allocate carries a request id there are millions,
  // and copying them at the instant kept every writer waiting. (The oldest ones, which the byte
  // bound drops meanwhile, are not in it.)
  std::vector<DedupEntry> tagged_up_to(std::uint64_t seq) const;
  // Off the I/O threads, after rotate_at: the new file exists durably, the old one is synced.
  // Returns the new file's name.
  struct FileName {
    std::string name;
  };
  Result<FileName> finish_rotation();
  // The snapshot covering everything up to the rotation failed: forget an unused new file.
  void abandon_rotation();
  // The snapshot of every change up to `snapshot_seq` is durable: those changes are acknowledged
  // (waiters woken), and a failed journal may write again.
  void clear_failure(std::uint64_t snapshot_seq);

  // After a failure, until roll_back() and the Store's rebuild are done: memory may hold changes
  // that were not acknowledged.
  bool rollback_pending() const noexcept { return rollback_pending_.load(std::memory_order_acquire); }
  // With every change to the state stopped: cuts the files back to the last acknowledged record,
  // forgets every record after it, and returns its seq. Repeatable until rollback_done().
  Result<std::uint64_t> roll_back();
  void rollback_done() noexcept { rollback_pending_.store(false, std::memory_order_release); }

  // An HA standby behind its cluster's compacted log installed the leader's snapshot of change `seq`
  // (install_snapshot, which made journal-<seq+1>), with every change stopped and every record
  // acknowledged: records now go to that file, after `seq`, and the snapshot's request-id answers
  // are the ones kept. An error (Errc::inconsistent) changes nothing: records not yet acknowledged,
  // a rotation or a failure pending, or `seq` not past the last record.
  Result<void> continue_after(std::uint64_t seq, const std::vector<DedupEntry>& dedup);

  std::uint64_t bytes_since_rotation() const;
  // Success while the journal writes; after a failed write or sync, until a snapshot clears it, the
  // failure (Errc::journal_failed, the message naming the failed call).
  Result<void> writable() const;
  JournalStats stats() const;
  FsyncMode mode() const noexcept { return options_.mode; }
  // Whether a record is acknowledged only once when_durable() says so (--fsync always, or
  // replicated), rather than once written.
  bool acknowledged_late() const noexcept { return options_.mode == FsyncMode::always || replicates(); }
  bool replicates() const noexcept { return static_cast<bool>(options_.replicate); }

 private:
  explicit Journal(Options options);
  void sync_loop();
  // `disk`: a write or sync of the data dir failed (counted in stats().disk_errors); not for a
  // replication that failed, which is no disk's.
  void fail_locked(std::string error, bool disk = true);
  void fail(std::string error);  // and tells every waiter
  Result<void> writable_locked() const;  // writable(), mutex_ held
  Result<void> switch_file();
  Result<void> open_file(std::uint64_t first_seq, bool create);

  Options options_;
  mutable std::mutex mutex_;  // everything below, except where noted
  std::string buffer_;        // appended, not yet written, for the current file
  std::string next_buffer_;   // appended after a rotation point, for the next file
  std::optional<std::uint64_t> rotation_;  // the first seq of the next file
  std::uint64_t appended_ = 0;
  std::uint64_t written_ = 0;
  std::uint64_t durable_ = 0;
  // The end of the last acknowledged record (see the top): its seq, its file, the offset after it.
  struct Acked {
    std::uint64_t seq = 0;
    std::uint64_t file_first_seq = 0;
    std::uint64_t bytes = 0;
  } acked_;
  void ack_written_locked();  // everysec, no: what was written is acknowledged
  std::uint64_t bytes_since_rotation_ = 0;
  std::optional<std::string> failure_;
  std::atomic<bool> failed_{false};  // failure_ is set: read without the lock by writable()
  std::atomic<bool> rollback_pending_{false};
  JournalStats stats_;
  int fd_ = -1;
  std::uint64_t file_first_seq_ = 0;
  std::uint64_t file_bytes_ = 0;       // the current file's length as written
  std::vector<int> retired_fds_;       // earlier files not yet synced and closed (by the syncer)
  std::string new_file_;
  std::deque<DedupEntry> tagged_;      // the last request-id answers, for snapshots
  std::size_t tagged_bytes_ = 0;       // their dedup_weight()s
  void retain_tagged(DedupEntry tagged);  // mutex_ held (or no other thread yet)
  void retain_recovered(const std::vector<DedupEntry>& recovered);  // the same
  // Options::replicate: what was written and is not replicated yet, a run of whole records per
  // write, with where it went (the acknowledged end, acked_, follows the last record replicated).
  struct Written {
    std::string records;
    std::uint64_t file_first_seq = 0;
    std::uint64_t offset = 0;  // of `records` in that file
  };
  std::deque<Written> unreplicated_;
  // The batches handed to Options::replicate and not yet settled, in the records' order (the calls
  // run without mutex_; each fills in its outcome, and the front settles first). roll_back waits
  // on replication_settled_ until none is left and nothing written is left to replicate, so that it
  // never cuts off what the log took.
  struct Batch {
    std::string records;
    Acked end;
  };
  struct InFlight {
    Batch batch;
    std::optional<Result<void>> outcome;
  };
  std::list<InFlight> in_flight_;
  std::uint64_t handed_ = 0;       // the last record handed to a replicate call
  std::uint64_t gather_for_ = 1;   // records a batch waits for (Options::replicate_gather)
  bool gathering_ = false;         // a replicator waits for them: the others leave the batch to it
  std::condition_variable replication_settled_;
  std::condition_variable wake_replicators_;
  // Whether record `seq` may still be acknowledged by a replication under way or to come (it was
  // written, and replication has not failed).
  bool replication_pending_locked(std::uint64_t seq) const;
  // The waiters a failure answers: all of them, or (replication_pending_locked) those of records
  // not written.
  std::multimap<std::uint64_t, Done> take_unacknowledgeable_locked();
  void keep_for_replication_locked(std::string& records, std::uint64_t offset);
  // The next batch (whole records from the front of unreplicated_, taken out), its last record's
  // seq and the acknowledged end after it.
  Batch take_batch_locked();
  // A replicator thread: takes the next batch whenever one is waiting and fewer than
  // replicate_in_flight are in flight, and replicates it.
  void replicate_loop();
  // Options::replicate_gather's wait, mutex_ held.
  void gather_locked(std::unique_lock<std::mutex>& lock);
  // Replicates one batch, mutex_ held on entry and exit (released during the call), then settles
  // what can be.
  void replicate_locked(std::unique_lock<std::mutex>& lock);
  // Settles the batches at the front of in_flight_ whose calls have ended: wakes what they
  // acknowledged, or fails the journal. mutex_ held on entry and exit (released to wake).
  void settle_replicated_locked(std::unique_lock<std::mutex>& lock);
  std::multimap<std::uint64_t, Done> waiters_;
  bool stopping_ = false;
  std::condition_variable wake_syncer_;
  std::mutex write_mutex_;  // one write(2) sequence at a time
  std::thread syncer_;
  std::vector<std::thread> replicators_;  // Options::replicate: replicate_in_flight of them
};

}  // namespace hf3fs_meta::durable
