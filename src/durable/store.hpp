// Store: a MetadataState made durable. Locks the data directory, recovers the state from it,
// subscribes a Journal to the state's changes, and takes snapshots (on demand, when the journal has
// grown past a size, and again every second while the journal is failed, since a snapshot is what
// lets it write again).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

struct StoreStats {
  std::uint64_t snapshots = 0;
  std::uint64_t snapshot_failures = 0;
  std::uint64_t last_snapshot_bytes = 0;
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
  };

  // `state` must be empty and outlive the Store. The recovered dedup records are in recovered().
  static DirResult<std::unique_ptr<Store>> open(Options options, MetadataState& state);
  ~Store();  // unsubscribes; takes no snapshot (shutdown() does)

  // A snapshot now, on this thread. Returns its size in bytes.
  DirResult<std::uint64_t> snapshot();
  // The clean-shutdown snapshot, then the background thread stops.
  DirResult<std::uint64_t> shutdown();

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
  std::mutex snapshot_mutex_;  // one snapshot at a time
  mutable std::mutex mutex_;
  StoreStats stats_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace hf3fs_meta::durable
