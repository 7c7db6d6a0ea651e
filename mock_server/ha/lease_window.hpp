// LeaseWindow: until when a member's etcd lease is surely alive (election.hpp says why), kept apart
// from the election so that the server's front (role.hpp) can ask it on every request without
// knowing etcd.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>

namespace hf3fs_meta::server::ha {

using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;

// When a lease is surely alive. Thread-safe: renewals on one thread, readers on any.
class LeaseWindow {
 public:
  explicit LeaseWindow(std::chrono::milliseconds margin) : margin_(margin) {}

  // A grant or renewal sent at `sent` answered that the lease lives `ttl` more.
  void renewed(std::chrono::steady_clock::time_point sent, std::chrono::seconds ttl) {
    until_.store((sent + ttl - margin_).time_since_epoch().count(), std::memory_order_release);
  }
  void lost() { until_.store(kNever, std::memory_order_release); }
  bool surely_alive(std::chrono::steady_clock::time_point now) const {
    return now.time_since_epoch().count() < until_.load(std::memory_order_acquire);
  }
  // How long it surely lives from `now` (zero or less: not surely).
  std::chrono::steady_clock::duration left(std::chrono::steady_clock::time_point now) const {
    return std::chrono::steady_clock::duration(until_.load(std::memory_order_acquire)) - now.time_since_epoch();
  }

 private:
  static constexpr std::chrono::steady_clock::rep kNever = std::numeric_limits<std::chrono::steady_clock::rep>::min();
  std::chrono::milliseconds margin_;
  std::atomic<std::chrono::steady_clock::rep> until_{kNever};
};

}  // namespace hf3fs_meta::server::ha
