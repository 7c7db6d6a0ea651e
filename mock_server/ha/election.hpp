// Election: a member's etcd lease, kept alive, and its campaign for the leader key.
//
// A member holds one lease for as long as it lives; the leader key and the member's applied seq
// (keys.hpp) are put under it, so both vanish when the member stops renewing. A campaign is one
// Txn: create the leader key with the lease if nobody holds it (create revision 0). The key's create
// revision is then the leader's fence: every log append compares it, so a member that lost the
// key (its lease lapsed, another won) can append nothing.
//
// When is a leader surely still the leader? etcd expires a lease TTL seconds after the last renewal
// it applied, and that renewal was applied after this member sent it. So the lease is alive until
// (the time the last successful renewal was sent) + TTL, on this member's monotonic clock, less a
// margin for the rate of etcd's clock against ours. Past that the member answers nothing as leader.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>

#include "ha/etcd_client.hpp"
#include "ha/lease_window.hpp"

namespace hf3fs_meta::server::ha {

struct ElectionOptions {
  std::string leader_key;    // Keys::leader()
  std::string advertise;     // the leader key's value: how clients reach this member
  std::int64_t ttl_seconds = 3;
  std::chrono::milliseconds margin{300};
};

class Election {
 public:
  Election(EtcdClient& etcd, SteadyClock clock, ElectionOptions options);

  // The leader key as a campaign found it.
  struct Outcome {
    bool won = false;
    std::int64_t fence = 0;  // the leader key's create revision (this member's, if won)
    std::string leader;      // the leader's advertised URL; empty: nobody holds the key
  };

  // Grants a lease first when the member holds none that is surely alive; then creates the leader
  // key with it unless another member holds the key. A member that already holds the key (its own
  // lease) wins again with the same fence.
  EtcdResult<Outcome> campaign();
  // One renewal. False when the lease is gone (expired or revoked): the member is nothing until it
  // campaigns again, with a new lease.
  EtcdResult<bool> renew();
  // Revokes the lease: the leader key and everything else under it go at once.
  void resign();

  // Before the first campaign (a server knows its URL once it listens).
  void set_advertise(std::string advertise) { options_.advertise = std::move(advertise); }

  bool surely_alive() const { return window_.surely_alive(clock_()); }
  const LeaseWindow& window() const noexcept { return window_; }
  std::int64_t lease_id() const noexcept { return lease_.load(std::memory_order_acquire); }
  std::int64_t ttl_seconds() const noexcept { return ttl_seconds_.load(std::memory_order_relaxed); }

 private:
  EtcdResult<void> grant();

  EtcdClient& etcd_;
  SteadyClock clock_;
  ElectionOptions options_;
  LeaseWindow window_;
  // A renewal answered after resign() (or after a new grant) must not reopen the window: the lease
  // and the window change together, under this.
  std::mutex mutex_;
  std::atomic<std::int64_t> lease_{0};
  std::atomic<std::int64_t> ttl_seconds_{0};  // as etcd granted it (it raises a TTL below its minimum)
};

}  // namespace hf3fs_meta::server::ha
