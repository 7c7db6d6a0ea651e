// hf3fs-meta-server's --ha-* members under faults, as processes on a real 3-member etcd:
// a leader that hangs past its lease answers its held change 503 and comes back as a standby
// without it; etcd losing its quorum stops changes at once and reads once the lease lapses, and
// nothing acknowledged is lost when it recovers; the HA flags that do not fit are refused, each
// named; a member with an empty data dir catches up with a running cluster through the log; the
// leader's disk failing again and again under load makes it step down, never forks the log, and
// loses nothing; an etcd member that stops (SIGSTOP) costs the leader's writes about one etcd
// attempt, not a step-down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rapidjson/document.h>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"
#include "support/etcd_suite.hpp"
#include "support/ha_members.hpp"
#include "support/raw_http.hpp"
#include "support/server_process.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kLease = 2000ms;
// Every wait for a role, a catch-up or a recovery: well past a lease and an election on two busy
// cores.
constexpr auto kWait = 20s;
// A change sent while etcd has no quorum waits at most the member's etcd call timeout (3 s,
// ha::MemberOptions::etcd_timeout) for its append; 4 s more for a loaded machine.
constexpr auto kRefusalBound = 7s;
// Reads stop by the last keepalive sent + the lease; a poll's period and a loaded machine on top.
constexpr auto kReadStopSlack = 1500ms;
constexpr std::size_t kNone = HaMembers::kNone;
constexpr std::string_view kNotLeaderDetail = "not the leader: nothing applied";

long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// ---- requests and their answers -----------------------------------------------------------------

// Per key of a /keys/status answer for `n` keys: "unknown", "complete" or "incomplete"; empty if
// the answer is not one.
std::vector<std::string> key_states(const std::string& body, std::size_t n) {
  const auto answer = protocol::decode_key_status_response(body, n);
  std::vector<std::string> out;
  if (!answer) return out;
  for (const auto& s : answer.value().status) out.emplace_back(!s ? "unknown" : s->complete ? "complete" : "incomplete");
  return out;
}

// Rank 0 with room for every key of a test.
void initialize(ServerProcess& leader, const HttpHeaders& headers = {}) {
  const auto r = post(leader, "/rank/0/initialize", R"({"num_pages":256})", headers);
  ASSERT_EQ(r.status, 200) << r.body;
}

// Member i, the only one still running of those that could lead, takes the lead, and every key of
// `keys` exists there: nothing acknowledged was lost on the way.
void expect_leads_with_every_key(HaMembers& members, std::size_t i, const std::vector<std::string>& keys,
                                 const HttpHeaders& headers = {}) {
  ASSERT_EQ(members.wait_leader(kWait, {i}), i) << members.logs();
  const auto exists = post(members.process(i), "/keys/batch_exists", keys_body(keys), headers);
  ASSERT_EQ(exists.status, 200) << exists.body;
  EXPECT_EQ(count_exists(exists.body, keys.size()), static_cast<int>(keys.size())) << exists.body;
}

std::vector<std::size_t> all_but(std::size_t n, std::size_t except) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i != except) out.push_back(i);
  }
  return out;
}

// ---- a leader hung past its lease ---------------------------------------------------------------

class HaFaultTest : public EtcdSuite {};

// The leader is SIGSTOPped past its lease while a connection of its is open; another member takes
// over; a change sent on that connection waits in the kernel until SIGCONT. The resumed member must
// not acknowledge it (its lease lapsed: another member may have written since), must come back as a
// standby of the new leader, and what the log holds must be what it holds once it leads again.
TEST_F(HaFaultTest, LeaderStoppedPastItsLeaseRefusesItsHeldChangeAndFollows) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add();
  const std::size_t old_leader = members.wait_leader(kWait);
  ASSERT_NE(old_leader, kNone) << members.logs();
  ServerProcess& stopped = members.process(old_leader);
  initialize(stopped);
  std::string failure;
  ASSERT_TRUE(write_key(stopped, "before", &failure)) << failure;

  // Accepted by the server (it answered on it) before it stops.
  RawConnection held(stopped.host(), stopped.port(), 15s);
  ASSERT_EQ(held.request("GET", "/healthz").status, 200);
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  const auto others = all_but(3, old_leader);
  const std::size_t new_leader = members.wait_leader(kWait, others);
  ASSERT_NE(new_leader, kNone) << "no member took over from the stopped leader\n" << members.logs();

  held.send(format_request("POST", "/keys/batch_allocate", held.host_header(), allocate_body(0, {"held"})));
  ASSERT_EQ(::kill(stopped.pid(), SIGCONT), 0);
  const auto answer = held.read_response();
  EXPECT_EQ(answer.status, 503) << "the change held past the lease was answered: " << answer.body << "\n"
                                << members.logs();
  EXPECT_THAT(answer.body, HasSubstr(kNotLeaderDetail));

  ServerProcess& leader = members.process(new_leader);
  const auto status = post(leader, "/keys/status", keys_body({"held", "before"}));
  ASSERT_EQ(status.status, 200) << status.body;
  EXPECT_EQ(key_states(status.body, 2), (std::vector<std::string>{"unknown", "complete"})) << status.body;

  const auto resumed = members.wait_role(old_leader, "standby", members.url(new_leader), kWait);
  EXPECT_EQ(resumed.role, "standby") << resumed.body << "\n" << members.logs();
  EXPECT_EQ(resumed.leader, members.url(new_leader)) << resumed.body;
  // A standby refuses, naming the leader.
  const auto refused = post(stopped, "/keys/batch_exists", keys_body({"before"}));
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.header("x-hf3fs-leader").value_or("(none)"), members.url(new_leader));

  ASSERT_TRUE(write_key(leader, "after", &failure)) << failure;
  // The resumed member leads once the others are gone: its state is the log's, without the held
  // change and with the one written while it was a standby.
  const std::size_t third = others[new_leader == others[0] ? 1 : 0];
  EXPECT_EQ(members.process(third).terminate(), 0);
  EXPECT_EQ(leader.terminate(), 0);
  ASSERT_EQ(members.wait_leader(kWait, {old_leader}), old_leader) << members.logs();
  const auto after = post(stopped, "/keys/status", keys_body({"held", "before", "after"}));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(key_states(after.body, 3), (std::vector<std::string>{"unknown", "complete", "complete"})) << after.body;
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The leader key goes (an operator's delete) and another member wins it, with a newer create
// revision, while the old leader's lease lives on: the old leader's next change is fenced in etcd. It
// is answered 503, is not on the new leader, and the old leader steps down to follow the new one.
TEST_F(HaFaultTest, AppendFencedByANewerLeaderIsRefusedAndTheLeaderFollows) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add();
  const std::size_t old_leader = members.wait_leader(kWait);
  ASSERT_NE(old_leader, kNone) << members.logs();
  ServerProcess& fenced = members.process(old_leader);
  initialize(fenced);
  std::string failure;
  ASSERT_TRUE(write_key(fenced, "before", &failure)) << failure;

  server::ha::EtcdOptions options;
  options.endpoints = cluster_->client_urls();
  server::ha::EtcdClient etcd(options);
  const auto deleted = etcd.delete_range({server::ha::Keys(test_name()).leader()});
  ASSERT_TRUE(deleted) << deleted.error().message;
  const std::size_t new_leader = members.wait_leader(kWait, all_but(3, old_leader));
  ASSERT_NE(new_leader, kNone) << "no member took the leader key\n" << members.logs();

  const auto change = post(fenced, "/keys/batch_allocate", allocate_body(0, {"fenced"}));
  EXPECT_EQ(change.status, 503) << "a change past a newer leader was answered: " << change.body << "\n"
                                << members.logs();
  ServerProcess& leader = members.process(new_leader);
  const auto status = post(leader, "/keys/status", keys_body({"fenced", "before"}));
  ASSERT_EQ(status.status, 200) << status.body;
  EXPECT_EQ(key_states(status.body, 2), (std::vector<std::string>{"unknown", "complete"})) << status.body;

  const auto stepped_down = members.wait_role(old_leader, "standby", members.url(new_leader), kWait);
  EXPECT_EQ(stepped_down.role, "standby") << stepped_down.body << "\n" << members.logs();
  ASSERT_TRUE(write_key(leader, "after", &failure)) << failure;
  const auto led = members.health(new_leader);
  const auto follows = members.wait_standby_at(old_leader, members.url(new_leader), led.applied_seq, kWait);
  EXPECT_EQ(follows.applied_seq, led.applied_seq) << follows.body << " against " << led.body;
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// A member whose data dir is empty joins a cluster with changes and reaches the leader's seq through
// the log; once it leads, every change is in its state.
TEST_F(HaFaultTest, MemberWithAnEmptyDataDirCatchesUpThroughTheLog) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  members.add();
  members.add();
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  initialize(members.process(leader));
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(std::string("key-").append(std::to_string(i)));
    std::string failure;
    ASSERT_TRUE(write_key(members.process(leader), keys.back(), &failure)) << failure;
  }
  const auto leader_health = members.health(leader);
  ASSERT_GE(leader_health.applied_seq, 41u) << leader_health.body;  // initialize + 2 per key

  const std::size_t joined = members.add();
  const auto h = members.wait_standby_at(joined, members.url(leader), leader_health.applied_seq, kWait);
  EXPECT_EQ(h.applied_seq, leader_health.applied_seq) << h.body << "\n" << members.logs();
  EXPECT_EQ(h.role, "standby") << h.body;
  EXPECT_EQ(h.leader, members.url(leader)) << h.body;

  for (std::size_t i : all_but(2, leader)) EXPECT_EQ(members.process(i).terminate(), 0);
  EXPECT_EQ(members.process(leader).terminate(), 0);
  expect_leads_with_every_key(members, joined, keys);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The log entries etcd holds for `cluster`, and the last record of the first (0: none).
