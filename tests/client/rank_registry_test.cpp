// The rank registry on its own (src/client/rank_registry.hpp): what it restores, with what, and
// that calls meeting "not initialized" together share one initialize.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client/rank_registry.hpp"

namespace hf3fs_meta::internal {
namespace {

using Outcome = RankRegistry::Outcome;
constexpr std::chrono::nanoseconds kLong = std::chrono::seconds(10);

Result<std::string> ok(std::int64_t, Role) { return std::string("ok"); }

TEST(RankRegistryTest, AnUnregisteredRankIsNotInitialized) {
  RankRegistry ranks;
  int calls = 0;
  auto r = ranks.restore(3, ranks.epoch(), kLong, [&](std::int64_t, Role) -> Result<std::string> {
    ++calls;
    return std::string("ok");
  });
  EXPECT_EQ(r.outcome, Outcome::unregistered);
  EXPECT_EQ(calls, 0);
}

TEST(RankRegistryTest, ARestoreSendsTheLatestRegistrationAndBumpsTheEpoch) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  ranks.add(3, 128, Role::worker);  // replaces
  std::vector<std::pair<std::int64_t, Role>> sent;
  const auto before = ranks.epoch();
  auto r = ranks.restore(3, before, kLong, [&](std::int64_t n, Role role) -> Result<std::string> {
    sent.emplace_back(n, role);
    return std::string("ok");
  });
  EXPECT_EQ(r.outcome, Outcome::restored);
  EXPECT_FALSE(r.failure);
  EXPECT_THAT(sent, ::testing::ElementsAre(std::pair<std::int64_t, Role>{128, Role::worker}));
  EXPECT_GT(ranks.epoch(), before);
}

TEST(RankRegistryTest, ARankRestoredSinceTheAttemptWasSentIsNotInitializedAgain) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  const auto sent_at = ranks.epoch();
  ASSERT_EQ(ranks.restore(3, sent_at, kLong, ok).outcome, Outcome::restored);
  int calls = 0;
  auto r = ranks.restore(3, sent_at, kLong, [&](std::int64_t, Role) -> Result<std::string> {
    ++calls;
    return std::string("ok");
  });
  EXPECT_EQ(r.outcome, Outcome::restored);
  EXPECT_EQ(calls, 0);
  // An attempt sent after that restore meets a new loss: initialized again.
  EXPECT_EQ(ranks.restore(3, ranks.epoch(), kLong, [&](std::int64_t, Role) -> Result<std::string> {
              ++calls;
              return std::string("ok");
            }).outcome,
            Outcome::restored);
  EXPECT_EQ(calls, 1);
}

TEST(RankRegistryTest, AFailedInitializeIsReportedAndTheNextLossTriesAgain) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  Error refused;
  refused.code = errc::invalid_initialization;
  refused.status = 400;
  const auto epoch = ranks.epoch();
  auto r = ranks.restore(3, epoch, kLong, [&](std::int64_t, Role) -> Result<std::string> { return refused; });
  EXPECT_EQ(r.outcome, Outcome::failed);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->code, errc::invalid_initialization);
  EXPECT_EQ(ranks.epoch(), epoch);  // nothing was restored
  EXPECT_EQ(ranks.restore(3, epoch, kLong, ok).outcome, Outcome::restored);
}

TEST(RankRegistryTest, AnInitializeThatThrowsIsRethrownAndLeavesNoFlightBehind) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  EXPECT_THROW(ranks.restore(3, ranks.epoch(), kLong,
                             [](std::int64_t, Role) -> Result<std::string> { throw std::runtime_error("observer"); }),
               std::runtime_error);
  EXPECT_EQ(ranks.restore(3, ranks.epoch(), kLong, ok).outcome, Outcome::restored);
}

