// DedupCache on its own, with an injected clock: the window, the byte budget, the 503 rule (a full
// budget of answers still inside their window refuses new ids; it never forgets one), the 413 rule
// (an answer larger than the whole budget), and what a data dir gives back after a restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dedup_cache.hpp"
#include "durable/journal.hpp"
#include "durable/store.hpp"
#include "hf3fs_meta/state.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::server {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using Kind = DedupCache::Kind;

class DedupCacheTest : public ::testing::Test {
 protected:
  DedupCache make(std::size_t max_bytes, std::chrono::milliseconds ttl = 10000ms, std::size_t namespace_max_bytes = 0) {
    return DedupCache(DedupCache::Options{max_bytes, ttl, [this] { return now_; }, namespace_max_bytes});
  }
  // One entry with a one-byte id and `pages` pages, reserved and kept.
  static std::size_t weight(std::size_t pages) { return DedupCache::kEntryOverhead + 2 + 4 * pages; }

  DedupCache::Clock::time_point now_{};
};

constexpr int kAllocate = static_cast<int>(Route::batch_allocate);  // the router keys its cache by the route
constexpr std::string_view kDefault{};  // the default namespace, as a request without the header names it

TEST_F(DedupCacheTest, ARepeatInsideTheWindowGetsTheKeptPagesAndNothingIsApplied) {
  auto cache = make(1 << 20);
  auto first = cache.acquire(kDefault, kAllocate, "a", "body", 4);
  ASSERT_EQ(first.kind, Kind::owner);
  const std::vector<std::int64_t> pages{7, -1, 3};
  first.claim.complete(200, pages);
  now_ += 9999ms;
  auto repeat = cache.acquire(kDefault, kAllocate, "a", "body", 4);
  ASSERT_EQ(repeat.kind, Kind::hit);
  EXPECT_EQ(repeat.answer.status, 200);
  EXPECT_THAT(repeat.answer.pages, ElementsAre(7u, 0xFFFFFFFFu, 3u));
  EXPECT_EQ(cache.stats().hits, 1u);
  // The same id on another route is another request.
  EXPECT_EQ(cache.acquire(kDefault, kAllocate + 1, "a", "body", 0).kind, Kind::owner);
  // Another body under the same id is a conflict.
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "other", 4).kind, Kind::conflict);
}

TEST_F(DedupCacheTest, AnAnswerLeavesExactlyAtTheEndOfItsWindow) {
  auto cache = make(1 << 20, 500ms);
  cache.acquire(kDefault, kAllocate, "a", "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
  now_ += 499ms;
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 1).kind, Kind::hit);
  now_ += 1ms;
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, EntriesWeighTheirPagesNotTheirAnswersAndTheExcessReservationIsGivenBack) {
  auto cache = make(1 << 20);
  auto owner = cache.acquire(kDefault, kAllocate, "a", std::string(7000, 'x'), 1000);
  EXPECT_EQ(cache.stats().bytes, weight(1000));  // reserved for the most the answer can weigh
  owner.claim.complete(200, std::vector<std::int64_t>(10, 1));
  EXPECT_EQ(cache.stats().bytes, weight(10));
  EXPECT_EQ(cache.stats().entries, 1u);
  // Errors are not kept: the reservation goes back.
  cache.acquire(kDefault, kAllocate, "b", "x", 5).claim.complete(500, {});
  // An abandoned owner (its connection went away) gives it back too.
  { auto abandoned = cache.acquire(kDefault, kAllocate, "c", "x", 5); }
  EXPECT_EQ(cache.stats().bytes, weight(10));
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST_F(DedupCacheTest, AFullBudgetRefusesUntilTheOldestAnswerLeavesItsWindow) {
  auto cache = make(3 * weight(1), 1000ms);
  for (const char* id : {"a", "b", "c"}) {
    cache.acquire(kDefault, kAllocate, id, "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
    now_ += 100ms;
  }
  // now = 300 ms; "a" leaves at 1000 ms.
  auto refused = cache.acquire(kDefault, kAllocate, "d", "body", 1);
  EXPECT_EQ(refused.kind, Kind::full);
  EXPECT_EQ(refused.retry_after, 700ms);
  EXPECT_EQ(cache.stats().refused, 1u);
  // No promise was broken: every kept answer is still there.
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(cache.acquire(kDefault, kAllocate, id, "body", 1).kind, Kind::hit);
  now_ += 700ms;
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "d", "body", 1).kind, Kind::owner);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 1).kind, Kind::owner);  // "a" has left
  EXPECT_LE(cache.stats().bytes, 3 * weight(1));
}

