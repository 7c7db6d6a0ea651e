// Role: what the server's front knows of an HA member, written by ha::Member and read by
// the Router on every request: whether it may answer as the leader at this instant, and who leads.
// Without --ha-etcd there is none, and the Router serves as it always did.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "ha/lease_window.hpp"

namespace hf3fs_meta::server::ha {

enum class RoleName : std::uint8_t {
  candidate,  // neither: starting, stepping down, or etcd does not answer who leads
  standby,    // another member leads; this one follows its log
  leader,     // this member won, caught up with the log, and appends to it
};

constexpr std::string_view to_string(RoleName role) noexcept {
  switch (role) {
    case RoleName::candidate: return "candidate";
    case RoleName::standby: return "standby";
    case RoleName::leader: return "leader";
  }
  return "candidate";
}

// The member's figures for /metrics (ha_families, metrics.hpp), kept where the front can read them.
struct HaCounters {
  std::atomic<std::uint64_t> appends{0};            // batches appended to the log as leader
  std::atomic<std::uint64_t> append_ns_total{0};    // time in those Txns
  std::atomic<std::uint64_t> append_ns_max{0};
  std::atomic<std::uint64_t> batch_bytes_total{0};  // their records' bytes
  std::atomic<std::uint64_t> tip{0};                // the last record in the log, as this member saw it
  std::atomic<std::uint64_t> compactions{0};        // log compactions done as leader
  std::atomic<std::uint64_t> snapshot_fetches{0};   // snapshots fetched from the leader
  std::atomic<std::uint64_t> log_failures{0};       // times following ended on an entry it could not apply

  void appended(std::uint64_t bytes, std::uint64_t ns, std::uint64_t last_seq) {
    appends.fetch_add(1, std::memory_order_relaxed);
    append_ns_total.fetch_add(ns, std::memory_order_relaxed);
    batch_bytes_total.fetch_add(bytes, std::memory_order_relaxed);
    if (ns > append_ns_max.load(std::memory_order_relaxed)) append_ns_max.store(ns, std::memory_order_relaxed);
    saw_tip(last_seq);
  }
  void saw_tip(std::uint64_t seq) {
    if (seq > tip.load(std::memory_order_relaxed)) tip.store(seq, std::memory_order_relaxed);
  }
};

class Role {
 public:
  // `lease`: the member's own lease, which must outlive this.
  explicit Role(const LeaseWindow& lease) : lease_(lease) {}

  // The leader answers only while its lease is surely alive: past it another member may lead.
  bool leading() const noexcept {
    return name_.load(std::memory_order_acquire) == RoleName::leader &&
           lease_.surely_alive(std::chrono::steady_clock::now());
  }
  RoleName name() const noexcept { return name_.load(std::memory_order_acquire); }
  // The role as /healthz and /metrics say it: a leader whose lease is not surely alive is a
  // candidate (another member may lead by now), whatever its member has yet to learn.
  RoleName answered() const noexcept {
    const RoleName role = name();
    return role == RoleName::leader && !leading() ? RoleName::candidate : role;
  }
  // The leader's advertised URL; empty when not known (a lapsed leader does not name itself: a
  // client sent there would only come back).
  std::string leader() const {
    std::lock_guard lock(mutex_);
    return name() == RoleName::leader && !leading() ? std::string() : leader_;
  }
  std::uint64_t leader_changes() const noexcept { return changes_.load(std::memory_order_relaxed); }
  HaCounters& counters() noexcept { return counters_; }
  const HaCounters& counters() const noexcept { return counters_; }

  // A change of leader counts when a leader is named other than the last one named.
  void set(RoleName name, std::string_view leader) {
    std::lock_guard lock(mutex_);
    if (!leader.empty() && leader != last_named_) {
      if (!last_named_.empty()) changes_.fetch_add(1, std::memory_order_relaxed);
      last_named_.assign(leader);
    }
    leader_.assign(leader);
    name_.store(name, std::memory_order_release);
  }
  // Stops answering as the leader at once; nobody is named until etcd says who leads.
  void demote() { set(RoleName::candidate, {}); }

  // Following the log ended on an entry this member cannot apply (or that does not follow what it
  // applied): said on /healthz, and counted, until an entry applies again. Never a silent lag.
  void log_failed(std::string_view why) {
    counters_.log_failures.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    log_error_.assign(why);
    log_failing_.store(true, std::memory_order_release);
  }
  void log_applied() {
    if (!log_failing_.load(std::memory_order_acquire)) return;  // the usual case: no lock per entry
    std::lock_guard lock(mutex_);
    log_error_.clear();
    log_failing_.store(false, std::memory_order_release);
  }
  // Empty while the log applies.
  std::string log_error() const {
    std::lock_guard lock(mutex_);
    return log_error_;
  }

 private:
  const LeaseWindow& lease_;
  std::atomic<RoleName> name_{RoleName::candidate};
  mutable std::mutex mutex_;
  std::string leader_;      // under mutex_
  std::string last_named_;  // under mutex_
  std::string log_error_;   // under mutex_
  std::atomic<bool> log_failing_{false};  // log_error_ is not empty
  std::atomic<std::uint64_t> changes_{0};
  HaCounters counters_;
};

}  // namespace hf3fs_meta::server::ha
