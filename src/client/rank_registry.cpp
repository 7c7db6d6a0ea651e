#include "client/rank_registry.hpp"

#include <algorithm>
#include <utility>

namespace hf3fs_meta::internal {

void RankRegistry::add(Rank rank, std::int64_t num_pages, Role role) {
  std::lock_guard lock(mutex_);
  Entry& entry = entries_[rank];
  entry.num_pages = num_pages;
  entry.role = role;
}

void RankRegistry::remove(Rank rank) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(rank); it != entries_.end() && !it->second.flight) entries_.erase(it);
}

void RankRegistry::clear() {
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [](const auto& entry) { return !entry.second.flight; });
}

RankRegistry::Restored RankRegistry::restore(Rank rank, std::uint64_t epoch_at_send, std::chrono::nanoseconds max_wait,
                                             const Initialize& initialize) {
  std::unique_lock lock(mutex_);
  auto it = entries_.find(rank);
  if (it == entries_.end()) return {Outcome::unregistered, std::nullopt};
  // Not erased while its flight is on (remove), so the reference outlives the unlock below.
  Entry& entry = it->second;
  if (entry.restored_epoch > epoch_at_send) return {Outcome::restored, std::nullopt};  // restored since we sent
  if (auto flight = entry.flight) {
    // Waited in real time: the caller's clock may be a test's, which nothing advances meanwhile.
    if (!done_.wait_for(lock, std::max(max_wait, std::chrono::nanoseconds(0)), [&] { return flight->done; })) {
      Error e;
      e.code = errc::timeout;
      e.operation = Operation::initialize;
      e.rank = rank;
      e.detail = "waited for another call's re-initialization of rank " + std::to_string(rank) +
                 " until this call's deadline";
      return {Outcome::failed, std::move(e)};
    }
    if (flight->error) return {Outcome::failed, flight->error};
    return {Outcome::restored, std::nullopt};
  }
  auto flight = std::make_shared<Flight>();
  entry.flight = flight;
  const auto num_pages = entry.num_pages;
  const auto role = entry.role;
  lock.unlock();

  Result<std::string> result = Error{};
  try {
    result = initialize(num_pages, role);
  } catch (...) {
    // Waiters must be released even if the initialize throws (an observer, an allocation).
    Error e;
    e.code = errc::server_error;
    e.operation = Operation::initialize;
    e.detail = "the re-initialization was interrupted by an exception";
    finish(entry, *flight, std::move(e));
    throw;
  }
  if (!result) {
    finish(entry, *flight, result.error());
    return {Outcome::failed, std::move(result).error()};
  }
  finish(entry, *flight, std::nullopt);
  return {Outcome::restored, std::nullopt};
}

void RankRegistry::finish(Entry& entry, Flight& flight, std::optional<Error> error) {
  {
    std::lock_guard lock(mutex_);
    if (!error) entry.restored_epoch = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
    flight.error = std::move(error);
    flight.done = true;
    entry.flight.reset();
  }
  done_.notify_all();
}

}  // namespace hf3fs_meta::internal
