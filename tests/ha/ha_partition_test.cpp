// hf3fs-meta-server's --ha-* members under network partitions: a 3-member etcd, 3 members and the
// test's clients, each in a network namespace of its own on one private bridge (support/net_lab.hpp),
// with links between two of them cut silently, as a real partition does (no reset, no refusal):
//   - the HA leader cut from every etcd member but not from the clients: it stops acknowledging and
//     stops answering reads within its lease, a standby leads, and once healed the old leader follows
//     it and has every acknowledged change;
//   - one etcd member (etcd's leader, or a follower) cut from the other two, while still reached by
//     the members, first in their --ha-etcd: changes go on being acknowledged after a bounded pause;
//   - a client cut from the HA leader: its calls fail within their deadline, saying so, while another
//     client's changes go on, and the leader stays the leader.
// Throughout, a watcher asks every member's /healthz and etcd's leader key again and again: never
// two members saying they lead at once, never one saying so while etcd's key names another. Every
// acknowledged change is checked at the end. Needs root (network namespaces): skipped otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"
#include "support/etcd_cluster.hpp"
#include "support/ha_members.hpp"
#include "support/net_lab.hpp"
#include "support/raw_http.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLease = 2000ms;
// Every wait for a role, a catch-up or a recovery: well past a lease and an election on two busy
// cores.
constexpr auto kWait = 20s;
constexpr std::size_t kNone = HaMembers::kNone;
constexpr std::string_view kNotLeaderDetail = "not the leader: nothing applied";

// The lab's nodes: etcd member i on node i, HA member i on node kServer + i; the test's main thread
// (and the watcher) on kObserver, cut from nobody; two clients.
constexpr std::size_t kServer = 3;
constexpr std::size_t kObserver = 6;
constexpr std::size_t kClientA = 7;
constexpr std::size_t kClientB = 8;
constexpr std::size_t kNodes = 9;

long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

std::vector<std::size_t> all_but(std::size_t n, std::size_t except) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i != except) out.push_back(i);
  }
  return out;
}

struct Address {
  std::string host;
  std::uint16_t port = 0;
  std::string url;
};

std::vector<Address> addresses(HaMembers& members) {
  std::vector<Address> out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    out.push_back({members.process(i).host(), members.process(i).port(), members.url(i)});
  }
  return out;
}

// etcd's leader key for `cluster`: the URL it names and its create revision (0: nobody holds it);
// nullopt when etcd did not answer.
struct LeaderKey {
  std::string url;
  std::int64_t revision = 0;
};
std::optional<LeaderKey> leader_key(server::ha::EtcdClient& etcd, const std::string& cluster) {
  const auto read = etcd.range({server::ha::Keys(cluster).leader()});
  if (!read) return std::nullopt;
  if (read.value().kvs.empty()) return LeaderKey{};
  return LeaderKey{read.value().kvs.front().value, read.value().kvs.front().create_revision};
}

// ---- the watcher: never two leaders ---------------------------------------------------------

