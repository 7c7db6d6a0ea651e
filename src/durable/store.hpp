// Store: a MetadataState made durable. Locks the data directory, recovers the state from it,
// subscribes a Journal to the state's changes, and takes snapshots (on demand, when the journal has
// grown past a size, and again every second while the journal is failed, since a snapshot is what
// lets it write again).
//
// A failed journal write or sync: every call that touches the state holds a Gate; settle() waits
// for them all, cuts the journal back to its last acknowledged record and rebuilds the state from
// the data dir (as a restart would), so that no change answered 503 stays applied. Callers settle
// before answering a failure and before serving anything while one is pending.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

struct StoreStats {
  std::uint64_t snapshots = 0;
  std::uint64_t snapshot_failures = 0;
  std::uint64_t rollbacks = 0;  // journal failures rolled back (settle)
  std::uint64_t last_snapshot_bytes = 0;
  std::uint64_t last_snapshot_seq = 0;  // the change the newest snapshot in the data dir holds up to
  double last_snapshot_seconds = 0;
  double snapshot_seconds_total = 0;
  double recovery_seconds = 0;
};

class Store {
 public:
  struct Options {
    std::filesystem::path dir;
    FsyncMode mode = FsyncMode::everysec;
    std::uint64_t snapshot_after_bytes = std::uint64_t{64} << 20;  // 0: only on request
    std::size_t dedup_retained_bytes = std::size_t{256} << 20;  // Journal::Options
    decltype(Journal::Options::replicate) replicate{};           // Journal::Options
    std::size_t replicate_in_flight = 1;                          // Journal::Options
    std::chrono::microseconds replicate_gather{0};                // Journal::Options
  };

  // `state` must be empty and outlive the Store. The recovered dedup records are in recovered().
  // With options.replicate, recovery stops at the newest snapshot (cut_journal_after_snapshot).
  static Result<std::unique_ptr<Store>> open(Options options, MetadataState& state);
  ~Store();  // unsubscribes; takes no snapshot (shutdown() does)

  // A snapshot now, on this thread. Returns its size in bytes.
  Result<std::uint64_t> snapshot();
  // The clean-shutdown snapshot, then the background thread stops.
  Result<std::uint64_t> shutdown();

  // Held (shared) by every call into the state, from the journal-failure check to its write_through.
  std::shared_lock<std::shared_mutex> gate() { return std::shared_lock(gate_); }
  // Returns once every call that held a Gate when it was called has let it go (an HA member stepping
  // down: every change admitted as leader has appended its record).
  void barrier() { std::unique_lock wait(gate_); }
  // If a journal failure left changes that were not acknowledged: waits for every Gate, rolls them
  // back (Journal::roll_back, then recovery into the state) and returns the seq kept; an error
  // leaves it pending (the caller answers 503 and the next call tries again). Without a failure,
  // at once. Not under a Gate.
  Result<std::uint64_t> settle();

  // An HA standby behind its cluster's compacted log, while it runs: `bytes` (the leader's snapshot,
  // map_newest_snapshot's) become the data dir's newest snapshot (install_snapshot) and the state,
  // and the journal follows it. Waits for every Gate; each record must be acknowledged (a standby's
  // are). Returns the snapshot's request-id answers (for the Router's dedup cache). An error before
  // the files change (bytes that are not a whole snapshot, no newer than the state) changes nothing.
  Result<std::vector<DedupEntry>> install_snapshot(std::string_view bytes);

  // The newest snapshot, mapped (map_newest_snapshot), never while one is being written or removed.
  Result<FileBytes> newest_snapshot() const;

  Recovered& recovered() noexcept { return recovered_; }
  Journal& journal() noexcept { return *journal_; }
  StoreStats stats() const;
  const Options& options() const noexcept { return options_; }

 private:
  Store(Options options, MetadataState& state, DirLock lock);
  void background();

  Options options_;
  MetadataState& state_;
  DirLock lock_;
  Recovered recovered_;
  std::unique_ptr<Journal> journal_;
  std::shared_mutex gate_;     // see gate(); taken before snapshot_mutex_
  mutable std::mutex snapshot_mutex_;  // one snapshot (or rollback) at a time
  mutable std::mutex mutex_;
  StoreStats stats_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace hf3fs_meta::durable