std::pair<std::size_t, std::uint64_t> log_entries(const EtcdCluster& etcd, const std::string& cluster) {
  server::ha::EtcdOptions options;
  options.endpoints = etcd.client_urls();
  server::ha::EtcdClient client(options);
  const server::ha::Keys keys(cluster);
  server::ha::RangeRequest range{keys.log_prefix(), server::ha::prefix_end(keys.log_prefix())};
  range.keys_only = true;
  const auto read = client.range(range);
  if (!read || read.value().kvs.empty()) return {0, 0};
  return {read.value().kvs.size(), keys.seq_of(read.value().kvs.front().key)};
}

// A standby's disk fails (disk_error rules on its own process): its journal refuses the next entry,
// so it stops following, and the first snapshot taken to make the journal writable again (as it
// stands down to follow again, or the store's retry) fails too. Once one succeeds it follows again
// from what it holds, catches up with the leader, and can lead with every key. Its disk never costs
// the cluster a change.
TEST_F(HaFaultTest, AStandbyWhoseDiskFailsFollowsAgainOnceASnapshotSucceeds) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  members.add({"--enable-fault-injection"});
  members.add({"--enable-fault-injection"});
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  const std::size_t standby = 1 - leader;
  initialize(members.process(leader));
  std::vector<std::string> keys{"before"};
  ASSERT_TRUE(write_key(members.process(leader), keys.back()));
  ASSERT_EQ(members.wait_standby_at(standby, members.url(leader), members.health(leader).applied_seq, kWait).role,
            "standby")
      << members.logs();

  // A standby takes disk faults only: the other rules act where it serves nothing.
  const auto refused = post(members.process(standby), "/_faults", R"({"status":500})");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr(kNotLeaderDetail));
  for (const std::string_view op : {"journal_write", "snapshot_write"}) {
    const auto r = post(members.process(standby), "/_faults",
                        std::string(R"({"disk_error":"EIO","disk_op":")").append(op).append(R"(","times":1})"));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  for (int i = 0; i < 5; ++i) {
    keys.push_back(std::string("during-").append(std::to_string(i)));
    std::string failure;
    ASSERT_TRUE(write_key(members.process(leader), keys.back(), &failure)) << failure;
  }
  const auto leader_health = members.health(leader);
  const auto h = members.wait_standby_at(standby, members.url(leader), leader_health.applied_seq, kWait);
  EXPECT_EQ(h.applied_seq, leader_health.applied_seq) << h.body << "\n" << members.logs();
  EXPECT_EQ(metric(members, standby, "hf3fs_meta_disk_errors_total"), 1) << members.logs();
  EXPECT_EQ(metric(members, standby, "hf3fs_meta_snapshot_failures_total"), 1) << members.logs();
  EXPECT_GE(metric(members, standby, "hf3fs_meta_snapshots_total"), 1) << members.logs();
  EXPECT_EQ(metric(members, standby, "hf3fs_meta_disk_failed"), 0) << members.logs();
  EXPECT_THAT(members.logs(), HasSubstr("following the log ended"));

  EXPECT_EQ(members.process(leader).terminate(), 0);
  expect_leads_with_every_key(members, standby, keys);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The leader's journal write fails with ENOSPC again and again (11 injections, each on whichever
// member leads then) under 8 writer threads. Each time the leader lets what it wrote before the
// failure reach the log, steps down and resigns, and a member whose disk works leads: the log never
// holds a record twice, so no member ever stops applying it, and every key acknowledged is kept.
// Then the leader is killed with SIGKILL: another leads within the lease + 1 s, with every key.
TEST_F(HaFaultTest, RepeatedDiskFailuresOnTheLeaderNeitherForkTheLogNorWedgeTheCluster) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add({"--enable-fault-injection"});
  const std::size_t first = members.wait_leader(kWait);
  ASSERT_NE(first, kNone) << members.logs();
  const auto init = post(members.process(first), "/rank/0/initialize", R"({"num_pages":100000})");
  ASSERT_EQ(init.status, 200) << init.body;

  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<std::string> acknowledged;  // under mutex
  std::vector<std::thread> writers;
  const auto writers_end = Clock::now() + 150s;  // bounded, whatever happens to the members
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      // Whichever member answers: a standby refuses with nothing applied, a leader acknowledges.
      for (int n = 0, at = t; n < 100000 && !stop.load() && Clock::now() < writers_end; ++n, ++at) {
        const std::string key = "w" + std::to_string(t) + "-" + std::to_string(n);
        if (write_key(members.process(static_cast<std::size_t>(at) % 3), key)) {
          std::lock_guard lock(mutex);
          acknowledged.push_back(key);
        }
      }
    });
  }
  const auto written = [&] {
    std::lock_guard lock(mutex);
    return acknowledged.size();
  };
  std::string failure;
  for (int injection = 0; injection < 11 && failure.empty(); ++injection) {
    const std::size_t leader = members.wait_leader(kWait);
    if (leader == kNone) {
      failure = "no leader before injection " + std::to_string(injection);
      break;
    }
    const double errors = metric(members, leader, "hf3fs_meta_disk_errors_total");
    const auto injected = post(members.process(leader), "/_faults",
                               R"({"disk_error":"ENOSPC","disk_op":"journal_write","times":1})");
    if (injected.status != 200) continue;  // it stepped down meanwhile: the next one is injected
    // The writers make it fire; then some more keys before the next.
    const auto deadline = Clock::now() + kWait;
    while (metric(members, leader, "hf3fs_meta_disk_errors_total") <= errors && Clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    // It steps down for it (at its next look); the next injection goes to whoever leads after it.
    while (members.health(leader).role == "leader" && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    const std::size_t before = written();
    while (written() < before + 20 && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    if (Clock::now() >= deadline) {
      failure = "injection " + std::to_string(injection) + " on " + members.name(leader) + ": " +
                (metric(members, leader, "hf3fs_meta_disk_errors_total") <= errors ? "did not fire" : "writes stopped");
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_EQ(failure, "") << members.logs();
  ASSERT_GE(written(), 11u * 20u);

  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  const auto led = members.health(leader);
  for (std::size_t i : all_but(3, leader)) {
    const auto h = members.wait_standby_at(i, members.url(leader), led.applied_seq, kWait);
    EXPECT_EQ(h.applied_seq, led.applied_seq) << h.body << "\n" << members.logs();
  }
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(metric(members, i, "hf3fs_meta_ha_log_apply_failures_total"), 0) << members.name(i) << members.logs();
  }
  EXPECT_GE(metric(members, 0, "hf3fs_meta_disk_errors_total") + metric(members, 1, "hf3fs_meta_disk_errors_total") +
                metric(members, 2, "hf3fs_meta_disk_errors_total"),
            11);
  EXPECT_THAT(members.logs(200), Not(HasSubstr("do not follow")));

  members.process(leader).kill();
  const auto killed = Clock::now();
  const std::size_t next = members.wait_leader(kWait, all_but(3, leader));
  const auto took = Clock::now() - killed;
  ASSERT_NE(next, kNone) << members.logs();
  EXPECT_LE(ms(took), ms(kLease + 1s)) << members.logs();
  std::vector<std::string> keys;
  {
    std::lock_guard lock(mutex);
    keys = acknowledged;
  }
  const auto exists = post(members.process(next), "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(exists.status, 200) << exists.body;
  EXPECT_EQ(count_exists(exists.body, keys.size()), static_cast<int>(keys.size())) << members.logs();
  EXPECT_EQ(members.stop_all(), "") << members.logs();
  // The log the failures went through, read offline: every entry whole and after the one before.
  const auto verified = ServerProcess::run_to_exit(
      {"--verify-ha-log", "--ha-etcd", cluster_->endpoints(), "--ha-cluster", test_name()}, 30s);
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr("log of cluster " + test_name() + ": sound. ")) << verified.output;
}

// The leader's disk stays full (ENOSPC on every journal write until the rule goes). Its first
// failed write makes it step down and resign: a standby leads within the lease + 1 s of the disk
// filling (not for as long as the disk stays full), with every change acknowledged before, and the
// change the full disk refused ("rolled back on this member") is nowhere.
TEST_F(HaFaultTest, ALeaderWhoseDiskStaysFullHandsTheLeadToAStandby) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add({"--enable-fault-injection"});
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  ASSERT_EQ(post(members.process(leader), "/rank/0/initialize", R"({"num_pages":1000})").status, 200);
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back("before-" + std::to_string(i));
    std::string failure;
    ASSERT_TRUE(write_key(members.process(leader), keys.back(), &failure)) << failure;
  }
  const auto full = post(members.process(leader), "/_faults", R"({"disk_error":"ENOSPC","disk_op":"journal_write"})");
  ASSERT_EQ(full.status, 200) << full.body;
  const auto filled = Clock::now();
  const auto refused = post(members.process(leader), "/keys/batch_allocate", allocate_body(0, {"during"}));
  // Its record was never written, so it can never reach the log: rolled back, as the answer says.
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr("No space left on device; rolled back on this member"));

  const std::size_t next = members.wait_leader(kWait, all_but(3, leader));
  const auto took = Clock::now() - filled;
  ASSERT_NE(next, kNone) << members.logs();
  EXPECT_LE(ms(took), ms(kLease + 1s)) << members.logs();
  EXPECT_NE(members.health(leader).role, "leader") << members.logs();
  std::string failure;
  keys.push_back("after");
  ASSERT_TRUE(write_key(members.process(next), keys.back(), &failure)) << failure << members.logs();
  const auto exists = post(members.process(next), "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(exists.status, 200) << exists.body;
  EXPECT_EQ(count_exists(exists.body, keys.size()), static_cast<int>(keys.size())) << members.logs();
  // "during" was allocated nowhere: no page held by an allocation, no key waiting for its confirm.
  const auto stats = raw_request(members.process(next).host(), members.process(next).port(), "GET", "/stats", "");
  ASSERT_EQ(stats.status, 200) << stats.body;
  EXPECT_THAT(stats.body, HasSubstr(R"("allocated":0,)")) << "a change answered 'rolled back' was applied";
  EXPECT_THAT(stats.body, HasSubstr(R"("keys_complete":6,"keys_incomplete":0,)"));
  const auto cleared = raw_request(members.process(leader).host(), members.process(leader).port(), "DELETE", "/_faults", "");
  EXPECT_EQ(cleared.status, 200) << cleared.body;
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The leader deletes the entries every live member applied and its last snapshot holds (a snapshot
// every 1000 journal bytes here), so the log stays short under load; a member that joins with an
// empty data dir after that cannot follow from record 1, and starts from the leader's snapshot
// (GET /_ha/snapshot) instead, then follows the log and can lead with every key.
TEST_F(HaFaultTest, CompactionKeepsTheLogShortAndAMemberJoinsThroughTheLeadersSnapshot) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const std::vector<std::string> snapshots_often = {"--snapshot-after-bytes", "1000"};
  members.add(snapshots_often);
  members.add(snapshots_often);
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  initialize(members.process(leader));
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) {
    keys.push_back(std::string("key-").append(std::to_string(i)));
    std::string failure;
    ASSERT_TRUE(write_key(members.process(leader), keys.back(), &failure)) << failure;
  }
  const std::uint64_t written = members.health(leader).applied_seq;
  ASSERT_GE(written, 121u);
  // Compaction runs every 5 s on the leader; without it, an entry a record here.
  const auto deadline = Clock::now() + kWait;
  auto [entries, first] = log_entries(*cluster_, test_name());
  while ((entries >= written / 2 || metric(members, leader, "hf3fs_meta_ha_compactions_total") < 1) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    std::tie(entries, first) = log_entries(*cluster_, test_name());
  }
  EXPECT_LT(entries, written / 2) << "entries left in etcd of " << written << " records\n" << members.logs();
  ASSERT_GE(metric(members, leader, "hf3fs_meta_ha_compactions_total"), 1) << members.logs();
  // None left (all compacted) or none of the first records'.
  ASSERT_TRUE(entries == 0 || first > 2) << "the entries of the first records are still there: " << first;

  const std::size_t joined = members.add(snapshots_often);
  const auto h = members.wait_standby_at(joined, members.url(leader), written, kWait);
  ASSERT_EQ(h.applied_seq, written) << h.body << "\n" << members.logs();
  EXPECT_EQ(metric(members, joined, "hf3fs_meta_ha_snapshot_fetches_total"), 1);
  EXPECT_THAT(file_tail(members.log_path(joined), 40), HasSubstr("the leader's snapshot of change"));

  for (std::size_t i : all_but(2, leader)) EXPECT_EQ(members.process(i).terminate(), 0);
  EXPECT_EQ(members.process(leader).terminate(), 0);
  expect_leads_with_every_key(members, joined, keys);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The cache's turnover across a failover (--eviction lru, --allocation-ttl-ms): the evictions the
// leader made reach the standbys as its records, so the new leader holds exactly the keys the old
// one answered, on the same pages; a page allocated and never confirmed before the kill is
// reclaimed by the new leader once its TTL ran out (the reclaim time travels in the record, in wall
// time), and its late confirm is 409 there.
TEST_F(HaFaultTest, EvictionsAndAllocationTtlsCarryOverAKill) {
  constexpr auto kTtl = 6000ms;  // longer than a failover takes here, so that it expires after it
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) {
    members.add({"--eviction", "lru", "--read-lease-ms", "1", "--allocation-ttl-ms", std::to_string(kTtl.count())});
  }
  const std::size_t old_leader = members.wait_leader(kWait);
  ASSERT_NE(old_leader, kNone) << members.logs();
  ServerProcess& leader = members.process(old_leader);
  ASSERT_EQ(post(leader, "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  // Ten keys on four pages: each new one evicts the least recently used. k6 read again, so the
  // unconfirmed allocate of u0 evicts k7 (the least recent), not k6.
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) {
    keys.push_back("k" + std::to_string(i));
    std::string failure;
    ASSERT_TRUE(write_key(leader, keys.back(), &failure)) << failure;
  }
  ASSERT_EQ(post(leader, "/keys/batch_exists", keys_body({"k6"})).status, 200);
  const auto allocated = post(leader, "/keys/batch_allocate", allocate_body(0, {"u0"}));
  const auto allocated_at = Clock::now();
  ASSERT_EQ(allocated.status, 200) << allocated.body;
  const std::vector<Page> u0 = allocated_pages(allocated.body, {"u0"});
  ASSERT_EQ(u0.size(), 1u);
  ASSERT_NE(u0[0], kNoPage) << allocated.body;
  const auto before = post(leader, "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(before.body, R"({"exists":[false,false,false,false,false,false,true,false,true,true]})");
  const std::vector<std::string> kept{"k6", "k8", "k9"};
  const auto located = post(leader, "/keys/get_locations", locations_body(0, kept));
  ASSERT_EQ(located.status, 200);

  leader.kill();
  const std::size_t next = members.wait_leader(kWait, all_but(3, old_leader));
  ASSERT_NE(next, kNone) << members.logs();
  ServerProcess& now = members.process(next);
  const auto after = post(now, "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(after.body, before.body);
  const auto relocated = post(now, "/keys/get_locations", locations_body(0, kept));
  ASSERT_EQ(relocated.status, 200);
  EXPECT_EQ(located_pages(relocated.body, kept.size()), located_pages(located.body, kept.size()));
  // Whether the new leader's calls above came before u0's TTL ran out (they would reclaim it).
  const bool within_ttl = Clock::now() < allocated_at + kTtl - 1s;

  // Past u0's TTL, the standby, scraped as Prometheus scrapes every member, reclaims nothing of its
  // own: its state moves by the log alone (a reclaim of its own would put a record in its journal
  // that the log never had, and the leader's would then not follow). The new leader reclaims the
  // page when next asked (a scrape here), never before the TTL; the standby gets that from the log.
  const std::string allocated_gauge = R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"})";
  const std::vector<std::size_t> survivors = all_but(3, old_leader);
  const std::size_t standby = survivors[0] == next ? survivors[1] : survivors[0];
  if (within_ttl) {
    EXPECT_EQ(metric(members, next, allocated_gauge), 1);
  }
  while (Clock::now() < allocated_at + kTtl + 200ms) std::this_thread::sleep_for(50ms);  // the TTL is wall time
  if (within_ttl) {
    EXPECT_EQ(metric(members, standby, allocated_gauge), 1) << members.logs();
  } else {
    std::cerr << "the failover outlasted u0's TTL: the standby's own clock was not put to the test\n";
  }
  EXPECT_EQ(metric(members, next, allocated_gauge), 0) << members.logs();
  const auto late = post(now, "/keys/confirm_write", confirm_body(0, {"u0"}, u0));
  EXPECT_EQ(late.status, 409) << late.body;
  std::string failure;
  ASSERT_TRUE(write_key(now, "after", &failure)) << failure;
  const std::uint64_t tip = members.health(next).applied_seq;
  const auto caught = members.wait_standby_at(standby, members.url(next), tip, kWait);
  EXPECT_EQ(caught.applied_seq, tip) << caught.body << members.logs();
  EXPECT_EQ(metric(members, standby, "hf3fs_meta_ha_log_apply_failures_total"), 0) << members.logs();
  EXPECT_EQ(metric(members, standby, allocated_gauge), 0) << members.logs();
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// A data dir holding changes the cluster's log never had (a server's own, started as a member of a new
// cluster): the member wins the election but will not lead from it (it would serve changes no other
// member can ever have), says why, and applies nothing.
TEST_F(HaFaultTest, AMemberWhoseDataDirIsAheadOfTheLogNeverLeads) {
  TempDir data;
  {
    ServerProcess alone({"--data-dir", data.str()});
    initialize(alone);
    std::string failure;
    ASSERT_TRUE(write_key(alone, "not-the-clusters", &failure)) << failure;
    ASSERT_EQ(alone.terminate(), 0);  // its shutdown snapshot holds change 3
  }
  TempDir logs;
  const std::string log = (logs.path() / "member.log").string();
  ServerProcess member({"--data-dir", data.str(), "--ha-etcd", cluster_->endpoints(), "--ha-cluster", test_name(),
                        "--ha-name", "m0", "--ha-lease-ms", std::to_string(kLease.count())},
                       log);
  const auto deadline = Clock::now() + kWait;
  while (file_tail(log, 200).find("past the log's tip") == std::string::npos && Clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_THAT(file_tail(log, 200), HasSubstr("holds change 3, past the log's tip 0: it was not written by this cluster"));
  for (int i = 0; i < 5; ++i) {
    const auto h = parse_ha_health(http_call(member.base_url() + "/healthz", "", 2000ms));
    EXPECT_NE(h.role, "leader") << h.body;
    const auto refused = post(member, "/keys/batch_exists", keys_body({"not-the-clusters"}));
    EXPECT_EQ(refused.status, 503) << refused.body;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(member.terminate(), 0);
}

// GET /_ha/snapshot sends the newest snapshot file as the data dir holds it, however large: from a
// mapping of the file, a chunk (4 MiB) per write, never copied whole onto the heap. Here a snapshot
// of about 9 MB: three chunks. (The shutdown snapshot of a clean stop is the newest, and no other
// comes after the restart: the journal stays far below --snapshot-after-bytes.)
TEST_F(HaFaultTest, TheLeadersSnapshotIsSentAsTheFileHoldsIt) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const std::size_t only = members.add();
  ASSERT_EQ(members.wait_leader(kWait), only) << members.logs();
  const auto initialized = post(members.process(only), "/rank/0/initialize", R"({"num_pages":100000})");
  ASSERT_EQ(initialized.status, 200) << initialized.body;
  const std::string padding(100, 'k');
  for (int batch = 0; batch < 40; ++batch) {
    std::vector<std::string> keys;
    for (int i = 0; i < 2000; ++i) keys.push_back(std::string(padding).append(std::to_string(batch * 2000 + i)));
    const auto allocated = post(members.process(only), "/keys/batch_allocate", allocate_body(0, keys));
    ASSERT_EQ(allocated.status, 200) << allocated.body.substr(0, 300);
    const auto pages = allocated_pages(allocated.body, keys);
    ASSERT_EQ(pages.size(), keys.size());
    const auto confirmed = post(members.process(only), "/keys/confirm_write", confirm_body(0, keys, pages));
    ASSERT_EQ(confirmed.status, 204) << confirmed.body.substr(0, 300);
  }
  ASSERT_EQ(members.process(only).terminate(), 0);
  members.process(only).restart();
  ASSERT_EQ(members.wait_leader(kWait), only) << members.logs();

  std::filesystem::path newest;
  for (const auto& entry : std::filesystem::directory_iterator(members.data_dir(only))) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("snapshot-") && name.ends_with(".snap") && entry.path() > newest) newest = entry.path();
  }
  ASSERT_FALSE(newest.empty()) << "no snapshot in " << members.data_dir(only);
  std::ifstream in(newest, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(file.size(), std::size_t{8} << 20) << "a snapshot smaller than the test means";
  const auto sent = raw_request(members.process(only).host(), members.process(only).port(), "GET", "/_ha/snapshot");
  ASSERT_EQ(sent.status, 200) << sent.body.substr(0, 300);
  EXPECT_EQ(sent.header("content-type").value_or(""), "application/octet-stream");
  EXPECT_EQ(sent.body.size(), file.size());
  EXPECT_TRUE(sent.body == file) << "the bytes sent differ from " << newest;
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// Without --max-body-bytes a member takes bodies up to 1 MiB (etcd refuses requests above 1.5 MiB).
TEST_F(HaFaultTest, BodyAboveOneMebibyteIsRefusedWith413) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const std::size_t leader = members.add();
  ASSERT_EQ(members.wait_leader(kWait), leader) << members.logs();
  // Trailing whitespace is JSON: a batch_exists body of exactly the size wanted.
  const auto body_of = [](std::size_t size) {
    std::string body = keys_body({"k"});
    body.append(size - body.size(), ' ');
    return body;
  };
  const auto at_limit = post(members.process(leader), "/keys/batch_exists", body_of(std::size_t{1} << 20));
  EXPECT_EQ(at_limit.status, 200) << at_limit.body;
  const auto above = post(members.process(leader), "/keys/batch_exists", body_of((std::size_t{1} << 20) + 1));
  EXPECT_EQ(above.status, 413) << above.body;
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// ---- etcd losing its quorum ---------------------------------------------------------------------

class HaQuorumTest : public EtcdSuite {
 protected:
  // Every etcd member killed by a test runs again after it, whatever the test's outcome.
  void TearDown() override {
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->running(i)) cluster_->restart(i);
    }
  }

  // Kills an etcd member that follows: the quorum stands.
  void kill_etcd_follower() {
    const std::size_t follower = cluster_->follower();
    ASSERT_NE(follower, kNone) << "no etcd member says it follows another";
    cluster_->kill(follower);
  }

  // Kills etcd's leader, once a follower is gone: no quorum, and the member left is a follower. (A
  // leader left alone renews leases until it notices, an election timeout later, that it has no
  // quorum: etcd renews a lease on its leader without consensus.) When the kill returned.
  Clock::time_point kill_etcd_leader() {
    const std::size_t leader = cluster_->leader();
    EXPECT_NE(leader, kNone) << "no etcd member says it leads";
    cluster_->kill(leader == kNone ? 0 : leader);
    return Clock::now();
  }

  // Restarts the killed etcd members; a member leads again and serves (its index), holding every key
  // of `acknowledged`.
  std::size_t recover(HaMembers& members, const std::vector<std::string>& acknowledged) {
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->running(i)) cluster_->restart(i);
    }
    EXPECT_NO_THROW(cluster_->wait_healthy(kWait));
    // Service resumes: a member that says it leads answers a read and takes a change. Until then a
    // member may say "leader" while it no longer serves (its lease lapsed, its thread not yet stood
    // down), or lose a lease just won while etcd settles: each such refusal is shown, and retried.
    const auto deadline = Clock::now() + kWait;
    std::size_t leader = kNone;
    RawResponse exists;
    std::string refusals;
    for (int attempt = 0; leader == kNone && Clock::now() < deadline; ++attempt) {
      const std::size_t said = members.leader();
      if (said != kNone) {
        exists = post(members.process(said), "/keys/batch_exists", keys_body(acknowledged));
        std::string failure = std::to_string(exists.status).append(" ").append(exists.body);
        if (exists.status == 200 &&
            write_key(members.process(said), std::string("after-recovery-").append(std::to_string(attempt)), &failure)) {
          leader = said;
          break;
        }
        refusals.append(members.name(said)).append(" said leader: ").append(failure).append("\n");
      }
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_NE(leader, kNone) << "no member serves once etcd has its quorum again\n" << refusals << members.logs();
    if (leader == kNone) return kNone;
    EXPECT_EQ(count_exists(exists.body, acknowledged.size()), static_cast<int>(acknowledged.size())) << exists.body;
    if (!refusals.empty()) std::cout << "(before a member served:\n" << refusals << ")\n";
    // Whatever the refused change became (its outcome was unknown), every member ends with the log:
    // the one that stepped down rolled back what the log did not take.
    const auto led = members.health(leader);
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (i == leader) continue;
      const auto h = members.wait_standby_at(i, members.url(leader), led.applied_seq, kWait);
      EXPECT_EQ(h.role, "standby") << members.name(i) << ": " << h.body << "\n" << members.logs();
      EXPECT_EQ(h.applied_seq, led.applied_seq) << members.name(i) << ": " << h.body << " against " << led.body;
    }
    return leader;
  }
};

// One etcd member down: the quorum stands and the leader acknowledges changes. Two down: a change
// is answered 503 within the etcd call's timeout, never 200; reads stop; nothing acknowledged is
// lost once etcd recovers.
TEST_F(HaQuorumTest, ChangesStopWithTheQuorumAndNothingAcknowledgedIsLost) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add();
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  ServerProcess& server = members.process(leader);
  initialize(server);
  std::vector<std::string> acknowledged;
  std::string failure;
  for (int i = 0; i < 3; ++i) {
    acknowledged.push_back(std::string("before-").append(std::to_string(i)));
    ASSERT_TRUE(write_key(server, acknowledged.back(), &failure)) << failure;
  }

  ASSERT_NO_FATAL_FAILURE(kill_etcd_follower());
  for (int i = 0; i < 5; ++i) {
    acknowledged.push_back(std::string("one-down-").append(std::to_string(i)));
    EXPECT_TRUE(write_key(server, acknowledged.back(), &failure)) << failure << "\n" << members.logs();
  }

  kill_etcd_leader();
  const auto sent = Clock::now();
  RawConnection connection(server.host(), server.port(), 15s);
  const auto change = connection.request("POST", "/keys/batch_allocate", allocate_body(0, {"no-quorum"}));
  const auto took = Clock::now() - sent;
  EXPECT_EQ(change.status, 503) << change.body << "\n" << members.logs();
  EXPECT_THAT(change.body, HasSubstr("replicated log")) << "a refusal that does not say why";
  EXPECT_LT(took, kRefusalBound) << "the refusal took " << ms(took) << " ms";
  // Whoever is asked, while etcd has no quorum: no change acknowledged, and no read once the lease
  // has lapsed (a real lease on real time: waited for).
  std::this_thread::sleep_until(sent + kLease);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto read = post(members.process(i), "/keys/batch_exists", keys_body(acknowledged));
    EXPECT_EQ(read.status, 503) << members.name(i) << ": " << read.body;
    const auto write = post(members.process(i), "/keys/batch_allocate", allocate_body(0, {"no-quorum-2"}));
    EXPECT_EQ(write.status, 503) << members.name(i) << ": " << write.body;
  }

  recover(members, acknowledged);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// Two etcd members down and no change sent: the leader's reads stop once its lease lapses, measured
// from the last kill (a read answered 200 must have been sent before then + the lease), and they
// stay stopped; nothing acknowledged is lost once etcd recovers.
TEST_F(HaQuorumTest, ReadsStopOnceTheLeaseLapses) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  members.add();
  members.add();
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  ServerProcess& server = members.process(leader);
  initialize(server);
  const std::vector<std::string> acknowledged{"kept"};
  std::string failure;
  ASSERT_TRUE(write_key(server, "kept", &failure)) << failure;

  ASSERT_NO_FATAL_FAILURE(kill_etcd_follower());
  const auto lost = kill_etcd_leader();
  std::optional<Clock::time_point> last_served;  // when the last read answered 200 was sent
  std::optional<Clock::time_point> stopped;
  RawResponse refusal;
  while (Clock::now() < lost + kLease + kReadStopSlack + 3s) {
    const auto sent = Clock::now();
    const auto read = post(server, "/keys/batch_exists", keys_body(acknowledged));
    if (read.status == 200) {
      last_served = sent;
      continue;
    }
    stopped = Clock::now();
    refusal = read;
    break;
  }
  ASSERT_TRUE(stopped.has_value()) << "reads still answered 200 long after the quorum was lost\n" << members.logs();
  EXPECT_EQ(refusal.status, 503) << refusal.body;
  if (last_served) {
    EXPECT_LT(*last_served, lost + kLease) << "a read was answered from a lease that may have lapsed: sent "
                                           << ms(*last_served - lost) << " ms after the quorum was lost";
  }
  EXPECT_LT(*stopped, lost + kLease + kReadStopSlack)
      << "reads stopped " << ms(*stopped - lost) << " ms after the quorum was lost";
  for (int round = 0; round < 5; ++round) {
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto read = post(members.process(i), "/keys/batch_exists", keys_body(acknowledged));
      EXPECT_EQ(read.status, 503) << members.name(i) << ": " << read.body;
    }
    std::this_thread::sleep_for(200ms);
  }

  recover(members, acknowledged);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// The leader key's create revision (the leader's fence) for `cluster`; 0 when nobody holds it or
