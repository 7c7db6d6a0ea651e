// The cache lifecycle of MetadataState: LRU eviction, read leases, reclaim, deletion and
// stats, each with a fake clock, and that with none of it switched on nothing changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/state_snapshot.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;
using testing::block_keys;
using namespace std::chrono_literals;

struct FakeClock {
  std::shared_ptr<std::chrono::milliseconds> now = std::make_shared<std::chrono::milliseconds>(0);
  void set(std::int64_t ms) { *now = std::chrono::milliseconds(ms); }
  std::function<std::chrono::milliseconds()> fn() const {
    return [n = now] { return *n; };
  }
};

struct Options {
  bool lru = false;
  std::int64_t lease_ms = 0;
  std::int64_t ttl_ms = 0;
};

class Lifecycle : public ::testing::Test {
 protected:
  std::unique_ptr<MetadataState> make(Options o) {
    StateOptions options;
    options.eviction = o.lru ? Eviction::lru : Eviction::none;
    options.read_lease = std::chrono::milliseconds(o.lease_ms);
    options.allocation_ttl = std::chrono::milliseconds(o.ttl_ms);
    options.clock = clock.fn();
    return std::make_unique<MetadataState>(options);
  }

  static std::vector<Page> allocate(MetadataState& s, Rank rank, const std::vector<std::string>& keys) {
    auto result = s.allocate(rank, block_keys(keys));
    EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
    return result.has_value() ? result.value() : std::vector<Page>{};
  }
  static void confirm(MetadataState& s, Rank rank, const std::vector<Confirmation>& confirmations,
                      const std::vector<Page>& release = {}) {
    auto result = s.confirm_write(rank, confirmations, release);
    EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
  }
  // Allocates and confirms each key on each rank, in order: the keys become complete in that order.
  static void save(MetadataState& s, const std::vector<Rank>& ranks, const std::vector<std::string>& keys) {
    for (const auto& key : keys) {
      for (Rank r : ranks) {
        const auto pages = allocate(s, r, {key});
        ASSERT_EQ(pages.size(), 1u);
        ASSERT_NE(pages[0], kNoPage) << key << " on rank " << r;
        confirm(s, r, {{key, pages[0]}});
      }
    }
  }
  static std::vector<bool> exists(MetadataState& s, const std::vector<std::string>& keys) {
    return s.batch_exists(keys);
  }
  static std::vector<std::optional<Page>> locations(MetadataState& s, Rank rank, const std::vector<std::string>& keys) {
    auto result = s.get_locations(rank, keys);
    EXPECT_TRUE(result.has_value());
    return result.has_value() ? result.value() : std::vector<std::optional<Page>>{};
  }
  static void expect_counts_add_up(const MetadataState& s) {
    const StateStats st = s.stats();
    for (const auto& [rank, r] : st.ranks) {
      EXPECT_EQ(r.free + r.allocated + r.mapped + r.orphaned + r.draining, r.num_pages) << "rank " << rank;
    }
    EXPECT_EQ(st.keys_complete + st.keys_incomplete, s.key_count());
  }

  FakeClock clock;
};

TEST_F(Lifecycle, WithoutTheOptionsNothingChangesAndNoClockIsRead) {
  StateOptions options;
  options.clock = [] {
    ADD_FAILURE() << "the clock was read";
    return 0ms;
  };
  MetadataState s(options);
  ASSERT_TRUE(s.initialize(0, 3).has_value());
  save(s, {0}, {"a", "b"});
  ASSERT_THAT(exists(s, {"a", "b"}), ElementsAre(true, true));
  EXPECT_THAT(allocate(s, 0, {"c"}), ElementsAre(2));  // never confirmed, never reclaimed
  // A full pool answers -1 (as vLLM) and evicts nothing.
  EXPECT_THAT(allocate(s, 0, {"d"}), ElementsAre(kNoPage));
  EXPECT_THAT(exists(s, {"a", "b"}), ElementsAre(true, true));
  EXPECT_EQ(s.page_state(0, 2), PageState::allocated);
  const StateStats st = s.stats();
  EXPECT_EQ(st.evicted_keys + st.reclaimed_keys + st.reclaimed_allocated_pages + st.reclaimed_orphaned_pages, 0u);
  EXPECT_EQ(st.keys_complete, 2u);
  // Deletion is always there, and frees at once.
  EXPECT_THAT(s.delete_keys(std::vector<std::string>{"a"}), ElementsAre(true));
  EXPECT_EQ(s.page_state(0, 0), PageState::free);
  expect_counts_add_up(s);
}

TEST_F(Lifecycle, EachKindOfUseMovesAKeyToTheMostRecentEndInRequestOrder) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  save(*s, {0}, {"k0", "k1", "k2", "k3"});  // becoming complete is a use: order k0 k1 k2 k3
  EXPECT_THAT(exists(*s, {"k0"}), ElementsAre(true));           // k1 k2 k3 k0
  EXPECT_THAT(locations(*s, 0, {"k1"}), ElementsAre(Optional(1)));  // k2 k3 k0 k1
  // Reuse is a use (first), and the reused key is never a victim: k3 and k0 go, k2 gets its page.
  EXPECT_THAT(allocate(*s, 0, {"k2", "n"}), ElementsAre(2, 0));
  EXPECT_THAT(exists(*s, {"k0", "k1", "k2", "k3"}), ElementsAre(false, true, true, false));
  EXPECT_EQ(s->stats().evicted_keys, 2u);
  confirm(*s, 0, {{"n", 0}});  // k1 k2 n (n became complete)
  // Keys of one request are used in request order: n, then k1 -> k2 n k1.
  EXPECT_THAT(exists(*s, {"n", "k1"}), ElementsAre(true, true));
  EXPECT_THAT(allocate(*s, 0, {"x"}), ElementsAre(3));  // a free page: nothing evicted
  EXPECT_THAT(allocate(*s, 0, {"y"}), ElementsAre(2));  // evicts k2
  EXPECT_THAT(exists(*s, {"k2", "n", "k1"}), ElementsAre(false, true, true));  // n k1
  EXPECT_THAT(allocate(*s, 0, {"z"}), ElementsAre(0));  // evicts n
  EXPECT_THAT(exists(*s, {"n", "k1"}), ElementsAre(false, true));
  EXPECT_EQ(s->stats().evicted_keys, 4u);
  expect_counts_add_up(*s);
}