TEST_F(DedupCacheTest, RequestsInFlightHoldTheirReservation) {
  auto cache = make(2 * weight(1));
  auto first = cache.acquire(kDefault, kAllocate, "a", "body", 1);
  auto second = cache.acquire(kDefault, kAllocate, "b", "body", 1);
  ASSERT_EQ(second.kind, Kind::owner);
  auto third = cache.acquire(kDefault, kAllocate, "c", "body", 1);
  EXPECT_EQ(third.kind, Kind::full);
  EXPECT_EQ(third.retry_after, 1000ms);  // nothing kept yet: a second
  first.claim.complete(500, {});
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "c", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, ClearForgetsKeptAnswersAndReleasesTheirBytes) {
  auto cache = make(1 << 20);
  cache.acquire(kDefault, kAllocate, "a", "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
  auto in_flight = cache.acquire(kDefault, kAllocate, "b", "body", 1);
  cache.clear();
  in_flight.claim.complete(200, std::vector<std::int64_t>{1});  // from before the clear: not kept
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 1).kind, Kind::owner);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "b", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, AnAnswerThatCouldNeverFitIsTooLargeAtOnceNotFull) {
  auto cache = make(weight(10));
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 11).kind, Kind::too_large);
  EXPECT_EQ(cache.stats().entries, 0u);  // nothing reserved, nothing counted as refused-for-now
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.stats().refused, 0u);
  auto fits = cache.acquire(kDefault, kAllocate, "a", "body", 10);  // exactly the budget
  ASSERT_EQ(fits.kind, Kind::owner);
  // Full only for now: 503's case, not 413's.
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "b", "body", 1).kind, Kind::full);
}

TEST_F(DedupCacheTest, ARestoredAnswerKeepsWhatWasLeftOfItsWindow) {
  auto cache = make(1 << 20, 1000ms);
  const auto hash = DedupCache::body_hash("body");
  cache.restore(kDefault, kAllocate, "over", hash, 4, KeptAnswer{200, {1}, 5}, 1000ms);
  cache.restore(kDefault, kAllocate, "a", hash, 4, KeptAnswer{200, {2}, 6}, 400ms);
  cache.restore(kDefault, kAllocate, "b", hash, 4, KeptAnswer{200, {3}, 7});  // age unknown: a whole window
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "over", "body", 1).kind, Kind::owner);
  now_ += 599ms;
  auto a = cache.acquire(kDefault, kAllocate, "a", "body", 1);
  ASSERT_EQ(a.kind, Kind::hit);
  EXPECT_THAT(a.answer.pages, ElementsAre(2u));
  now_ += 1ms;
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "a", "body", 1).kind, Kind::owner);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "b", "body", 1).kind, Kind::hit);
  // An entry recovery found, aged by the system clock's difference.
  durable::DedupEntry e{9, durable::DedupTag{Route::batch_allocate, "c", hash, 4}, 200, {4}, 10'000};
  cache.restore(e, 10'999);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "c", "body", 1).kind, Kind::hit);
  now_ += 1ms;
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "c", "body", 1).kind, Kind::owner);
  e.tag.id = "d";
  cache.restore(e, 11'000);  // its window ended before the restart
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "d", "body", 1).kind, Kind::owner);
}

// The scenario, at the unit level: large allocates carrying ids, kept in memory as pages;
// a restart (clean, or a crash after a snapshot) must give every one back. The snapshot used to keep
// whole records (key names and all), within the same budget, so it kept one of these five.
class DedupRecoveryTest : public DedupCacheTest, public ::testing::WithParamInterface<bool> {};