// Sixteen calls meet the loss together: one initialize, and every call sees it restored. Each notes
// the epoch before the initialize can finish (it waits for all of them to arrive), so none of them
// may initialize a second time whatever the interleaving: a waiter shares the flight, a latecomer
// sees the newer epoch.
TEST(RankRegistryConcurrencyTest, CallsMeetingALossTogetherShareOneInitialize) {
  constexpr int kThreads = 16;
  {
    RankRegistry ranks;
    ranks.add(3, 64, Role::worker);
    std::atomic<int> arrived{0};
    std::atomic<int> initializes{0};
    std::vector<Outcome> outcomes(kThreads, Outcome::unregistered);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        const auto epoch = ranks.epoch();
        arrived.fetch_add(1);
        outcomes[static_cast<std::size_t>(i)] =
            ranks.restore(3, epoch, kLong, [&](std::int64_t, Role) -> Result<std::string> {
                   initializes.fetch_add(1);
                   while (arrived.load() < kThreads) std::this_thread::yield();
                   return std::string("ok");
                 }).outcome;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(initializes.load(), 1);
    EXPECT_THAT(outcomes, ::testing::Each(Outcome::restored));
  }
}

// A call waiting for another's restore waits no longer than it may: then it fails with a timeout,
// and the restore in flight carries on for the others.
TEST(RankRegistryConcurrencyTest, AWaiterGivesUpAtItsOwnDeadline) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  const auto epoch = ranks.epoch();
  Outcome first = Outcome::unregistered;
  std::thread restorer([&] {
    first = ranks.restore(3, epoch, kLong, [&](std::int64_t, Role) -> Result<std::string> {
                   started = true;
                   while (!release) std::this_thread::yield();
                   return std::string("ok");
                 }).outcome;
  });
  while (!started) std::this_thread::yield();
  auto waiter = ranks.restore(3, epoch, std::chrono::milliseconds(20), ok);
  release = true;
  restorer.join();
  EXPECT_EQ(waiter.outcome, Outcome::failed);
  ASSERT_TRUE(waiter.failure);
  EXPECT_EQ(waiter.failure->code, errc::timeout);
  EXPECT_EQ(waiter.failure->detail, "waited for another call's re-initialization of rank 3 until this call's deadline");
  EXPECT_EQ(first, Outcome::restored);
}

TEST(RankRegistryTest, ARemovedRankIsNoLongerRestored) {
  RankRegistry ranks;
  ranks.add(3, 64, Role::worker);
  ranks.remove(3);
  EXPECT_EQ(ranks.restore(3, ranks.epoch(), kLong, ok).outcome, Outcome::unregistered);
}

// clear() forgets every rank (a caller that cleared them on purpose), but not one whose restore is in
// flight: its waiters hold on to the entry, as with remove().
TEST(RankRegistryTest, ClearForgetsEveryRankButOneBeingRestored) {
  RankRegistry ranks;
  ranks.add(1, 64, Role::worker);
  ranks.add(2, 64, Role::worker);
  ranks.add(3, 64, Role::worker);
  std::atomic<bool> started{false};
  std::atomic<bool> release{false};
  Outcome restoring = Outcome::unregistered;
  std::thread restorer([&] {
    restoring = ranks.restore(3, ranks.epoch(), kLong, [&](std::int64_t, Role) -> Result<std::string> {
                       started = true;
                       while (!release) std::this_thread::yield();
                       return std::string("ok");
                     }).outcome;
  });
  while (!started) std::this_thread::yield();
  ranks.clear();
  release = true;
  restorer.join();
  EXPECT_EQ(restoring, Outcome::restored);
  EXPECT_EQ(ranks.restore(1, ranks.epoch(), kLong, ok).outcome, Outcome::unregistered);
  EXPECT_EQ(ranks.restore(2, ranks.epoch(), kLong, ok).outcome, Outcome::unregistered);
  EXPECT_EQ(ranks.restore(3, ranks.epoch(), kLong, ok).outcome, Outcome::restored);
  ranks.clear();  // nothing in flight now: rank 3 goes too
  EXPECT_EQ(ranks.restore(3, ranks.epoch(), kLong, ok).outcome, Outcome::unregistered);
}

}  // namespace
}  // namespace hf3fs_meta::internal