// An orphaned page, made the only way a page can be orphaned: an incomplete key confirmed again on
// another page.
void orphan(MetadataState& s, Rank rank, const std::string& key) {
  auto first = s.allocate(rank, block_keys({key}));
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(s.confirm_write(rank, std::vector<Confirmation>{{key, first.value()[0]}}, {}).has_value());
  auto second = s.allocate(rank, block_keys({key}));
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(s.confirm_write(rank, std::vector<Confirmation>{{key, second.value()[0]}}, {}).has_value());
  ASSERT_EQ(s.page_state(rank, first.value()[0]), PageState::orphaned);
}

TEST_F(Lifecycle, AConfirmOfAnotherPageKeepsTheKeysPlace) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  ASSERT_TRUE(s->initialize(1, 4).has_value());
  save(*s, {0, 1}, {"a", "b"});  // a b; pages 0, 1 on both ranks
  orphan(*s, 0, "w");            // page 2 orphaned, w on page 3 (incomplete)
  confirm(*s, 0, {{"a", 2}});    // a moves to page 2 (page 0 orphaned), still least recent
  EXPECT_THAT(allocate(*s, 0, {"u"}), ElementsAre(2));  // evicts a, from both ranks
  EXPECT_THAT(exists(*s, {"a", "b"}), ElementsAre(false, true));
  EXPECT_EQ(s->page_state(0, 0), PageState::orphaned);
  EXPECT_THAT(s->free_pages(1), ElementsAre(2, 3, 0));
}

TEST_F(Lifecycle, TheNumberOfKeysEvictedIsWhatTheAllocateLacks) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 8).has_value());
  save(*s, {0}, {"a", "b", "c", "d", "e", "f", "g"});  // one page left free
  EXPECT_THAT(allocate(*s, 0, {"x", "y", "z"}), ElementsAre(7, 0, 1));
  EXPECT_EQ(s->stats().evicted_keys, 2u);
  EXPECT_THAT(exists(*s, {"a", "b", "c"}), ElementsAre(false, false, true));
  EXPECT_EQ(s->key_count(), 5u);
  expect_counts_add_up(*s);
}

TEST_F(Lifecycle, AllOrNothingWithEviction) {
  auto s = make({.lru = true, .lease_ms = 1000});
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  save(*s, {0}, {"a", "b", "c", "d"});
  EXPECT_THAT(exists(*s, {"a", "b"}), ElementsAre(true, true));  // leased: never victims
  // Needs 3; c and d are evicted (the only candidates), then the pool of 2 is short: as vLLM, all -1
  // except a complete key of the batch, which gets its page back.
  EXPECT_THAT(allocate(*s, 0, {"x", "a", "y"}), ElementsAre(kNoPage, 0, kNoPage));
  EXPECT_THAT(exists(*s, {"a", "b", "c", "d"}), ElementsAre(true, true, false, false));
  EXPECT_THAT(s->free_pages(0), ElementsAre(2, 3));
  const RankStats r = *s->rank_stats(0);
  EXPECT_EQ(r.allocated, 0);
  EXPECT_EQ(s->stats().evicted_keys, 2u);
}

TEST_F(Lifecycle, KeysOfTheAllocateAreNeverItsVictims) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  save(*s, {0}, {"a", "b"});
  EXPECT_THAT(allocate(*s, 0, {"a", "c", "d"}), ElementsAre(0, kNoPage, kNoPage));
  EXPECT_THAT(exists(*s, {"a", "b"}), ElementsAre(true, false));
}

TEST_F(Lifecycle, AMultiRankKeyIsEvictedOnEveryRank) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  ASSERT_TRUE(s->initialize(1, 2).has_value());
  save(*s, {0, 1}, {"a", "b"});
  // Both ranks full: an allocate on rank 0 evicts a from both.
  EXPECT_THAT(allocate(*s, 0, {"c"}), ElementsAre(0));
  EXPECT_EQ(s->key_info("a"), std::nullopt);
  EXPECT_EQ(s->page_state(1, 0), PageState::free);
  EXPECT_THAT(s->free_pages(1), ElementsAre(0));
  // Only keys holding a page on the allocate's rank are candidates.
  ASSERT_TRUE(s->initialize(2, 1).has_value());
  EXPECT_THAT(allocate(*s, 2, {"d"}), ElementsAre(0));
  EXPECT_THAT(allocate(*s, 2, {"e"}), ElementsAre(kNoPage));
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(true));
}