TEST_P(DedupRecoveryTest, RequestIdsSurviveARestartAsTheySurviveInMemory) {
  const bool clean = GetParam();
  hf3fs_meta::testing::TempDir dir;
  constexpr int kAllocates = 5;
  constexpr int kKeys = 2000;  // of 1.5 kB: 3 MB a record, 8 kB an entry
  constexpr std::size_t kBudget = std::size_t{4} << 20;
  const durable::Store::Options store_options{dir.path(), durable::FsyncMode::no, 0, kBudget};
  std::vector<std::string> bodies;
  std::vector<std::vector<std::int64_t>> answers;
  {
    MetadataState state;
    auto store = std::move(durable::Store::open(store_options, state)).value();
    ASSERT_TRUE(state.initialize(0, kAllocates * kKeys).has_value());
    auto cache = make(kBudget);
    for (int i = 0; i < kAllocates; ++i) {
      if (!clean && i == 3) {
        ASSERT_TRUE(store->snapshot().has_value());  // the last two only in the journal
      }
      std::vector<BlockKey> keys;
      for (int k = 0; k < kKeys; ++k) keys.emplace_back(std::string(1500, 'k') + std::to_string(i) + "-" + std::to_string(k));
      bodies.push_back("body of allocate " + std::to_string(i) + " with " + keys.front().key);
      const std::string id = "big-" + std::to_string(i);
      auto acquired = cache.acquire(kDefault, kAllocate, id, bodies.back(), kKeys);
      ASSERT_EQ(acquired.kind, Kind::owner);
      const durable::DedupTag tag{Route::batch_allocate, id, DedupCache::body_hash(bodies.back()), bodies.back().size()};
      durable::Journal::reset_thread_seq();
      std::vector<Page> pages;
      {
        durable::TagScope scope(&tag);
        pages = state.allocate(0, keys).value();
      }
      const auto seq = durable::Journal::thread_seq();
      ASSERT_TRUE(store->journal().write_through(seq).has_value());
      acquired.claim.complete(200, pages, seq);
      answers.emplace_back(pages.begin(), pages.end());
    }
    for (int i = 0; i < kAllocates; ++i) {
      EXPECT_EQ(cache.acquire(kDefault, kAllocate, "big-" + std::to_string(i), bodies[i], kKeys).kind, Kind::hit);
    }
    if (clean) {
      ASSERT_TRUE(store->shutdown().has_value());
    }
  }
  MetadataState state;
  auto store = std::move(durable::Store::open(store_options, state)).value();
  ASSERT_EQ(store->recovered().dedup.size(), std::size_t{kAllocates});
  auto cache = make(kBudget);
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& e : store->recovered().dedup) cache.restore(e, now_ms);
  for (int i = 0; i < kAllocates; ++i) {
    auto repeat = cache.acquire(kDefault, kAllocate, "big-" + std::to_string(i), bodies[i], kKeys);
    ASSERT_EQ(repeat.kind, Kind::hit) << i;
    EXPECT_EQ(repeat.answer.status, 200);
    EXPECT_EQ(std::vector<std::int64_t>(repeat.answer.pages.begin(), repeat.answer.pages.end()), answers[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(ShutdownOrCrash, DedupRecoveryTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "CleanShutdown" : "CrashAfterASnapshot"; });

// The same id and body in two namespaces are two requests, each answered again from its
// own entry.
TEST_F(DedupCacheTest, EachNamespaceKeepsItsOwnAnswers) {
  auto cache = make(1 << 20);
  for (const auto& [ns, page] : {std::pair<std::string_view, std::int64_t>{kDefault, 1}, {"m1", 2}, {"m2", 3}}) {
    auto first = cache.acquire(ns, kAllocate, "r", "body", 1);
    ASSERT_EQ(first.kind, Kind::owner) << ns;  // another namespace's answer is not this one's
    first.claim.complete(200, std::vector<std::int64_t>{page});
  }
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().hits, 0u);
  for (const auto& [ns, page] : {std::pair<std::string_view, std::uint32_t>{kDefault, 1}, {"m1", 2}, {"m2", 3}}) {
    auto repeat = cache.acquire(ns, kAllocate, "r", "body", 1);
    ASSERT_EQ(repeat.kind, Kind::hit) << ns;
    EXPECT_THAT(repeat.answer.pages, ElementsAre(page)) << ns;
  }
  // Another body under the id is a conflict in its own namespace only.
  EXPECT_EQ(cache.acquire("m1", kAllocate, "r", "other", 1).kind, Kind::conflict);
  EXPECT_EQ(cache.acquire("m3", kAllocate, "r", "other", 1).kind, Kind::owner);
  // A namespace's name never runs into the route's letter or the id: "ab" with "x" and "a" with
  // "bx"... keep apart (a name ends at a space no id or name holds).
  cache.acquire("ab", kAllocate, "x", "body", 0).claim.complete(204, {});
  EXPECT_EQ(cache.acquire("a", kAllocate, "bx", "body", 0).kind, Kind::owner);
  EXPECT_EQ(cache.acquire("abb", kAllocate, "x", "body", 0).kind, Kind::owner);
  EXPECT_EQ(cache.acquire("ab", kAllocate, "x", "body", 0).kind, Kind::hit);
  // clear() (forget_state) forgets every namespace's.
  cache.clear();
  for (const std::string_view ns : {kDefault, std::string_view("m1"), std::string_view("m2")}) {
    EXPECT_EQ(cache.acquire(ns, kAllocate, "r", "body", 1).kind, Kind::owner) << ns;
  }
}

// A restored answer goes back to its namespace: the one restore() is given, or a recovered entry's tag.ns.
TEST_F(DedupCacheTest, ARestoredAnswerKeepsItsNamespace) {
  auto cache = make(1 << 20, 1000ms);
  const auto hash = DedupCache::body_hash("body");
  cache.restore("m1", kAllocate, "a", hash, 4, KeptAnswer{200, {5}, 6});
  durable::DedupEntry e{9, durable::DedupTag{Route::batch_allocate, "b", hash, 4, "m2"}, 200, {7}, 0};
  cache.restore(e, 10'000);
  auto a = cache.acquire("m1", kAllocate, "a", "body", 1);
  ASSERT_EQ(a.kind, Kind::hit);
  EXPECT_THAT(a.answer.pages, ElementsAre(5u));
  auto b = cache.acquire("m2", kAllocate, "b", "body", 1);
  ASSERT_EQ(b.kind, Kind::hit);
  EXPECT_THAT(b.answer.pages, ElementsAre(7u));
  for (const std::string_view ns : {kDefault, std::string_view("m2")}) {
    EXPECT_EQ(cache.acquire(ns, kAllocate, "a", "body", 1).kind, Kind::owner) << ns;
  }
  for (const std::string_view ns : {kDefault, std::string_view("m1")}) {
    EXPECT_EQ(cache.acquire(ns, kAllocate, "b", "body", 1).kind, Kind::owner) << ns;
  }
}

// A named namespace's entry weighs its name too (and the two bytes that frame it in the key), in the
// cache as in the journal's retention, so in the snapshot: the budget holds what it says.
TEST_F(DedupCacheTest, ANamedNamespacesEntryWeighsItsNameInTheCacheAndTheJournalAlike) {
  EXPECT_EQ(durable::dedup_weight({}, "r", 1), weight(1));
  EXPECT_EQ(durable::dedup_weight("m1", "r", 1), weight(1) + 4);
  EXPECT_EQ(durable::dedup_weight(std::string(64, 'n'), "r", 0), weight(0) + 66);
  auto cache = make(1 << 20);
  auto owner = cache.acquire("m1", kAllocate, "r", "body", 10);
  EXPECT_EQ(cache.stats().bytes, weight(10) + 4);  // reserved with the name
  owner.claim.complete(200, std::vector<std::int64_t>{3});
  EXPECT_EQ(cache.stats().bytes, weight(1) + 4);
  cache.restore("m2", kAllocate, "s", DedupCache::body_hash("body"), 4, KeptAnswer{200, {1, 2}, 1});
  EXPECT_EQ(cache.stats().bytes, weight(1) + 4 + weight(2) + 4);
  // A budget of exactly three named entries holds three, not four.
  auto three = make(3 * (weight(1) + 4));
  for (const char* id : {"a", "b", "c"}) {
    auto claimed = three.acquire("m1", kAllocate, id, "body", 1);
    ASSERT_EQ(claimed.kind, Kind::owner) << id;
    claimed.claim.complete(200, std::vector<std::int64_t>{0});
  }
  EXPECT_EQ(three.acquire("m1", kAllocate, "d", "body", 1).kind, Kind::full);

  // The journal keeps the newest answers within the budget weighed alike: one byte short of three
  // named entries keeps two (without their names counted, three would fit).
  hf3fs_meta::testing::TempDir dir;
  const std::size_t budget = 3 * durable::dedup_weight("m1", "req-0", 1) - 1;
  const durable::Store::Options store_options{dir.path(), durable::FsyncMode::no, 0, budget};
  {
    MetadataState state;
    auto store = std::move(durable::Store::open(store_options, state)).value();
    ASSERT_TRUE(state.initialize(NamespaceRef{"m1"}, 0, 8).has_value());
    for (int i = 0; i < 5; ++i) {
      const durable::DedupTag tag{Route::batch_allocate, "req-" + std::to_string(i), 0, 0, "m1"};
      durable::TagScope scope(&tag);
      const std::vector<BlockKey> keys{{"k" + std::to_string(i), ""}};
      ASSERT_TRUE(state.allocate(NamespaceRef{"m1"}, 0, keys).has_value());
    }
    ASSERT_TRUE(store->shutdown().has_value());
  }
  MetadataState state;
  auto store = std::move(durable::Store::open(store_options, state)).value();
  const auto& kept = store->recovered().dedup;
  ASSERT_EQ(kept.size(), 2u);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].tag.id, "req-" + std::to_string(i + 3));
    EXPECT_EQ(kept[i].tag.ns, "m1");
  }
}

