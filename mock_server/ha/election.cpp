#include "ha/election.hpp"

#include <utility>

namespace hf3fs_meta::server::ha {

Election::Election(EtcdClient& etcd, SteadyClock clock, ElectionOptions options)
    : etcd_(etcd), clock_(std::move(clock)), options_(std::move(options)), window_(options_.margin) {}

EtcdResult<void> Election::grant() {
  // A lease that is not surely alive may still be alive in etcd, holding the leader key: revoked
  // first, or this member would take its own key for another's until it expired.
  if (const std::int64_t old = lease_.exchange(0, std::memory_order_acq_rel); old != 0) {
    (void)etcd_.lease_revoke(old);  // failing, it expires by itself
  }
  const auto sent = clock_();
  auto granted = etcd_.lease_grant(options_.ttl_seconds);
  if (!granted) return granted.error();
  std::lock_guard lock(mutex_);
  lease_.store(granted.value().id, std::memory_order_release);
  ttl_seconds_.store(granted.value().ttl, std::memory_order_relaxed);
  window_.renewed(sent, std::chrono::seconds(granted.value().ttl));
  return boost::outcome_v2::success();
}

EtcdResult<Election::Outcome> Election::campaign() {
  if (lease_id() == 0 || !surely_alive()) {
    if (auto granted = grant(); !granted) return granted.error();
  }
  TxnRequest txn;
  txn.compare.push_back({options_.leader_key, Compare::Target::create, Compare::Result::equal, 0, {}});
  txn.success.emplace_back(PutRequest{options_.leader_key, options_.advertise, lease_id()});
  txn.failure.emplace_back(RangeRequest{options_.leader_key});
  auto answer = etcd_.txn(txn);
  if (!answer) return answer.error();
  Outcome out;
  if (answer.value().succeeded) {
    out.won = true;
    out.fence = answer.value().revision;  // the Txn's revision is the key's create revision
    out.leader = options_.advertise;
    return out;
  }
  const auto& range = std::get<RangeResponse>(answer.value().responses.at(0));
  if (!range.kvs.empty()) {
    const KeyValue& holder = range.kvs.front();
    out.fence = holder.create_revision;
    out.leader = holder.value;
    // Ours from an earlier campaign (a repeat after a lost answer): still won, same fence.
    out.won = holder.lease == lease_id();
  }
  return out;
}

EtcdResult<bool> Election::renew() {
  const std::int64_t id = lease_id();
  if (id == 0) return false;
  const auto sent = clock_();
  auto ttl = etcd_.lease_keepalive(id);
  if (!ttl) return ttl.error();
  std::lock_guard lock(mutex_);
  if (lease_.load(std::memory_order_acquire) != id) return false;  // resigned, or granted anew, meanwhile
  if (ttl.value() <= 0) {
    window_.lost();
    lease_.store(0, std::memory_order_release);
    return false;
  }
  window_.renewed(sent, std::chrono::seconds(ttl.value()));
  return true;
}

void Election::resign() {
  std::int64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    id = lease_.exchange(0, std::memory_order_acq_rel);
    window_.lost();
  }
  if (id != 0) (void)etcd_.lease_revoke(id);  // failing, the lease expires by itself
}

}  // namespace hf3fs_meta::server::ha