// A record holds a name of up to 32 bytes and one rank's page inside it, longer names and more
// pages in heap blocks: ids reused across every combination keep each key's name and pages exact.
TEST_F(Lifecycle, ReusedIdsKeepKeysOfAnyLengthOnAnyNumberOfRanks) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 3).has_value());
  std::vector<std::pair<std::string, std::vector<Rank>>> saved;
  const auto save_and_check = [&](std::size_t length, const std::vector<Rank>& ranks) {
    std::string key = std::to_string(saved.size());
    key.resize(std::max(length, key.size()), 'x');
    save(*s, ranks, {key});
    saved.emplace_back(key, ranks);
    std::size_t live = 0;
    for (const auto& [k, on] : saved) {
      const auto info = s->key_info(k);
      if (!info) continue;
      ++live;
      ASSERT_EQ(info->pages.size(), on.size()) << k.size() << "-byte key";
      for (const auto& [rank, page] : info->pages) EXPECT_EQ(s->page_owner(rank, page), k);
    }
    EXPECT_EQ(live, std::min<std::size_t>(saved.size(), 3));
    EXPECT_TRUE(s->key_info(key).has_value());
  };
  for (const std::size_t length : {31, 32, 33, 0, 64, 65, 32}) save_and_check(length, {0});
  ASSERT_TRUE(s->initialize(1, 3).has_value());
  for (const std::size_t length : {300, 1, 32, 9000, 2, 33, 65}) save_and_check(length, {0, 1});
  EXPECT_EQ(s->stats().evicted_keys, saved.size() - 3);
  EXPECT_LE(s->stats().key_records, 4u);
}

TEST_F(Lifecycle, LookupsAndReuseLeaseAKeyAndLeasesEndInOrder) {
  auto s = make({.lru = true, .lease_ms = 1000});
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  save(*s, {0}, {"k0", "k1", "k2", "k3"});
  EXPECT_THAT(exists(*s, {"k0"}), ElementsAre(true));  // leased until 1000
  clock.set(10);
  EXPECT_THAT(locations(*s, 0, {"k1"}), ElementsAre(Optional(1)));  // until 1010
  clock.set(20);
  // Reuse leases k2 until 1020; the pool must hold a page for it, so k3, the only key not leased, goes.
  EXPECT_THAT(allocate(*s, 0, {"k2"}), ElementsAre(2));
  EXPECT_THAT(exists(*s, {"k3"}), ElementsAre(false));
  EXPECT_EQ(s->stats().keys_leased, 3u);
  EXPECT_THAT(allocate(*s, 0, {"x"}), ElementsAre(3));
  clock.set(999);
  // Every candidate leased: answered as on a pool without them.
  EXPECT_THAT(allocate(*s, 0, {"y"}), ElementsAre(kNoPage));
  EXPECT_THAT(exists(*s, {"k0"}), ElementsAre(true));  // renewed until 1999
  clock.set(1019);  // k1's lease ended at 1010: k1 is the only candidate
  EXPECT_THAT(allocate(*s, 0, {"y"}), ElementsAre(1));
  clock.set(1020);
  EXPECT_EQ(s->stats().keys_leased, 1u);
  EXPECT_THAT(allocate(*s, 0, {"z"}), ElementsAre(2));  // k2
  clock.set(1998);
  EXPECT_THAT(allocate(*s, 0, {"w"}), ElementsAre(kNoPage));
  clock.set(1999);
  EXPECT_THAT(allocate(*s, 0, {"w"}), ElementsAre(0));  // k0
  EXPECT_EQ(s->stats().evicted_keys, 4u);
}

TEST_F(Lifecycle, LeasesEndInTheOrderTheyBegan) {
  auto s = make({.lru = true, .lease_ms = 100});
  ASSERT_TRUE(s->initialize(0, 3).has_value());
  save(*s, {0}, {"a", "b", "c"});
  EXPECT_THAT(exists(*s, {"c", "a"}), ElementsAre(true, true));
  clock.set(1);
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(true));
  clock.set(500);  // all ended: they re-entered the LRU order as c, a, b
  EXPECT_THAT(allocate(*s, 0, {"x"}), ElementsAre(2));
  EXPECT_THAT(allocate(*s, 0, {"y"}), ElementsAre(0));
  EXPECT_THAT(exists(*s, {"a", "b", "c"}), ElementsAre(false, true, false));
}

TEST_F(Lifecycle, ReclaimsAllocatedPagesInAllocationOrderAndRefusesTheLateConfirm) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a"}), ElementsAre(0));
  clock.set(10);
  EXPECT_THAT(allocate(*s, 0, {"b", "c"}), ElementsAre(1, 2));
  confirm(*s, 0, {{"c", 2}});
  clock.set(99);
  EXPECT_EQ(s->page_state(0, 0), PageState::allocated);
  clock.set(100);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_EQ(s->page_state(0, 1), PageState::allocated);
  clock.set(200);
  EXPECT_THAT(s->free_pages(0), ElementsAre(3, 0, 1));
  EXPECT_EQ(s->page_state(0, 2), PageState::mapped);  // confirmed in time
  // A late confirm of a reclaimed (free) page: 409 stale, nothing applied.
  const auto late = s->confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {});
  ASSERT_TRUE(late.has_error());
  EXPECT_EQ(late.error().kind, StateErrc::stale);
  EXPECT_EQ(s->key_info("a"), std::nullopt);
  EXPECT_EQ(s->stats().reclaimed_allocated_pages, 2u);
  expect_counts_add_up(*s);
}