// Asks, again and again until stopped, etcd's leader key, then every member's /healthz, then the
// key again. Two members that say "leader" within kTwoLeadersWindow of each other (ha_members.hpp
// says why that cannot be true of two live leases) are two leaders; so is a member that says
// "leader" while the key names another member with the same create revision before and after its
// answer (that member held the key, and so the lease, all along). Runs on its own thread, in the
// namespace of the thread that made it.
class LeaderWatch {
 public:
  LeaderWatch(std::vector<Address> members, std::vector<std::string> etcd, std::string cluster)
      : members_(std::move(members)), cluster_(std::move(cluster)) {
    server::ha::EtcdOptions options;
    options.endpoints = std::move(etcd);
    etcd_ = std::make_unique<server::ha::EtcdClient>(options);
    thread_ = std::thread([this] { run(); });
  }
  ~LeaderWatch() { stop(); }
  LeaderWatch(const LeaderWatch&) = delete;
  LeaderWatch& operator=(const LeaderWatch&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // What was wrong (empty: nothing), and how many passes were made and saw exactly one leader.
  std::string violations() const {
    std::lock_guard lock(mutex_);
    return violations_;
  }
  int passes() const { return passes_.load(); }
  int passes_with_one_leader() const { return one_leader_.load(); }
  // The leader key's create revisions seen, in order, without repeats (0: nobody held it).
  std::vector<std::int64_t> fences() const {
    std::lock_guard lock(mutex_);
    return fences_;
  }

 private:
  void run() {
    const auto end = Clock::now() + 120s;  // bounded, whatever the test does
    while (!stop_.load() && Clock::now() < end) {
      pass();
      std::this_thread::sleep_for(20ms);
    }
  }

  void pass() {
    const auto before = leader_key(*etcd_, cluster_);
    struct Said {
      std::size_t member;
      Clock::time_point at;
      std::string body;
    };
    std::vector<Said> leaders;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const auto h = parse_ha_health(http_call(members_[i].url + "/healthz", "", 1000ms));
      if (h.role == "leader") leaders.push_back({i, Clock::now(), h.body});
    }
    const auto after = leader_key(*etcd_, cluster_);
    ++passes_;
    if (leaders.size() == 1) ++one_leader_;
    std::lock_guard lock(mutex_);
    for (const auto& key : {before, after}) {
      if (key && (fences_.empty() || fences_.back() != key->revision)) fences_.push_back(key->revision);
    }
    if (leaders.size() > 1 && leaders.back().at - leaders.front().at < HaMembers::kTwoLeadersWindow) {
      violations_.append("two members say they lead at once:");
      for (const auto& l : leaders) violations_.append("\n  m").append(std::to_string(l.member)).append(": ").append(l.body);
      violations_.append("\n");
    }
    if (before && after && before->revision != 0 && before->revision == after->revision) {
      for (const auto& l : leaders) {
        if (members_[l.member].url == before->url) continue;
        violations_.append("m").append(std::to_string(l.member)).append(" says it leads while etcd's leader key (create revision ")
            .append(std::to_string(before->revision)).append(") names ").append(before->url).append(" all along: ")
            .append(l.body).append("\n");
      }
    }
  }

  std::vector<Address> members_;
  std::string cluster_;
  std::unique_ptr<server::ha::EtcdClient> etcd_;
  std::atomic<bool> stop_{false};
  std::atomic<int> passes_{0};
  std::atomic<int> one_leader_{0};
  mutable std::mutex mutex_;
  std::string violations_;           // under mutex_
  std::vector<std::int64_t> fences_;  // under mutex_
  std::thread thread_;
};

// ---- a writer: changes, acknowledged or not -------------------------------------------------

// Allocates and confirms keys <prefix>0, <prefix>1, ... one at a time from node `node`, to the member
// it believes leads: a refusal naming the leader (X-Hf3fs-Leader) sends it there, any other failure
// to the next member, after a pause. Keeps each key acknowledged (both steps answered), with who
// acknowledged it and when.
class Writer {
 public:
  struct Ack {
    std::string key;
    std::size_t member;
    Clock::time_point at;
  };