// A tenant that fills its share is refused while the others still have room: the whole budget is
// three entries, a namespace's share two.
TEST_F(DedupCacheTest, ANamespaceThatFillsItsShareLeavesRoomForTheOthers) {
  auto cache = make(3 * weight(1) + 3 * 5, 1000ms, 2 * weight(1) + 2 * 5);  // + 5: "hog" framed, per key
  for (const char* id : {"a", "b"}) {
    cache.acquire("hog", kAllocate, id, "body", 1).claim.complete(200, std::vector<std::int64_t>{0});
    now_ += 100ms;
  }
  auto refused = cache.acquire("hog", kAllocate, "c", "body", 1);
  EXPECT_EQ(refused.kind, Kind::full);
  EXPECT_TRUE(refused.namespace_share);
  EXPECT_EQ(refused.retry_after, 800ms);  // until hog's oldest ("a", kept at 0 ms) leaves
  // The default namespace and another tenant still get their entries.
  auto victim = cache.acquire(kDefault, kAllocate, "c", "body", 1);
  ASSERT_EQ(victim.kind, Kind::owner);
  victim.claim.complete(200, std::vector<std::int64_t>{0});
  // Now the whole budget is full: refused as the server's, not the namespace's.
  auto whole = cache.acquire("victim", kAllocate, "d", "body", 1);
  EXPECT_EQ(whole.kind, Kind::full);
  EXPECT_FALSE(whole.namespace_share);
  // An answer larger than a share is too large at once, and says whose bound it is.
  auto large = cache.acquire("victim", kAllocate, "e", "body", 100);
  EXPECT_EQ(large.kind, Kind::too_large);
  EXPECT_TRUE(large.namespace_share);
  // When hog's entries leave their window its share is free again.
  now_ += 1000ms;
  EXPECT_EQ(cache.acquire("hog", kAllocate, "c", "body", 1).kind, Kind::owner);
}