// An HA standby's state (hold_clock): nothing expires by the clock, however far it goes, and no
// change is recorded; let go, what expired meanwhile expires at the next call.
TEST_F(Lifecycle, AHeldClockExpiresNothingUntilLetGo) {
  auto s = make({.lru = true, .lease_ms = 50, .ttl_ms = 100});
  std::vector<ChangeKind> recorded;
  s->set_change_sink([&recorded](const Change& change) { recorded.push_back(change.kind); });
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a"}), ElementsAre(0));
  s->hold_clock(true);
  const std::size_t before = recorded.size();
  clock.set(1000);
  EXPECT_EQ(s->page_state(0, 0), PageState::allocated);
  EXPECT_EQ(s->stats().reclaimed_allocated_pages, 0u);
  EXPECT_EQ(recorded.size(), before);
  s->hold_clock(false);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_EQ(s->stats().reclaimed_allocated_pages, 1u);
  EXPECT_GT(recorded.size(), before);
}

TEST_F(Lifecycle, ALateConfirmOfAReclaimedPageAllocatedToAnotherKeyIsRefused) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 1).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a"}), ElementsAre(0));
  clock.set(100);
  EXPECT_THAT(allocate(*s, 0, {"b"}), ElementsAre(0));  // reclaimed from a, handed to b
  const auto before = testing::snapshot(*s, {"a", "b"});
  const auto late = s->confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {});
  ASSERT_TRUE(late.has_error());
  EXPECT_EQ(late.error().kind, StateErrc::conflict);
  EXPECT_EQ(late.error().message, "page 0 of key a was allocated for another key on rank 0");
  EXPECT_EQ(testing::snapshot(*s, {"a", "b"}), before);
  confirm(*s, 0, {{"b", 0}});
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(true));
}

TEST_F(Lifecycle, AReleasedAndReallocatedPageIsTimedFromItsNewAllocation) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 1).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a"}), ElementsAre(0));
  confirm(*s, 0, {}, {0});
  clock.set(50);
  EXPECT_THAT(allocate(*s, 0, {"b"}), ElementsAre(0));
  clock.set(100);
  EXPECT_EQ(s->page_state(0, 0), PageState::allocated);
  clock.set(150);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
}

TEST_F(Lifecycle, ReclaimsIncompleteKeysOnEveryRank) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  ASSERT_TRUE(s->initialize(1, 2).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a", "b"}), ElementsAre(0, 1));
  EXPECT_THAT(allocate(*s, 1, {"a", "b"}), ElementsAre(0, 1));
  confirm(*s, 0, {{"a", 0}, {"b", 1}});
  clock.set(50);
  confirm(*s, 1, {{"b", 1}});  // b complete; a never completes
  clock.set(99);
  EXPECT_NE(s->key_info("a"), std::nullopt);
  clock.set(100);
  EXPECT_EQ(s->key_info("a"), std::nullopt);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_EQ(s->page_state(1, 0), PageState::free);  // reclaimed as an allocated page at 100 as well
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(true));
  const StateStats st = s->stats();
  EXPECT_EQ(st.reclaimed_keys, 1u);
  EXPECT_EQ(st.reclaimed_allocated_pages, 1u);
  // A key confirmed on more ranks than its tp_world_size stops being complete: dropped ttl later.
  ASSERT_TRUE(s->initialize(2, 1).has_value());
  EXPECT_THAT(allocate(*s, 2, {"b"}), ElementsAre(0));
  confirm(*s, 2, {{"b", 0}});
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(false));
  clock.set(200);
  EXPECT_EQ(s->key_info("b"), std::nullopt);
  EXPECT_EQ(s->stats().reclaimed_keys, 2u);
  expect_counts_add_up(*s);
}

TEST_F(Lifecycle, ReclaimsOrphanedPages) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 3).has_value());
  ASSERT_TRUE(s->initialize(1, 3).has_value());
  EXPECT_THAT(allocate(*s, 0, {"w"}), ElementsAre(0));
  confirm(*s, 0, {{"w", 0}});  // w incomplete (tp_world_size 2)
  clock.set(30);
  EXPECT_THAT(allocate(*s, 0, {"w"}), ElementsAre(1));
  confirm(*s, 0, {{"w", 1}});  // page 0 orphaned at 30
  clock.set(100);              // w dropped (incomplete since 0): page 1 back
  EXPECT_THAT(s->free_pages(0), ElementsAre(2, 1));
  clock.set(129);
  EXPECT_EQ(s->page_state(0, 0), PageState::orphaned);
  clock.set(130);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_THAT(s->free_pages(0), ElementsAre(2, 1, 0));
  EXPECT_EQ(s->stats().reclaimed_orphaned_pages, 1u);
  EXPECT_EQ(s->stats().reclaimed_keys, 1u);
}

TEST_F(Lifecycle, DeleteWithoutALeaseFreesAtOnce) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  ASSERT_TRUE(s->initialize(1, 2).has_value());
  save(*s, {0, 1}, {"a", "b"});
  EXPECT_THAT(s->delete_keys(std::vector<std::string>{"a", "zz", "a"}), ElementsAre(true, false, false));
  EXPECT_THAT(exists(*s, {"a", "b"}), ElementsAre(false, true));
  EXPECT_THAT(s->free_pages(0), ElementsAre(0));
  EXPECT_THAT(s->free_pages(1), ElementsAre(0));
  EXPECT_EQ(s->stats().deleted_keys, 1u);
  // A deleted key is gone from the LRU order too: the next eviction takes b.
  EXPECT_THAT(allocate(*s, 0, {"c", "d"}), ElementsAre(0, 1));
  EXPECT_EQ(s->stats().evicted_keys, 1u);
}