  Writer(const NetLab& lab, std::size_t node, std::vector<Address> members, std::size_t first, std::string prefix)
      : members_(std::move(members)), prefix_(std::move(prefix)) {
    thread_ = std::thread([this, &lab, node, first] {
      const InNetns in(lab, node);
      run(first);
    });
  }
  ~Writer() { stop(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Ack> acks() const {
    std::lock_guard lock(mutex_);
    return acks_;
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return acks_.size();
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& a : acks()) out.push_back(a.key);
    return out;
  }
  // The first refusals and failures, and the last ones, with when they came (ms from `zero`).
  std::string refusals(std::optional<Clock::time_point> zero = std::nullopt) const {
    std::lock_guard lock(mutex_);
    const Clock::time_point origin = zero.value_or(started_);
    std::string out = std::to_string(failures_.size()) + " refused or failed, ms from " +
                      (zero ? std::string("the cut") : std::string("the start")) + ":\n";
    for (std::size_t i = 0; i < failures_.size(); ++i) {
      if (i == 15 && failures_.size() > 45) {
        out.append("...\n");
        i = failures_.size() - 30;
      }
      out.append(std::to_string(ms(failures_[i].at - origin))).append(" ").append(failures_[i].what).append("\n");
    }
    return out;
  }
  // Waits up to `timeout` until `n` more keys than now are acknowledged.
  bool wait_more(std::size_t n, std::chrono::milliseconds timeout) const {
    const std::size_t target = count() + n;
    const auto deadline = Clock::now() + timeout;
    while (count() < target && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    return count() >= target;
  }
  // The longest time between two acknowledgements from `from` on (and from the last to `to`).
  Clock::duration longest_gap(Clock::time_point from, Clock::time_point to) const {
    Clock::duration gap{};
    Clock::time_point last = from;
    for (const auto& a : acks()) {
      if (a.at < from) continue;
      gap = std::max(gap, a.at - last);
      last = a.at;
    }
    return std::max(gap, to - last);
  }

 private:
  void run(std::size_t target) {
    const auto end = Clock::now() + 100s;  // bounded, whatever the members do
    for (int n = 0; !stop_.load() && Clock::now() < end; ++n) {
      const std::string key = prefix_ + std::to_string(n);
      std::string failure;
      const std::size_t failed_at = target;
      const Address& to = members_[target];
      try {
        const auto allocated = raw_request(to.host, to.port, "POST", "/keys/batch_allocate", allocate_body(0, {key}));
        const auto pages = allocated.status == 200 ? allocated_pages(allocated.body, {key}) : std::vector<Page>{};
        if (!pages.empty() && pages.front() != kNoPage) {
          const auto confirmed =
              raw_request(to.host, to.port, "POST", "/keys/confirm_write", confirm_body(0, {key}, pages));
          if (confirmed.status == 204) {
            std::lock_guard lock(mutex_);
            acks_.push_back({key, target, Clock::now()});
            continue;
          }
          target = next(target, confirmed, failure);
        } else {
          target = next(target, allocated, failure);
        }
      } catch (const std::runtime_error& e) {  // no connection, or no answer within 10 s
        failure = e.what();
        target = (target + 1) % members_.size();
      }
      note(key, failure, failed_at);
      std::this_thread::sleep_for(20ms);
    }
  }

  std::size_t next(std::size_t target, const RawResponse& r, std::string& failure) const {
    failure = std::to_string(r.status) + " " + r.body;
    const auto named = r.header("x-hf3fs-leader");
    for (std::size_t i = 0; named && i < members_.size(); ++i) {
      if (members_[i].url == *named) return i;
    }
    return (target + 1) % members_.size();
  }

  void note(const std::string& key, const std::string& failure, std::size_t member) {
    std::lock_guard lock(mutex_);
    if (failures_.size() < 10000) {
      failures_.push_back({Clock::now(), key + " to m" + std::to_string(member) + ": " + failure});
    }
  }

  std::vector<Address> members_;
  std::string prefix_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  struct Failure {
    Clock::time_point at;
    std::string what;
  };
  const Clock::time_point started_ = Clock::now();
  std::vector<Ack> acks_;          // under mutex_
  std::vector<Failure> failures_;  // under mutex_: the first 10000
  std::thread thread_;
};

// ---- the suite: a lab, an etcd in it, the test's thread on the observer's node -----------------

class HaPartitionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unavailable_ = NetLab::unavailable();
    if (!unavailable_.empty()) return;
    try {
      lab_ = std::make_unique<NetLab>(kNodes);
      observer_ = std::make_unique<InNetns>(*lab_, kObserver);
      std::vector<Placement> placements;
      for (std::size_t i = 0; i < 3; ++i) placements.push_back(lab_->placement(i));
      cluster_ = std::make_unique<EtcdCluster>(3, 20s, placements);
    } catch (const std::exception& e) {
      setup_failure_ = e.what();
      TearDownTestSuite();
    }
  }
  // Processes first, then the namespaces they ran in.
  static void TearDownTestSuite() {
    cluster_.reset();
    observer_.reset();
    lab_.reset();
  }
  void SetUp() override {
    if (!unavailable_.empty()) GTEST_SKIP() << "partition tests skipped: " << unavailable_;
    ASSERT_EQ(setup_failure_, "");
    ASSERT_NO_THROW(cluster_->wait_healthy(kWait));
  }
  void TearDown() override {
    if (lab_) lab_->heal_all();
  }

  static std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

