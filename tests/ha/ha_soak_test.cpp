// The soak of hf3fs-meta-server's --ha-* members: the leader killed with -9 at
// random moments, 20 times, while workers allocate, confirm and delete through the SDK (a request id
// per call, repeated across the failover). After each failover, with the workers held between calls,
// the new leader is checked against a model of what the workers saw acknowledged; the killed member
// restarts and must rejoin as the new leader's standby.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "support/etcd_suite.hpp"
#include "support/ha_members.hpp"

namespace hf3fs_meta::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kLease = 2000ms;
// Every wait for a leader or a standby: well past a lease and an election on two busy cores.
constexpr auto kWait = 20s;
constexpr int kKills = 20;
constexpr int kWorkers = 3;
// A worker's call gives up after this; so the checker's pause waits at most about this long.
constexpr auto kCallDeadline = 10s;
constexpr std::size_t kNone = HaMembers::kNone;

// The workers' turns: a worker holds one through a call and the model's update after it; the checker
// pauses new turns and waits for those held to end. (A std::shared_mutex starved the checker: the
// workers took their shared lock again back to back.)
class Turns {
 public:
  // Waits while paused; false once stopped.
  bool begin() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !paused_ || stopped_; });
    if (stopped_) return false;
    ++held_;
    return true;
  }
  void end() {
    std::lock_guard lock(mutex_);
    --held_;
    changed_.notify_all();
  }
  // No new turn from now; true once none is held, false if one still is after `bound`.
  bool pause(std::chrono::milliseconds bound) {
    std::unique_lock lock(mutex_);
    paused_ = true;
    return changed_.wait_for(lock, bound, [&] { return held_ == 0; });
  }
  void resume() {
    std::lock_guard lock(mutex_);
    paused_ = false;
    changed_.notify_all();
  }
  void stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool paused_ = false;
  bool stopped_ = false;
  int held_ = 0;
};

// What the workers saw acknowledged. A call that failed has an unknown outcome: its key leaves the
// model (an allocate may hold a page for it, a delete may or may not have happened).
struct Model {
  std::map<std::string, Page> confirmed;
  std::set<std::string> deleted;
  int unknown = 0;
};

class HaSoakTest : public EtcdSuite {
 protected:
  void TearDown() override {
    if (!members_) return;
    const std::string unclean = members_->stop_all();
    EXPECT_EQ(unclean, "");
    if (HasFailure()) std::cerr << members_->logs();
  }

  std::unique_ptr<Client> make_client() {
    ClientOptions o;
    for (std::size_t i = 0; i < members_->size(); ++i) o.endpoints.push_back(members_->url(i));
    return std::make_unique<Client>(std::move(o));
  }

  // One worker's loop: allocate and confirm a new key, or (one time in four) delete one of its own.
  void work(int worker, Client& client, Turns& turns, Model& model, std::mutex& model_mutex) {
    const CallOptions within{.deadline = kCallDeadline};
    std::mt19937 rng(static_cast<unsigned>(worker) + 1);
    std::vector<std::string> mine;  // confirmed and not deleted
    for (int i = 0; turns.begin(); ++i) {
      if (!mine.empty() && rng() % 4 == 0) {
        const std::string key = mine.back();
        mine.pop_back();
        const auto gone = client.delete_keys({key}, within);
        std::lock_guard lock(model_mutex);
        model.confirmed.erase(key);
        if (gone && gone.value() == std::vector<bool>{true}) {
          model.deleted.insert(key);
        } else {
          ++model.unknown;
        }
      } else {
        const std::string key = std::string("soak-").append(std::to_string(worker)).append("-").append(std::to_string(i));
        const auto got = client.allocate(0, {BlockKey(key)}, within);
        const bool allocated = got && got.value().size() == 1 && got.value()[0] != kNoPage;
        const bool confirmed = allocated && client.confirm_write(0, {Confirmation{key, got.value()[0]}}, {}, within);
        std::lock_guard lock(model_mutex);
        if (confirmed) {
          mine.push_back(key);
          model.confirmed.emplace(key, got.value()[0]);
        } else {
          ++model.unknown;
        }
      }
      turns.end();
    }
  }