// Answers kept before a restart are promises inside their window: restored whatever share the
// restart gives their namespace (a smaller --namespace-dedup-max-bytes, or the default's quarter on a
// server that had one namespace), and counted against it, so new ids wait until they leave.
TEST_F(DedupCacheTest, ARestoredAnswerIsKeptBeyondItsNamespacesShareAndCountsAgainstIt) {
  auto cache = make(1 << 20, 1000ms, weight(1) + 5);
  const auto hash = DedupCache::body_hash("body");
  cache.restore("hog", kAllocate, "a", hash, 4, KeptAnswer{200, {1}, 5});
  cache.restore("hog", kAllocate, "b", hash, 4, KeptAnswer{200, {1}, 6});  // beyond the share: kept
  EXPECT_EQ(cache.acquire("hog", kAllocate, "a", "body", 1).kind, Kind::hit);
  EXPECT_EQ(cache.acquire("hog", kAllocate, "b", "body", 1).kind, Kind::hit);
  EXPECT_EQ(cache.acquire("hog", kAllocate, "c", "body", 1).kind, Kind::full);
  EXPECT_EQ(cache.acquire(kDefault, kAllocate, "c", "body", 1).kind, Kind::owner);
}

TEST_F(DedupCacheTest, ZeroBytesIsOff) {
  EXPECT_FALSE(make(0).enabled());
  EXPECT_TRUE(make(1).enabled());
  EXPECT_EQ(make(1, 1234ms).window(), 1234ms);
}

}  // namespace
}  // namespace hf3fs_meta::server