  // Three members, each on its node, with `etcd` (the cluster's endpoints by default); their leader.
  std::size_t start_members(HaMembers& members) {
    for (std::size_t i = 0; i < 3; ++i) members.add({}, {}, lab_->placement(kServer + i));
    const std::size_t leader = members.wait_leader(kWait);
    if (leader != kNone) {
      const auto init = post(members.process(leader), "/rank/0/initialize", R"({"num_pages":100000})");
      EXPECT_EQ(init.status, 200) << init.body;
    }
    return leader;
  }

  // Every key of `keys` exists on member i (which must lead).
  void expect_every_key(HaMembers& members, std::size_t i, const std::vector<std::string>& keys) {
    const auto exists = post(members.process(i), "/keys/batch_exists", keys_body(keys));
    ASSERT_EQ(exists.status, 200) << exists.body;
    EXPECT_EQ(count_exists(exists.body, keys.size()), static_cast<int>(keys.size()))
        << "acknowledged keys missing on " << members.name(i) << "\n" << members.logs();
  }

  // Every member but the leader a standby of it at its applied seq.
  void expect_standbys_caught_up(HaMembers& members, std::size_t leader) {
    const auto led = members.health(leader);
    for (std::size_t i : all_but(members.size(), leader)) {
      const auto h = members.wait_standby_at(i, members.url(leader), led.applied_seq, kWait);
      EXPECT_EQ(h.role, "standby") << members.name(i) << ": " << h.body << "\n" << members.logs();
      EXPECT_EQ(h.applied_seq, led.applied_seq) << members.name(i) << ": " << h.body << " against " << led.body;
    }
  }

  // One etcd member cut from the other two (`etcd_leader`: etcd's leader, else a follower), while
  // the members still reach it and try it first (the first of their --ha-etcd). The majority goes
  // on (electing a leader of its own when it lost it); the lone member answers nothing that needs
  // the quorum. The leader's changes go on after a bounded pause, through the partition and its
  // healing (the lone member, back, may call an election of its own), nothing acknowledged is
  // lost, and there is never more than one leader.
  void cut_lone_etcd_member(bool etcd_leader) {
    constexpr auto kCutFor = 6s;  // past two leases: a lease lapsing or a leader stepping down would show
    // What a pause may take: the member's etcd call (3 s: its first attempt, 1 s, spent on the lone
    // member, the rest on a majority that may still be electing its leader, 1-2 s), then, when that
    // ran out, the leader's standing down and leading again (a poll, 200 ms, and its catching up).
    // The lone member's return costs an etcd election too (etcd 3.4 runs without --pre-vote by
    // default: its term, raised while alone, deposes the majority's leader), during which the
    // leader's lease may lapse and a standby take over (the lease, 2 s, and a failover). Seen here:
    // 1.0 to 4.6 s while etcd's leader was cut, about 1 s while a follower was; up to 5.6 s once
    // healed (a failover).
    constexpr auto kPauseBound = 8s;
    const std::size_t lone = etcd_leader ? cluster_->leader() : cluster_->follower();
    ASSERT_NE(lone, EtcdCluster::kNoMember) << "no etcd member says it " << (etcd_leader ? "leads" : "follows");
    std::string endpoints = cluster_->client_url(lone);
    for (std::size_t i : all_but(3, lone)) endpoints.append(",").append(cluster_->client_url(i));
    HaMembers members(endpoints, test_name(), kLease);
    const std::size_t leader = start_members(members);
    ASSERT_NE(leader, kNone) << members.logs();
    LeaderWatch watch(addresses(members), cluster_->client_urls(), test_name());
    Writer writer(*lab_, kClientA, addresses(members), leader, "w");
    ASSERT_TRUE(writer.wait_more(20, kWait)) << writer.refusals() << members.logs();

    const auto cut = Clock::now();
    for (std::size_t e : all_but(3, lone)) lab_->cut(lone, e);
    std::this_thread::sleep_for(kCutFor);
    const auto cut_gap = writer.longest_gap(cut, Clock::now());
    lab_->heal_all();
    const auto healed = Clock::now();
    std::this_thread::sleep_for(3s);  // the lone member rejoins
    ASSERT_TRUE(writer.wait_more(10, kWait)) << writer.refusals() << members.logs();
    writer.stop();
    watch.stop();
    const auto heal_gap = writer.longest_gap(healed, Clock::now());
    EXPECT_LE(ms(cut_gap), ms(kPauseBound)) << "while cut\n" << writer.refusals(cut) << members.logs();
    EXPECT_LE(ms(heal_gap), ms(kPauseBound)) << "once healed (" << ms(healed - cut) << " ms after the cut)\n"
                                             << writer.refusals(cut) << members.logs();
    if (std::getenv("HF3FS_PARTITION_VERBOSE")) std::cout << writer.refusals(cut) << members.logs();

    ASSERT_NO_THROW(cluster_->wait_healthy(kWait));
    const std::size_t now = members.wait_leader(kWait);
    ASSERT_NE(now, kNone) << members.logs();
    ASSERT_NO_FATAL_FAILURE(expect_every_key(members, now, writer.keys()));
    expect_standbys_caught_up(members, now);
    EXPECT_EQ(watch.violations(), "") << members.logs();
    EXPECT_GT(watch.passes_with_one_leader(), 20) << watch.passes() << " passes";
    std::cout << "etcd member " << lone << (etcd_leader ? " (etcd's leader)" : " (a follower)")
              << " cut: the longest gap between acknowledged writes " << ms(cut_gap) << " ms while cut, "
              << ms(heal_gap) << " ms once healed; the leader key changed hands " << watch.fences().size() - 1
              << " times; " << writer.count() << " keys; " << watch.passes() << " watcher passes\n";
    EXPECT_EQ(members.stop_all(), "") << members.logs();
  }