// Keys restored from an image (a snapshot) leave every lookup when deleted or evicted, as any other,
// and their ids are reused without a trace of them.
TEST_F(Lifecycle, KeysRestoredFromAnImageAreDeletedAndEvicted) {
  auto original = make({.lru = true});
  ASSERT_TRUE(original->initialize(0, 3).has_value());
  save(*original, {0}, {"a", "b", "c"});
  auto s = make({.lru = true});
  ASSERT_TRUE(s->import_image(original->export_image()).has_value());
  EXPECT_THAT(s->delete_keys(std::vector<std::string>{"b"}), ElementsAre(true));
  EXPECT_THAT(exists(*s, {"a", "b", "c"}), ElementsAre(true, false, true));
  // The pool lacks a page for "e": "a", the least recently used (restored in id order), is evicted.
  EXPECT_THAT(allocate(*s, 0, {"d", "e"}), ElementsAre(1, 0));
  confirm(*s, 0, {{"d", 1}, {"e", 0}});  // the ids of "b" and "a" are reused
  EXPECT_THAT(exists(*s, {"a", "b", "c", "d", "e"}), ElementsAre(false, false, true, true, true));
  EXPECT_EQ(s->key_info("a"), std::nullopt);
  EXPECT_EQ(s->key_info("b"), std::nullopt);
  EXPECT_EQ(s->key_count(), 3u);
  EXPECT_EQ(s->stats().evicted_keys, 1u);
  expect_counts_add_up(*s);
}

TEST_F(Lifecycle, DeleteUnderALeaseDrainsWhenTheLeaseEnds) {
  auto s = make({.lease_ms = 1000});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  save(*s, {0}, {"a"});
  EXPECT_THAT(locations(*s, 0, {"a"}), ElementsAre(Optional(0)));
  clock.set(10);
  EXPECT_THAT(s->delete_keys(std::vector<std::string_view>{"a"}), ElementsAre(true));
  EXPECT_THAT(exists(*s, {"a"}), ElementsAre(false));
  EXPECT_EQ(s->key_count(), 0u);
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  EXPECT_EQ(s->page_owner(0, 0), std::nullopt);
  EXPECT_EQ(s->rank_stats(0)->draining, 1);
  expect_counts_add_up(*s);
  // The page cannot be released nor confirmed by another key while it drains.
  confirm(*s, 0, {}, {0});
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  const auto other = s->confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {});
  ASSERT_TRUE(other.has_error());
  EXPECT_EQ(other.error().kind, StateErrc::conflict);
  clock.set(999);
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  clock.set(1000);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_THAT(s->free_pages(0), ElementsAre(1, 0));
  EXPECT_EQ(s->stats().keys_leased, 0u);
  expect_counts_add_up(*s);
}

// A reclaimed page reallocated: K1's allocation of page 0 is reclaimed and page 0 is allocated to K3; a bare
// release of page 0 (K1's late one, or K3's: they cannot be told apart) is refused with nothing
// applied; a keyed one frees it only for K3.
TEST_F(Lifecycle, ABareReleaseOfAPageReallocatedAfterAReclaimIsRefused) {
  auto s = make({.ttl_ms = 100});
  std::vector<ChangeKind> records;
  s->set_change_sink([&](const Change& c) { records.push_back(c.kind); });
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k1", "k2"}), ElementsAre(0, 1));
  confirm(*s, 0, {{"k2", 1}});
  clock.set(100);  // k1's page 0 reclaimed
  EXPECT_THAT(allocate(*s, 0, {"k3"}), ElementsAre(0));
  const auto before = testing::snapshot(*s, {"k1", "k2", "k3"});
  const std::size_t records_before = records.size();
  const std::vector<Confirmation> k2_again{{"k2", 1}};
  for (const auto& confirmations : {std::vector<Confirmation>{}, k2_again}) {
    const auto late = s->confirm_write(0, confirmations, std::vector<Page>{0});
    ASSERT_TRUE(late.has_error());
    EXPECT_EQ(late.error().kind, StateErrc::conflict);
    EXPECT_EQ(late.error().index, 0u);
    EXPECT_THAT(late.error().message,
                ::testing::StartsWith("pages_to_release[0]: page 0 was reclaimed by the allocation TTL and allocated "
                                      "again since on rank 0"));
    EXPECT_EQ(testing::snapshot(*s, {"k1", "k2", "k3"}), before);
    EXPECT_EQ(records.size(), records_before);
  }
  // Keyed: k1's release is late (nothing freed, no error); k3's frees the page.
  const std::vector<ReleaseKey> as_k1{{0, "k1"}};
  const auto k1_late = s->confirm_write(0, {}, std::vector<Page>{0}, as_k1);
  ASSERT_TRUE(k1_late.has_value());
  EXPECT_EQ(k1_late.value().late, 1u);
  EXPECT_EQ(k1_late.value().released, 0u);
  EXPECT_EQ(s->page_state(0, 0), PageState::allocated);
  const std::vector<ReleaseKey> as_k3{{0, "k3"}};
  const auto k3_release = s->confirm_write(0, {}, std::vector<Page>{0}, as_k3);
  ASSERT_TRUE(k3_release.has_value());
  EXPECT_EQ(k3_release.value().released, 1u);
  EXPECT_EQ(k3_release.value().late, 0u);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  // Freed by a release, the page is allocated the ordinary way again: a bare release frees it.
  EXPECT_THAT(allocate(*s, 0, {"k5"}), ElementsAre(0));
  confirm(*s, 0, {}, {0});
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
}

