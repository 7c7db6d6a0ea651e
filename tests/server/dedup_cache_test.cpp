// DedupCache on its own, with an injected clock: the window, the byte budget, the 503 rule (a full
// budget of answers still inside their window refuses new ids; it never forgets one), and the 413
// rule (an answer larger than the whole budget).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dedup_cache.hpp"

namespace hf3fs_meta::server {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using Kind = DedupCache::Kind;

class DedupCacheTest : public ::testing::Test {
 protected:
  DedupCache make(std::size_t max_bytes, std::chrono::milliseconds ttl = 10000ms) {
    return DedupCache(DedupCache::Options{max_bytes, ttl, [this] { return now_; }});
  }
  // One entry with a one-byte id and `pages` pages, reserved and kept.
  static std::size_t weight(std::size_t pages) { return DedupCache::kEntryOverhead + 2 + 4 * pages; }

  DedupCache::Clock::time_point now_{};
};

constexpr int kAllocate = 1;

TEST_F(DedupCacheTest, ARepeatInsideTheWindowGetsTheKeptPagesAndNothingIsApplied) {
  auto cache = make(1 << 20);
  auto first = cache.acquire(kAllocate, "a", "body", 4);
  ASSERT_EQ(first.kind, Kind::owner);
  const std::vector<std::int64_t> pages{7, -1, 3};
  first.claim.complete(200, pages);
  now_ += 9999ms;
  auto repeat = cache.acquire(kAllocate, "a", "body", 4);
  ASSERT_EQ(repeat.kind, Kind::hit);
  EXPECT_EQ(repeat.answer.status, 200);
  EXPECT_THAT(repeat.answer.pages, ElementsAre(7u, 0xFFFFFFFFu, 3u));
  EXPECT_EQ(cache.stats().hits, 1u);
  // The same id on another route is another request.
  EXPECT_EQ(cache.acquire(kAllocate + 1, "a", "body", 0).kind, Kind::owner);
  // Another body under the same id is a conflict.
  EXPECT_EQ(cache.acquire(kAllocate, "a", "other", 4).kind, Kind::conflict);
}

TEST_F(DedupCacheTest, AnAnswerLeavesExactlyAtTheEndOfItsWindow) {
  auto cache = make(1 << 20, 500ms);
  cache.acquire(kAllocate, "a", "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
  now_ += 499ms;
  EXPECT_EQ(cache.acquire(kAllocate, "a", "body", 1).kind, Kind::hit);
  now_ += 1ms;
  EXPECT_EQ(cache.acquire(kAllocate, "a", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, EntriesWeighTheirPagesNotTheirAnswersAndTheExcessReservationIsGivenBack) {
  auto cache = make(1 << 20);
  auto owner = cache.acquire(kAllocate, "a", std::string(7000, 'x'), 1000);
  EXPECT_EQ(cache.stats().bytes, weight(1000));  // reserved for the most the answer can weigh
  owner.claim.complete(200, std::vector<std::int64_t>(10, 1));
  EXPECT_EQ(cache.stats().bytes, weight(10));
  EXPECT_EQ(cache.stats().entries, 1u);
  // Errors are not kept: the reservation goes back.
  cache.acquire(kAllocate, "b", "x", 5).claim.complete(500, {});
  // An abandoned owner (its connection went away) gives it back too.
  { auto abandoned = cache.acquire(kAllocate, "c", "x", 5); }
  EXPECT_EQ(cache.stats().bytes, weight(10));
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST_F(DedupCacheTest, AFullBudgetRefusesUntilTheOldestAnswerLeavesItsWindow) {
  auto cache = make(3 * weight(1), 1000ms);
  for (const char* id : {"a", "b", "c"}) {
    cache.acquire(kAllocate, id, "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
    now_ += 100ms;
  }
  // now = 300 ms; "a" leaves at 1000 ms.
  auto refused = cache.acquire(kAllocate, "d", "body", 1);
  EXPECT_EQ(refused.kind, Kind::full);
  EXPECT_EQ(refused.retry_after, 700ms);
  EXPECT_EQ(cache.stats().refused, 1u);
  // No promise was broken: every kept answer is still there.
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(cache.acquire(kAllocate, id, "body", 1).kind, Kind::hit);
  now_ += 700ms;
  EXPECT_EQ(cache.acquire(kAllocate, "d", "body", 1).kind, Kind::owner);
  EXPECT_EQ(cache.acquire(kAllocate, "a", "body", 1).kind, Kind::owner);  // "a" has left
  EXPECT_LE(cache.stats().bytes, 3 * weight(1));
}

TEST_F(DedupCacheTest, RequestsInFlightHoldTheirReservation) {
  auto cache = make(2 * weight(1));
  auto first = cache.acquire(kAllocate, "a", "body", 1);
  auto second = cache.acquire(kAllocate, "b", "body", 1);
  ASSERT_EQ(second.kind, Kind::owner);
  auto third = cache.acquire(kAllocate, "c", "body", 1);
  EXPECT_EQ(third.kind, Kind::full);
  EXPECT_EQ(third.retry_after, 1000ms);  // nothing kept yet: a second
  first.claim.complete(500, {});
  EXPECT_EQ(cache.acquire(kAllocate, "c", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, ClearForgetsKeptAnswersAndReleasesTheirBytes) {
  auto cache = make(1 << 20);
  cache.acquire(kAllocate, "a", "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
  auto in_flight = cache.acquire(kAllocate, "b", "body", 1);
  cache.clear();
  in_flight.claim.complete(200, std::vector<std::int64_t>{1});  // from before the clear: not kept
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.acquire(kAllocate, "a", "body", 1).kind, Kind::owner);
  EXPECT_EQ(cache.acquire(kAllocate, "b", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, AnAnswerThatCouldNeverFitIsTooLargeAtOnceNotFull) {
  auto cache = make(weight(10));
  EXPECT_EQ(cache.acquire(kAllocate, "a", "body", 11).kind, Kind::too_large);
  EXPECT_EQ(cache.stats().entries, 0u);  // nothing reserved, nothing counted as refused-for-now
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.stats().refused, 0u);
  auto fits = cache.acquire(kAllocate, "a", "body", 10);  // exactly the budget
  ASSERT_EQ(fits.kind, Kind::owner);
  // Full only for now: 503's case, not 413's.
  EXPECT_EQ(cache.acquire(kAllocate, "b", "body", 1).kind, Kind::full);
}

TEST_F(DedupCacheTest, ZeroBytesIsOff) {
  EXPECT_FALSE(make(0).enabled());
  EXPECT_TRUE(make(1).enabled());
  EXPECT_EQ(make(1, 1234ms).window(), 1234ms);
}

}  // namespace
}  // namespace hf3fs_meta::server