  static inline std::string unavailable_;
  static inline std::string setup_failure_;
  static inline std::unique_ptr<NetLab> lab_;
  static inline std::unique_ptr<InNetns> observer_;
  static inline std::unique_ptr<EtcdCluster> cluster_;
};

// The leader loses etcd, while its clients still reach it. Its lease cannot be renewed: it answers
// no read after its lease (sent + TTL - margin of the last renewal etcd answered, all before the
// cut), says no longer that it leads, and never acknowledges a change it could not append. A standby
// takes over once the lease is gone in etcd; the writer follows it. Healed, the old leader follows
// the new one, and once it leads again (the others stopped) it has every acknowledged key: what it
// held and the log did not take was rolled back, nothing the log took is missing.
TEST_F(HaPartitionTest, LeaderCutFromEtcdStopsWithinItsLeaseAndAStandbyLeads) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const std::size_t old_leader = start_members(members);
  ASSERT_NE(old_leader, kNone) << members.logs();
  ServerProcess& old = members.process(old_leader);
  std::string failure;
  ASSERT_TRUE(write_key(old, "before", &failure)) << failure;
  LeaderWatch watch(addresses(members), cluster_->client_urls(), test_name());
  Writer writer(*lab_, kClientA, addresses(members), old_leader, "w");
  ASSERT_TRUE(writer.wait_more(20, kWait)) << writer.refusals() << members.logs();

  for (std::size_t e = 0; e < 3; ++e) lab_->cut(kServer + old_leader, e);
  const auto cut = Clock::now();
  // Reads on the old leader, from a client it still reaches: answered only from within its lease.
  std::optional<Clock::time_point> last_served;  // when the last read answered 200 was sent
  std::optional<Clock::time_point> stopped;
  RawResponse refusal;
  while (Clock::now() < cut + kLease + 3s) {
    const auto sent = Clock::now();
    const auto read = post(old, "/keys/batch_exists", keys_body({"before"}));
    if (read.status == 200) {
      last_served = sent;
    } else if (!stopped) {
      stopped = Clock::now();
      refusal = read;
    }
    if (stopped && Clock::now() > *stopped + 1s) break;  // and stays stopped a while
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(stopped.has_value()) << "the leader cut from etcd still answered reads after its lease\n"
                                   << members.logs();
  if (last_served) {
    EXPECT_LT(*last_served, cut + kLease) << "a read was answered " << ms(*last_served - cut)
                                          << " ms after the cut, past any lease renewed before it";
  }
  EXPECT_EQ(refusal.status, 503) << refusal.body;
  EXPECT_THAT(refusal.body, HasSubstr(kNotLeaderDetail));
  EXPECT_NE(refusal.header("x-hf3fs-leader").value_or(""), members.url(old_leader)) << "it sends clients to itself";
  const auto change = post(old, "/keys/batch_allocate", allocate_body(0, {"after-the-lease"}));
  EXPECT_EQ(change.status, 503) << change.body;
  EXPECT_THAT(change.body, HasSubstr(kNotLeaderDetail));
  const auto said = members.health(old_leader);
  EXPECT_NE(said.role, "leader") << said.body;
  EXPECT_NE(said.leader, members.url(old_leader)) << said.body;

  const std::size_t new_leader = members.wait_leader(kWait, all_but(3, old_leader));
  const auto took = Clock::now() - cut;
  ASSERT_NE(new_leader, kNone) << "no standby took over from the leader cut from etcd\n" << members.logs();
  ASSERT_TRUE(writer.wait_more(20, kWait)) << "the writer did not go on with the new leader\n"
                                           << writer.refusals(cut) << members.logs();
  for (const auto& a : writer.acks()) {
    if (a.member == old_leader) {
      EXPECT_LT(a.at, cut + kLease) << a.key << " acknowledged by the old leader " << ms(a.at - cut)
                                    << " ms after it lost etcd";
    }
  }

  lab_->heal_all();
  const auto follows = members.wait_role(old_leader, "standby", members.url(new_leader), kWait);
  EXPECT_EQ(follows.role, "standby") << follows.body << "\n" << members.logs();
  ASSERT_TRUE(writer.wait_more(10, kWait)) << writer.refusals(cut);
  writer.stop();
  watch.stop();
  const auto longest = writer.longest_gap(cut, Clock::now());
  std::vector<std::string> keys = writer.keys();
  keys.push_back("before");
  ASSERT_NO_FATAL_FAILURE(expect_every_key(members, new_leader, keys));
  expect_standbys_caught_up(members, new_leader);

  // The old leader, leading alone, with every acknowledged key.
  for (std::size_t i : all_but(3, old_leader)) EXPECT_EQ(members.process(i).terminate(), 0);
  ASSERT_EQ(members.wait_leader(kWait, {old_leader}), old_leader) << members.logs();
  expect_every_key(members, old_leader, keys);

  EXPECT_EQ(watch.violations(), "") << members.logs();
  EXPECT_GT(watch.passes_with_one_leader(), 20) << watch.passes() << " passes";
  std::cout << "the cut leader's reads stopped " << ms(*stopped - cut) << " ms after the cut; a standby led "
            << ms(took) << " ms after it; the longest gap between acknowledged writes " << ms(longest) << " ms; "
            << keys.size() << " keys; " << watch.passes() << " watcher passes\n";
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

TEST_F(HaPartitionTest, EtcdLeaderCutFromTheOtherEtcdMembersPausesChangesBriefly) { cut_lone_etcd_member(true); }

TEST_F(HaPartitionTest, EtcdFollowerCutFromTheOtherEtcdMembersPausesChangesBriefly) { cut_lone_etcd_member(false); }

// A change through the SDK, allocated and confirmed; the error of the step that failed, if one did.
std::optional<Error> sdk_write(Client& client, const std::string& key, const CallOptions& call) {
  const auto allocated = client.allocate(0, {key}, call);
  if (!allocated) return allocated.error();
  if (allocated.value().size() != 1 || allocated.value()[0] == kNoPage) {
    Error e;
    e.detail = "no page for " + key;
    return e;
  }
  const auto confirmed = client.confirm_write(0, {{key, allocated.value()[0]}}, {}, call);
  if (!confirmed) return confirmed.error();
  return std::nullopt;
}

// A client cut from the leader (and from nobody else), with the SDK given every member: its call
// fails within its deadline, with an error that says so, while another client's changes go on
// without a pause. The leader keeps its lead (the same leader key throughout: a client's partition
// deposes nobody). Healed, the client's calls succeed again; every acknowledged key is there.
TEST_F(HaPartitionTest, ClientCutFromTheLeaderFailsWithinItsDeadlineWhileOthersWrite) {
  constexpr auto kDeadline = 3s;
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const std::size_t leader = start_members(members);
  ASSERT_NE(leader, kNone) << members.logs();
  LeaderWatch watch(addresses(members), cluster_->client_urls(), test_name());
  Writer other(*lab_, kClientB, addresses(members), leader, "b");
  ASSERT_TRUE(other.wait_more(20, kWait)) << other.refusals() << members.logs();

  // The SDK's calls are made on a thread in the client's node (its sockets are opened there).
  std::unique_ptr<Client> client;
  const auto on_client = [&](const std::function<void()>& f) {
    std::thread t([&] {
      const InNetns in(*lab_, kClientA);
      f();
    });
    t.join();
  };
  on_client([&] {
    ClientOptions options;
    for (std::size_t i = 0; i < members.size(); ++i) options.endpoints.push_back(members.url(i));
    client = std::make_unique<Client>(std::move(options));
  });
  std::optional<Error> before;
  on_client([&] { before = sdk_write(*client, "a-before", CallOptions{.deadline = kWait}); });
  ASSERT_FALSE(before.has_value()) << before->message();

  lab_->cut(kClientA, kServer + leader);
  const auto cut = Clock::now();
  std::optional<Error> during;
  Clock::duration took{};
  on_client([&] {
    const auto sent = Clock::now();
    during = sdk_write(*client, "a-during", CallOptions{.deadline = kDeadline});
    took = Clock::now() - sent;
  });
  ASSERT_TRUE(during.has_value()) << "a client cut from the leader had its change acknowledged";
  std::cout << "the cut client's call failed after " << ms(took) << " ms: " << to_string(during->code) << ": "
            << during->message() << "\n";
  EXPECT_LE(ms(took), ms(kDeadline + 500ms)) << "the call outlived its deadline";
  EXPECT_THAT(during->code, ::testing::AnyOf(errc::timeout, errc::unavailable, errc::connection_failed))
      << during->message();
  EXPECT_FALSE(during->message().empty());
  // Two leases into the cut the leader still leads: no client's partition deposes it.
  std::this_thread::sleep_until(cut + 2 * kLease);
  EXPECT_EQ(members.leader(), leader) << members.logs();

  lab_->heal_all();
  std::optional<Error> after;
  on_client([&] { after = sdk_write(*client, "a-after", CallOptions{.deadline = kWait}); });
  EXPECT_FALSE(after.has_value()) << after->message();
  on_client([&] { client.reset(); });
  ASSERT_TRUE(other.wait_more(10, kWait)) << other.refusals();
  other.stop();
  watch.stop();
  const auto longest = other.longest_gap(cut, Clock::now());
  // The other client never waits on the cut: its changes go on as before (a busy machine's pause).
  EXPECT_LE(ms(longest), 1500) << other.refusals(cut) << members.logs();

  std::vector<std::string> keys = other.keys();
  keys.push_back("a-before");
  keys.push_back("a-after");
  ASSERT_NO_FATAL_FAILURE(expect_every_key(members, leader, keys));
  // Its confirm never reached the leader: the key is not complete (the allocate may have, should
  // the kernel have delivered it after the healing: a change the client gave up on).
  const auto status = post(members.process(leader), "/keys/status", keys_body({"a-during"}));
  ASSERT_EQ(status.status, 200) << status.body;
  const auto states = protocol::decode_key_status_response(status.body, 1);
  ASSERT_TRUE(states && states.value().status.size() == 1) << status.body;
  EXPECT_FALSE(states.value().status[0] && states.value().status[0]->complete) << status.body;
  expect_standbys_caught_up(members, leader);

  EXPECT_EQ(watch.violations(), "") << members.logs();
  const auto fences = watch.fences();
  EXPECT_EQ(fences.size(), 1u) << "the leader key changed hands during a client's partition\n" << members.logs();
  EXPECT_GT(watch.passes_with_one_leader(), 20) << watch.passes() << " passes";
  std::cout << "the other client's longest gap between acknowledged writes " << ms(longest) << " ms; " << keys.size()
            << " keys; " << watch.passes() << " watcher passes\n";
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

}  // namespace
}  // namespace hf3fs_meta::testing