// The reclaim marks are part of the image: a restored state refuses the same bare release, and an
// image whose marks name no page of the rank, or repeat one, is refused whole.
TEST_F(Lifecycle, TheReclaimMarksAreInTheImage) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 1).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k1"}), ElementsAre(0));
  clock.set(100);
  EXPECT_THAT(allocate(*s, 0, {"k3"}), ElementsAre(0));
  const StateImage image = s->export_image();
  ASSERT_EQ(image.ranks.size(), 1u);
  EXPECT_EQ(image.ranks[0].reclaimed, std::vector<std::uint32_t>{0});
  EXPECT_TRUE(image.has_reclaim_marks());
  auto restored = make({.ttl_ms = 100});
  ASSERT_TRUE(restored->import_image(image).has_value());
  EXPECT_EQ(restored->export_image(), image);
  const auto late = restored->confirm_write(0, {}, std::vector<Page>{0});
  ASSERT_TRUE(late.has_error());
  EXPECT_EQ(late.error().kind, StateErrc::conflict);
  for (const std::vector<std::uint32_t>& marks : {std::vector<std::uint32_t>{1}, std::vector<std::uint32_t>{0, 0}}) {
    StateImage bad = image;
    bad.ranks[0].reclaimed = marks;
    auto other = make({.ttl_ms = 100});
    const auto refused = other->import_image(bad);
    ASSERT_TRUE(refused.has_error());
    EXPECT_THAT(refused.error().message, ::testing::HasSubstr("rank 0 reclaim mark"));
    EXPECT_TRUE(other->stats().ranks.empty());
  }
}

// The page's confirm by its new holder ends the doubt too; a page never reclaimed releases as vLLM.
TEST_F(Lifecycle, AConfirmEndsTheDoubtAndOrdinaryAllocationsReleaseAsVllm) {
  auto s = make({.ttl_ms = 100});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k1"}), ElementsAre(0));
  clock.set(100);
  EXPECT_THAT(allocate(*s, 0, {"k3", "x"}), ElementsAre(1, 0));  // 1 never reclaimed, 0 reclaimed from k1
  confirm(*s, 0, {}, {1});                                        // bare, ordinary: freed
  EXPECT_EQ(s->page_state(0, 1), PageState::free);
  confirm(*s, 0, {{"x", 0}});
  EXPECT_TRUE(s->delete_keys(std::vector<std::string>{"x"})[0]);
  EXPECT_THAT(allocate(*s, 0, {"y", "z"}), ElementsAre(1, 0));
  confirm(*s, 0, {}, {0, 1});
  EXPECT_THAT(s->free_pages(0), ElementsAre(0, 1));
}

// A keyed release frees only a page allocated for its key: not an orphaned one, a free one, nor one
// allocated for another key (each late, none an error); a mapped one is kept, as a bare release of
// it is (kept_on_release counts both); a bare one still frees an orphaned page.
TEST_F(Lifecycle, AKeyedReleaseFreesOnlyAPageAllocatedForItsKey) {
  auto s = make({});
  ASSERT_TRUE(s->initialize(0, 5).has_value());
  EXPECT_THAT(allocate(*s, 0, {"a", "b", "c"}), ElementsAre(0, 1, 2));
  confirm(*s, 0, {{"a", 0}});
  const std::vector<ReleaseKey> keyed{{0, "a"}, {1, "a"}, {2, "b"}, {3, "b"}, {5, "c"}};
  const auto out = s->confirm_write(0, {}, std::vector<Page>{0, 1, 3, 1, 2, 2}, keyed);
  ASSERT_TRUE(out.has_value()) << out.error().message;
  // [a,0] mapped: kept; [a,1] for b: late; [b,3] free: late; [b,1]: freed; 2 bare: freed; [c,2]: late.
  EXPECT_EQ(out.value().released, 2u);
  EXPECT_EQ(out.value().late, 3u);
  EXPECT_EQ(out.value().kept_mapped, 1u);
  EXPECT_THAT(s->free_pages(0), ElementsAre(3, 4, 1, 2));
  EXPECT_EQ(s->page_state(0, 0), PageState::mapped);
  // Keyed indexes out of order are refused before anything is applied.
  const std::vector<ReleaseKey> unordered{{1, "x"}, {0, "y"}};
  const auto bad = s->confirm_write(0, {}, std::vector<Page>{3, 4}, unordered);
  ASSERT_TRUE(bad.has_error());
  EXPECT_EQ(bad.error().kind, StateErrc::invalid_argument);
}