  // The new leader against the model: every confirmed key on its page, no page held by two of them,
  // no deleted key back. Empty: it holds; else what does not.
  static std::string check(Client& client, const Model& model) {
    const CallOptions within{.deadline = kCallDeadline};
    std::vector<std::string> keys;
    std::vector<Page> pages;
    for (const auto& [key, page] : model.confirmed) {
      keys.push_back(key);
      pages.push_back(page);
    }
    if (std::set<Page>(pages.begin(), pages.end()).size() != pages.size()) return "a page acknowledged to two keys";
    const auto located = client.get_locations(0, keys, within);
    if (!located) return std::string("get_locations: ").append(located.error().message());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (located.value()[i] != pages[i]) {
        return std::string(keys[i]).append(" confirmed on page ").append(std::to_string(pages[i])).append(" is not there");
      }
    }
    const std::vector<std::string> gone(model.deleted.begin(), model.deleted.end());
    const auto exists = client.batch_exists(gone, within);
    if (!exists) return std::string("batch_exists: ").append(exists.error().message());
    for (std::size_t i = 0; i < gone.size(); ++i) {
      if (exists.value()[i]) return std::string(gone[i]).append(", deleted, is back");
    }
    return {};
  }

  std::unique_ptr<HaMembers> members_;
};

TEST_F(HaSoakTest, TwentyLeaderKillsUnderLoadLoseNothingAcknowledged) {
  members_ = std::make_unique<HaMembers>(cluster_->endpoints(), test_name(), kLease);
  for (int i = 0; i < 3; ++i) members_->add();
  std::size_t leader = members_->wait_leader(kWait);
  ASSERT_NE(leader, kNone) << "no leader";
  auto client = make_client();
  ASSERT_TRUE(client->ensure_initialized(0, 1 << 16));
  // The checks read with a client of their own: the workers' failures across 20 kills spend their
  // client's retry budget, which would stop a check on a refused connection to the killed member.
  auto checker = make_client();

  Turns turns;
  Model model;
  std::mutex model_mutex;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] { work(w, *client, turns, model, model_mutex); });
  }
  std::mt19937 moments(21);
  std::string failure;
  std::size_t checked_keys = 0;
  for (int kill = 1; kill <= kKills && failure.empty(); ++kill) {
    const std::string round = std::string("kill ").append(std::to_string(kill)).append(": ");
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + moments() % 1000));
    const std::size_t killed = leader;
    members_->process(killed).kill();
    leader = members_->wait_leader(kWait);
    if (leader == kNone) {
      failure = round + "no new leader";
      break;
    }
    if (!turns.pause(kCallDeadline + 5s)) {
      failure = round + "a worker's call outlived its deadline";
      break;
    }
    {
      std::lock_guard lock(model_mutex);
      if (const std::string wrong = check(*checker, model); !wrong.empty()) failure = round + wrong;
      checked_keys = model.confirmed.size();
    }
    turns.resume();
    members_->process(killed).restart();
    const HaHealth rejoined = members_->wait_role(killed, "standby", members_->url(leader), kWait);
    if (failure.empty() && rejoined.role != "standby") {
      failure = round + members_->name(killed) + " did not rejoin as a standby: " + rejoined.body;
    }
  }
  turns.stop();
  for (auto& t : workers) t.join();
  ASSERT_EQ(failure, "");

  std::lock_guard lock(model_mutex);
  std::cerr << model.confirmed.size() << " keys confirmed (" << checked_keys << " at the last check), "
            << model.deleted.size() << " deleted, " << model.unknown << " calls of unknown outcome, over "
            << kKills << " kills\n";
  EXPECT_GT(model.confirmed.size() + model.deleted.size(), static_cast<std::size_t>(kKills * kWorkers))
      << "the workers hardly worked";
  EXPECT_EQ(check(*checker, model), "");
  // Every other member catches up with the leader's last change.
  const std::uint64_t seq = members_->health(leader).applied_seq;
  for (std::size_t i = 0; i < members_->size(); ++i) {
    if (i == leader) continue;
    const HaHealth h = members_->wait_standby_at(i, members_->url(leader), seq, kWait);
    EXPECT_EQ(h.applied_seq, seq) << members_->name(i) << ": " << h.body;
  }
}

}  // namespace
}  // namespace hf3fs_meta::testing
