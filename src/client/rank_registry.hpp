// The ranks a client restores when the server forgets them (docs/design.md, "Retries"), and the single
// flight that restores each: when several calls meet "Rank N not initialized" together, one sends
// the initialize and the others wait for its outcome.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta::internal {

class RankRegistry {
 public:
  // Registers the rank, or replaces its registration; nothing is checked or sent here.
  void add(Rank rank, std::int64_t num_pages, Role role);
  // Forgets the rank, unless a restore of it is in flight (its waiters hold on to the entry).
  void remove(Rank rank);
  // Forgets every rank but those whose restore is in flight, as remove() does each.
  void clear();

  // Bumped by every restore. An attempt notes it before sending, so that a rank restored by another
  // call after that is not initialized a second time.
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

  enum class Outcome { restored, unregistered, failed };
  struct Restored {
    Outcome outcome = Outcome::unregistered;
    std::optional<Error> failure;  // when failed: the initialize's error
  };
  // Sends the initialize with the registered parameters.
  using Initialize = std::function<Result<std::string>(std::int64_t num_pages, Role role)>;

  // Restores `rank` unless it was restored since `epoch_at_send`: the first caller runs
  // `initialize` (outside the lock), the others wait for its outcome, each no longer than its
  // `max_wait` (then failed, with a timeout error). An exception from `initialize` fails the
  // waiters and is rethrown to the caller that ran it.
  Restored restore(Rank rank, std::uint64_t epoch_at_send, std::chrono::nanoseconds max_wait,
                   const Initialize& initialize);

 private:
  struct Flight {
    bool done = false;
    std::optional<Error> error;
  };
  struct Entry {
    std::int64_t num_pages = 0;
    Role role = Role::worker;
    std::uint64_t restored_epoch = 0;  // epoch_ when this rank was last restored
    std::shared_ptr<Flight> flight;    // the initialize in flight for it, if any
  };
  void finish(Entry& entry, Flight& flight, std::optional<Error> error);

  std::mutex mutex_;
  std::condition_variable done_;
  std::unordered_map<Rank, Entry> entries_;
  std::atomic<std::uint64_t> epoch_{0};
};

}  // namespace hf3fs_meta::internal