// A leased key confirmed onto another page: a key under a read lease moves to another page; its old page, which a reader
// was told, drains until the lease ends, whatever releases it (bare or keyed), reclaims it or
// confirms it meanwhile; /stats counts it as draining; then it goes to the end of its pool.
TEST_F(Lifecycle, APageOrphanedUnderALeaseDrainsUntilTheLeaseEnds) {
  auto s = make({.lru = true, .lease_ms = 1000, .ttl_ms = 100});
  std::vector<ChangeKind> records;
  s->set_change_sink([&](const Change& c) { records.push_back(c.kind); });
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(0));
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(1));  // a second writer of k (not complete yet)
  confirm(*s, 0, {{"k", 0}});
  clock.set(10);
  EXPECT_THAT(locations(*s, 0, {"k"}), ElementsAre(Optional(0)));  // leased until 1010
  confirm(*s, 0, {{"k", 1}});                                       // orphans page 0
  EXPECT_EQ(records.back(), ChangeKind::page_draining);
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  EXPECT_EQ(s->rank_stats(0)->draining, 1);
  EXPECT_EQ(s->rank_stats(0)->orphaned, 0);
  expect_counts_add_up(*s);
  const std::vector<ReleaseKey> keyed{{1, "k"}};
  const auto released = s->confirm_write(0, {}, std::vector<Page>{0, 0}, keyed);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released.value().released, 0u);
  EXPECT_EQ(released.value().kept_mapped, 2u);  // draining: kept, keyed or not
  EXPECT_EQ(released.value().late, 0u);
  const auto taken = s->confirm_write(0, std::vector<Confirmation>{{"j", 0}}, {});
  ASSERT_TRUE(taken.has_error());
  EXPECT_EQ(taken.error().message, "page 0 of key j is draining on rank 0");
  clock.set(500);  // past the TTL's orphan reclaim; the pool has 2 and 3 only
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  EXPECT_THAT(allocate(*s, 0, {"x", "y", "z"}), ElementsAre(kNoPage, kNoPage, kNoPage));
  clock.set(1009);
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  clock.set(1010);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
  EXPECT_EQ(s->free_pages(0).back(), 0);
  EXPECT_EQ(records.back(), ChangeKind::key_drained);
  EXPECT_EQ(s->stats().reclaimed_orphaned_pages, 0u);
  expect_counts_add_up(*s);
}

// The same page, with the move and the release in one call, and the key's page read again after it.
TEST_F(Lifecycle, AMoveAndAReleaseInOneCallLeaveTheOldPageDraining) {
  auto s = make({.lease_ms = 1000});
  ASSERT_TRUE(s->initialize(0, 3).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(0));
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(1));
  confirm(*s, 0, {{"k", 0}});
  EXPECT_THAT(exists(*s, {"k"}), ElementsAre(true));  // a lookup leases the key
  // Moving back to page 0 in the same call is refused: it drains from the move on.
  const auto back = s->confirm_write(0, std::vector<Confirmation>{{"k", 1}, {"k", 0}}, {});
  ASSERT_TRUE(back.has_error());
  EXPECT_EQ(back.error().index, 1u);
  EXPECT_EQ(s->page_state(0, 0), PageState::mapped);
  confirm(*s, 0, {{"k", 1}}, {0});
  EXPECT_EQ(s->page_state(0, 0), PageState::draining);
  EXPECT_EQ(s->rank_stats(0)->kept_on_release, 1u);
  clock.set(1000);
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
}

// Without a lease the old page is orphaned as before (vLLM's behaviour), and a release frees it.
TEST_F(Lifecycle, WithoutALeaseAnOrphanedPageIsReleasedAtOnce) {
  auto s = make({.lru = true});
  ASSERT_TRUE(s->initialize(0, 2).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(0));
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(1));
  confirm(*s, 0, {{"k", 0}});
  EXPECT_THAT(locations(*s, 0, {"k"}), ElementsAre(Optional(0)));
  confirm(*s, 0, {{"k", 1}}, {0});
  EXPECT_EQ(s->page_state(0, 0), PageState::free);
}

// Replayed (apply) records give the same state, draining pages and refusals included; an image and
// restarted() drain them one lease period after the restart.
TEST_F(Lifecycle, ReplayAndImageKeepDrainingOrphansAndReclaimedPages) {
  const Options o{.lru = true, .lease_ms = 1000, .ttl_ms = 100};
  auto s = make(o);
  auto replica = make(o);
  struct Owned {
    Change change;
    std::vector<ConfirmedItem> confirmed;
    std::vector<AllocatedItem> allocated;
    std::vector<std::uint32_t> released;
    std::vector<std::string> names;
  };
  // The records, copied (their views are valid only during the call) and applied afterwards (the
  // sink must not call into a state: the call's scratch is the thread's).
  std::vector<std::unique_ptr<Owned>> changes;
  s->set_change_sink([&](const Change& c) {
    auto& owned = *changes.emplace_back(std::make_unique<Owned>(
        Owned{c, {c.confirmed.begin(), c.confirmed.end()}, {c.allocated.begin(), c.allocated.end()},
              {c.released.begin(), c.released.end()}, {}}));
    for (const auto& item : c.confirmed) owned.names.emplace_back(item.key);
    for (const auto& item : c.allocated) owned.names.emplace_back(item.key);
    std::size_t n = 0;
    for (auto& item : owned.confirmed) item.key = owned.names[n++];
    for (auto& item : owned.allocated) item.key = owned.names[n++];
    owned.change.confirmed = owned.confirmed;
    owned.change.allocated = owned.allocated;
    owned.change.released = owned.released;
    ASSERT_TRUE(c.deleted.empty());
  });
  ASSERT_TRUE(s->initialize(0, 4).has_value());
  EXPECT_THAT(allocate(*s, 0, {"k", "r"}), ElementsAre(0, 1));
  EXPECT_THAT(allocate(*s, 0, {"k"}), ElementsAre(2));
  confirm(*s, 0, {{"k", 0}});
  EXPECT_THAT(locations(*s, 0, {"k"}), ElementsAre(Optional(0)));
  confirm(*s, 0, {{"k", 2}});  // page 0 drains
  clock.set(100);              // r's page 1 reclaimed
  EXPECT_THAT(allocate(*s, 0, {"q"}), ElementsAre(3));
  EXPECT_THAT(allocate(*s, 0, {"t"}), ElementsAre(1));  // page 1 again, after the reclaim
  std::vector<ChangeKind> kinds;
  for (const auto& owned : changes) {
    kinds.push_back(owned->change.kind);
    const auto applied = replica->apply(owned->change);
    ASSERT_TRUE(applied.has_value()) << applied.error().message;
  }
  EXPECT_THAT(kinds, ::testing::Contains(ChangeKind::page_draining));
  EXPECT_THAT(kinds, ::testing::Contains(ChangeKind::page_reclaimed));
  EXPECT_EQ(replica->export_image(), s->export_image());
  EXPECT_EQ(testing::snapshot(*replica, {"k", "q", "t"}), testing::snapshot(*s, {"k", "q", "t"}));
  EXPECT_EQ(replica->page_state(0, 0), PageState::draining);
  for (MetadataState* state : {s.get(), replica.get()}) {
    const auto late = state->confirm_write(0, {}, std::vector<Page>{1});
    ASSERT_TRUE(late.has_error());
    EXPECT_EQ(late.error().kind, StateErrc::conflict);
  }
  // An image keeps the draining page; restarted() drains it one lease period after the restart.
  auto restored = make(o);
  ASSERT_TRUE(restored->import_image(s->export_image()).has_value());
  clock.set(500);
  restored->restarted();
  EXPECT_EQ(restored->page_state(0, 0), PageState::draining);
  EXPECT_EQ(restored->rank_stats(0)->draining, 1);
  clock.set(1499);
  EXPECT_EQ(restored->page_state(0, 0), PageState::draining);
  clock.set(1500);
  EXPECT_EQ(restored->page_state(0, 0), PageState::free);
  // A record of a page that is not orphaned, or with another id than the next, does not fit.
  Change bad;
  bad.kind = ChangeKind::page_draining;
  bad.seq = replica->seq() + 1;
  bad.page = 3;
  EXPECT_FALSE(replica->apply(bad).has_value());
}