// etcd does not answer.
std::int64_t leader_fence(const EtcdCluster& etcd, const std::string& cluster) {
  server::ha::EtcdOptions options;
  options.endpoints = etcd.client_urls();
  server::ha::EtcdClient client(options);
  const auto read = client.range({server::ha::Keys(cluster).leader()});
  if (!read || read.value().kvs.empty()) return 0;
  return read.value().kvs.front().create_revision;
}

// Continues a stopped etcd member when it goes, whatever the test's outcome.
class ContinuedAtEnd {
 public:
  ContinuedAtEnd(EtcdCluster& cluster, std::size_t i) : cluster_(cluster), i_(i) {}
  ~ContinuedAtEnd() {
    if (cluster_.running(i_)) cluster_.cont(i_);
  }
  ContinuedAtEnd(const ContinuedAtEnd&) = delete;
  ContinuedAtEnd& operator=(const ContinuedAtEnd&) = delete;

 private:
  EtcdCluster& cluster_;
  std::size_t i_;
};

// An etcd member stops (SIGSTOP: the kernel still takes its connections, nothing answers) while it
// is the first URL of every member's --ha-etcd, under a steady writer on the HA leader. etcd keeps
// its quorum (the member stopped is one of etcd's followers), so the leader must keep leading: its
// append in flight waits one attempt (ha::MemberOptions::etcd_attempt_timeout, 1 s) for the stopped
// member, is repeated through the next, which says it was not taken (or was), and its etcd calls
// start at that member from then on. The longest time between two acknowledged writes is bounded
// by that attempt plus 0.5 s for a busy 2-core machine (it was about 4.5 s when a call waited out
// the whole etcd timeout and the leader stepped down). The leader never steps down (same member,
// same fence), and every write acknowledged is in the log: a standby leads with each of them.
TEST_F(HaQuorumTest, AStoppedEtcdMemberCostsTheLeadersWritesAboutOneAttempt) {
  constexpr auto kGapBound = 1500ms;
  constexpr auto kStoppedFor = 5s;  // past two leases: a lapsed lease or a step-down would show
  const std::size_t stopped = cluster_->follower();
  ASSERT_NE(stopped, kNone) << "no etcd member says it follows another";
  std::string endpoints = cluster_->client_url(stopped);
  for (std::size_t i : all_but(cluster_->size(), stopped)) endpoints.append(",").append(cluster_->client_url(i));
  HaMembers members(endpoints, test_name(), kLease);
  for (int i = 0; i < 3; ++i) members.add();
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_NE(leader, kNone) << members.logs();
  ServerProcess& server = members.process(leader);
  const auto init = post(server, "/rank/0/initialize", R"({"num_pages":100000})");
  ASSERT_EQ(init.status, 200) << init.body;
  const std::int64_t fence = leader_fence(*cluster_, test_name());
  ASSERT_NE(fence, 0);

  std::mutex mutex;
  std::vector<std::string> acknowledged;  // under mutex: keys allocated and confirmed
  std::vector<Clock::time_point> answered;  // under mutex: when each change (either step) was
  std::string refusals;                     // under mutex: the first 20, of `refused`
  int refused = 0;
  std::atomic<bool> stop{false};
  const auto writer_end = Clock::now() + 60s;  // bounded, whatever happens to the members
  // One change acknowledged (true), or refused (noted, and a pause: a leader that stepped down
  // refuses at once, and this is no spin).
  const auto note = [&](bool acknowledged_now, const RawResponse& r) {
    std::lock_guard lock(mutex);
    if (acknowledged_now) {
      answered.push_back(Clock::now());
    } else if (++refused <= 20) {
      refusals.append(std::to_string(r.status)).append(" ").append(r.body).append("\n");
    }
    return acknowledged_now;
  };
  std::thread writer([&] {
    for (int n = 0; n < 50000 && !stop.load() && Clock::now() < writer_end; ++n) {
      const std::string key = std::string("k").append(std::to_string(n));
      const auto allocated = post(server, "/keys/batch_allocate", allocate_body(0, {key}));
      const auto pages = allocated.status == 200 ? allocated_pages(allocated.body, {key}) : std::vector<Page>{};
      if (!note(!pages.empty() && pages.front() != kNoPage, allocated)) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      const auto confirmed = post(server, "/keys/confirm_write", confirm_body(0, {key}, pages));
      if (!note(confirmed.status == 204, confirmed)) {
        std::this_thread::sleep_for(20ms);
        continue;
      }
      std::lock_guard lock(mutex);
      acknowledged.push_back(key);
    }
  });
  const auto count = [&] {
    std::lock_guard lock(mutex);
    return acknowledged.size();
  };
  const auto warm = Clock::now() + kWait;
  while (count() < 20 && Clock::now() < warm) std::this_thread::sleep_for(20ms);

  std::optional<ContinuedAtEnd> continued;
  cluster_->stop(stopped);
  continued.emplace(*cluster_, stopped);
  const auto stopped_at = Clock::now();
  std::this_thread::sleep_for(kStoppedFor);
  const std::size_t leading = members.leader();
  const std::int64_t fence_after = leader_fence(*cluster_, test_name());
  continued.reset();  // SIGCONT
  std::this_thread::sleep_for(1s);
  stop = true;
  writer.join();
  const auto writing_ended = Clock::now();

  std::vector<std::string> keys;
  std::vector<Clock::time_point> times;
  {
    std::lock_guard lock(mutex);
    keys = acknowledged;
    times = answered;
  }
  ASSERT_FALSE(keys.empty());
  // From each acknowledgement to the next, and from the last to the writer's end.
  Clock::duration gap{};
  Clock::time_point gap_from = times.front();
  times.push_back(writing_ended);
  for (std::size_t i = 1; i < times.size(); ++i) {
    if (times[i] - times[i - 1] > gap) {
      gap = times[i] - times[i - 1];
      gap_from = times[i - 1];
    }
  }
  std::cout << "longest gap between acknowledged writes: " << ms(gap) << " ms, from " << ms(gap_from - stopped_at)
            << " ms after the etcd member stopped; " << times.size() - 1 << " changes acknowledged\n";
  EXPECT_LE(ms(gap), ms(kGapBound)) << refused << " refused meanwhile:\n" << refusals << members.logs();
  EXPECT_EQ(leading, leader) << members.logs();
  EXPECT_EQ(fence_after, fence) << "the leader key was taken anew: the leader lost it meanwhile\n" << members.logs();
  EXPECT_THAT(file_tail(members.log_path(leader), 200), Not(HasSubstr("stepped down"))) << members.logs();

  // Every key acknowledged is in the log: the leader has it, and so does a standby once it leads.
  const auto exists = post(server, "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(exists.status, 200) << exists.body;
  EXPECT_EQ(count_exists(exists.body, keys.size()), static_cast<int>(keys.size()));
  EXPECT_EQ(server.terminate(), 0);
  const std::size_t next = members.wait_leader(kWait, all_but(3, leader));
  ASSERT_NE(next, kNone) << members.logs();
  const auto kept = post(members.process(next), "/keys/batch_exists", keys_body(keys));
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(count_exists(kept.body, keys.size()), static_cast<int>(keys.size())) << members.logs();
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// A standby cut off from etcd (its one etcd member killed) while the leader writes and compacts the
// log past it: once etcd is back, the running standby finds the log's entries gone, installs the
// leader's snapshot (GET /_ha/snapshot, an operator's route: the members run with
// --auth-token-file, and the standby fetches with that token) without a restart, follows the log
// from it, and can lead with every key.
TEST_F(HaQuorumTest, AStandbyBehindTheCompactedLogInstallsTheLeadersSnapshotWhileRunning) {
  HaMembers members(cluster_->endpoints(), test_name(), kLease);
  const TempFile token("the-operators-token\n");
  const HttpHeaders auth{{"Authorization", "Bearer the-operators-token"}};
  const std::vector<std::string> snapshots_often = {"--snapshot-after-bytes", "1000", "--auth-token-file", token.path()};
  members.add(snapshots_often);
  const std::size_t leader = members.wait_leader(kWait);
  ASSERT_EQ(leader, 0u) << members.logs();
  const std::size_t etcd_member = cluster_->follower();
  ASSERT_NE(etcd_member, kNone) << "no etcd member says it follows another";
  const std::size_t standby = members.add(snapshots_often, cluster_->client_url(etcd_member));
  initialize(members.process(leader), auth);
  std::vector<std::string> keys;
  const auto write_keys = [&](int n) {
    for (int i = 0; i < n; ++i) {
      keys.push_back(std::string("key-").append(std::to_string(keys.size())));
      std::string failure;
      ASSERT_TRUE(write_key(members.process(leader), keys.back(), &failure, auth)) << failure;
    }
  };
  ASSERT_NO_FATAL_FAILURE(write_keys(5));
  const std::uint64_t before = members.health(leader).applied_seq;
  ASSERT_EQ(members.wait_standby_at(standby, members.url(leader), before, kWait).applied_seq, before) << members.logs();

  cluster_->kill(etcd_member);
  ASSERT_NO_FATAL_FAILURE(write_keys(60));
  const std::uint64_t written = members.health(leader).applied_seq;
  // The standby's lease lapses, and the leader's next compaction passes what it applied.
  const auto deadline = Clock::now() + kWait;
  auto [entries, first] = log_entries(*cluster_, test_name());
  while (!(entries == 0 || first > before + 1) && Clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    std::tie(entries, first) = log_entries(*cluster_, test_name());
  }
  ASSERT_TRUE(entries == 0 || first > before + 1)
      << "the log still holds record " << before + 1 << " (first entry's " << first << ")\n" << members.logs();

  cluster_->restart(etcd_member);
  ASSERT_NO_THROW(cluster_->wait_healthy(kWait));
  const auto h = members.wait_standby_at(standby, members.url(leader), written, kWait);
  ASSERT_EQ(h.applied_seq, written) << h.body << "\n" << members.logs();
  EXPECT_EQ(metric(members, standby, "hf3fs_meta_ha_snapshot_fetches_total", auth), 1);
  EXPECT_THAT(file_tail(members.log_path(standby), 40), HasSubstr("snapshot of change"));
  EXPECT_THAT(file_tail(members.log_path(standby), 40), HasSubstr("while running"));
  // It follows the log from the snapshot on.
  ASSERT_NO_FATAL_FAILURE(write_keys(3));
  const std::uint64_t more = members.health(leader).applied_seq;
  ASSERT_EQ(members.wait_standby_at(standby, members.url(leader), more, kWait).applied_seq, more) << members.logs();

  EXPECT_EQ(members.process(leader).terminate(), 0);
  expect_leads_with_every_key(members, standby, keys, auth);
  EXPECT_EQ(members.stop_all(), "") << members.logs();
}

// ---- flags --------------------------------------------------------------------------------------

// The HA flags that do not fit together: exit 2 before anything starts, the message naming the flag.
TEST(HaFlagsTest, MisfitsExitTwoNamingTheFlag) {
  TempDir data;
  // A member's flags and `extra`; its etcd is never asked (port 1: nothing listens there).
  const auto with = [&data](const std::vector<std::string>& extra, bool data_dir = true) {
    std::vector<std::string> args{"--port", "0", "--host", "127.0.0.1", "--ha-etcd", "http://127.0.0.1:1"};
    if (data_dir) args.insert(args.end(), {"--data-dir", data.str()});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  struct Case {
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<Case> cases{
      {with({"--ha-cluster", "c", "--ha-name", "n"}, false), "--data-dir"},
      {with({"--ha-name", "n"}), "--ha-cluster"},
      {with({"--ha-cluster", "c"}), "--ha-name"},
      {with({"--ha-cluster", "a/b", "--ha-name", "n"}), "--ha-cluster"},
      {with({"--ha-cluster", "c", "--ha-name", "n", "--ha-lease-ms", "1000"}), "--ha-lease-ms"},
      {{"--port", "0", "--host", "127.0.0.1", "--data-dir", data.str(), "--ha-name", "n"}, "--ha-name"},
      {with({"--ha-cluster", "c", "--ha-name", "n", "--max-body-bytes", "2000000"}), "--max-body-bytes"},
      {with({"--ha-cluster", "c", "--ha-name", "n", "--ha-appends-in-flight", "0"}), "--ha-appends-in-flight"},
      {with({"--ha-cluster", "c", "--ha-name", "n", "--ha-appends-in-flight", "17"}), "--ha-appends-in-flight"},
      {with({"--ha-cluster", "c", "--ha-name", "n", "--ha-batch-wait-us", "-1"}), "--ha-batch-wait-us"},
      {{"--port", "0", "--host", "127.0.0.1", "--data-dir", data.str(), "--ha-batch-wait-us", "500"},
       "--ha-batch-wait-us needs --ha-etcd"},
      {{"--port", "0", "--host", "127.0.0.1", "--data-dir", data.str(), "--ha-appends-in-flight", "2"},
       "--ha-appends-in-flight needs --ha-etcd"},
      {{"--verify-ha-log", "--ha-etcd", "http://127.0.0.1:1"}, "--verify-ha-log needs --ha-etcd and --ha-cluster"},
      {{"--verify-ha-log", "--ha-etcd", "http://127.0.0.1:1", "--ha-cluster", "c"},
       "the log of cluster c could not be read"},
      // A member fetches the leader's snapshot with --auth-token-file's token; a tenants file gives it none.
      {with({"--ha-cluster", "c", "--ha-name", "n", "--tenants-file", "/nonexistent/tenants"}), "--auth-token-file"},
  };
  for (const auto& c : cases) {
    std::string line;
    for (const auto& a : c.args) line.append(a).append(" ");
    const auto finished = ServerProcess::run_to_exit(c.args, 10s);
    EXPECT_EQ(finished.exit_code, 2) << line << "\n" << finished.output;
    // The first line is the reason (the rest points at --help).
    const std::string first = finished.output.substr(0, finished.output.find('\n'));
    EXPECT_THAT(first, HasSubstr(c.flag)) << line << "\n" << finished.output;
    EXPECT_THAT(finished.output, Not(HasSubstr("listening on"))) << line;
  }
}

// The same flags made to fit start a member (the refusals above are the flags'), which, with no
// etcd to ask, is a candidate that knows no leader: it refuses without naming one.
TEST(HaFlagsTest, FittingFlagsStartACandidateWhileEtcdIsAway) {
  TempDir data;
  ServerProcess member({"--ha-etcd", "http://127.0.0.1:1", "--data-dir", data.str(), "--ha-cluster", "c",
                        "--ha-name", "n", "--ha-lease-ms", "2000"});
  const auto health = parse_ha_health(http_call(member.base_url() + "/healthz", "", 2000ms));
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.role, "candidate") << health.body;
  EXPECT_EQ(health.leader, "") << health.body;
  EXPECT_EQ(health.applied_seq, 0u) << health.body;
  const auto refused = post(member, "/keys/batch_exists", keys_body({"k"}));
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr(kNotLeaderDetail));
  EXPECT_EQ(refused.header_count("x-hf3fs-leader"), 0u);
  EXPECT_EQ(member.terminate(), 0);
}

}  // namespace
}  // namespace hf3fs_meta::testing