TEST_F(Lifecycle, StatsAddUp) {
  auto s = make({.lru = true, .lease_ms = 100, .ttl_ms = 1000});
  ASSERT_TRUE(s->initialize(0, 8).has_value());
  ASSERT_TRUE(s->initialize(1, 8).has_value());
  save(*s, {0, 1}, {"a", "b", "c"});
  EXPECT_THAT(allocate(*s, 0, {"d", "e"}), ElementsAre(3, 4));
  confirm(*s, 0, {{"d", 3}});  // d incomplete
  EXPECT_THAT(allocate(*s, 0, {"d"}), ElementsAre(5));
  confirm(*s, 0, {{"d", 5}});  // d's page 3 orphaned
  EXPECT_THAT(exists(*s, {"b"}), ElementsAre(true));
  EXPECT_THAT(s->delete_keys(std::vector<std::string>{"b"}), ElementsAre(true));  // draining
  StateStats st = s->stats();
  ASSERT_EQ(st.ranks.size(), 2u);
  const RankStats& r0 = st.ranks[0].second;
  EXPECT_EQ(r0.num_pages, 8);
  EXPECT_EQ(r0.free, 2);       // 6, 7
  EXPECT_EQ(r0.allocated, 1);  // 4 (e)
  EXPECT_EQ(r0.mapped, 3);     // a 0, c 2, d 5
  EXPECT_EQ(r0.orphaned, 1);   // 3
  EXPECT_EQ(r0.draining, 1);   // 1 (b)
  EXPECT_EQ(st.keys_complete, 2u);
  EXPECT_EQ(st.keys_incomplete, 1u);
  EXPECT_EQ(st.keys_leased, 1u);
  EXPECT_EQ(st.deleted_keys, 1u);
  expect_counts_add_up(*s);
  clock.set(1000);  // b drained, e's page reclaimed, d dropped, page 3 reclaimed
  st = s->stats();
  EXPECT_EQ(st.ranks[0].second.free, 6);
  EXPECT_EQ(st.ranks[0].second.mapped, 2);
  EXPECT_EQ(st.keys_incomplete, 0u);
  EXPECT_EQ(st.reclaimed_keys, 1u);
  EXPECT_EQ(st.reclaimed_allocated_pages, 1u);
  EXPECT_EQ(st.reclaimed_orphaned_pages, 1u);
  expect_counts_add_up(*s);
}

TEST_F(Lifecycle, ACacheThatTurnsOverStaysBounded) {
  auto s = make({.lru = true, .lease_ms = 5, .ttl_ms = 50});
  ASSERT_TRUE(s->initialize(0, 16).has_value());
  ASSERT_TRUE(s->initialize(1, 16).has_value());
  for (int i = 0; i < 20000; ++i) {
    clock.set(i);
    const std::string key = "key-with-a-name-longer-than-sso-" + std::to_string(i);
    for (Rank r : {0, 1}) {
      const auto pages = allocate(*s, r, {key});
      ASSERT_EQ(pages.size(), 1u);
      if (pages[0] != kNoPage && i % 7 != 0) confirm(*s, r, {{key, pages[0]}});  // some abandoned
    }
    if (i % 3 == 0) exists(*s, {key});
    if (i % 11 == 0) s->delete_keys(std::vector<std::string>{key});
  }
  const StateStats st = s->stats();
  EXPECT_LE(s->key_count(), 16u);
  // Records are reused: at most the keys that fit, plus those draining or waiting for their TTL.
  EXPECT_LE(st.key_records, 16u + 8u);
  EXPECT_GT(st.evicted_keys, 5000u);
  expect_counts_add_up(*s);
}

}  // namespace
}  // namespace hf3fs_meta
