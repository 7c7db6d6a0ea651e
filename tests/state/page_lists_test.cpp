// PageArena (src/state/page_lists.hpp), the keys' page lists: against a model of vectors through
// random pushes, removals and clears (blocks growing, freed, reused, carved from new regions), the
// edges of reserving and of a region's end, and, through MetadataState, keys on more ranks than a
// freed id keeps room for: dropped ranks, deletion, reuse of the id, eviction, the image round trip.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/page_lists.hpp"

namespace hf3fs_meta {
namespace {

using state_model::PageArena;
using state_model::PageList;
using state_model::RankPage;

std::vector<std::pair<std::uint32_t, std::uint32_t>> entries(const PageArena& arena, const PageList& l) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (const RankPage& rp : arena.view(l)) out.emplace_back(rp.slot, rp.page);
  return out;
}

TEST(PageArena, MatchesVectorsThroughPushesRemovalsAndClears) {
  std::mt19937 rng(20261202);
  PageArena arena;
  constexpr std::size_t kLists = 300;
  std::vector<PageList> lists(kLists);
  std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> model(kLists);
  std::uint32_t next_page = 0;
  for (int step = 0; step < 60000; ++step) {
    const std::size_t i = rng() % kLists;
    const unsigned op = rng() % 16;
    if (op < 11) {  // mostly pushes, so that lists grow through several capacities
      const std::uint32_t slot = rng() % 40;
      arena.push_back(lists[i], RankPage{slot, next_page});
      model[i].emplace_back(slot, next_page++);
    } else if (op < 13) {
      const std::uint32_t slot = rng() % 40;
      arena.remove_if(lists[i], [slot](const RankPage& rp) { return rp.slot == slot; });
      std::erase_if(model[i], [slot](const auto& e) { return e.first == slot; });
    } else if (op < 15) {
      const std::uint32_t keep = (op == 13) ? 8 : 1;
      arena.clear(lists[i], keep);
      model[i].clear();
      EXPECT_LE(lists[i].capacity(), keep);
    } else {
      arena.reserve(lists[i], static_cast<std::uint32_t>(rng() % 70));
    }
    ASSERT_EQ(lists[i].size(), model[i].size());
    ASSERT_GE(lists[i].capacity(), lists[i].size());
    if (step % 1000 == 0) {
      // Every list still holds its own entries: no two blocks overlap, and a freed block reused by
      // one list is no longer written through another.
      for (std::size_t j = 0; j < kLists; ++j) ASSERT_EQ(entries(arena, lists[j]), model[j]) << "list " << j;
    }
  }
  for (std::size_t j = 0; j < kLists; ++j) ASSERT_EQ(entries(arena, lists[j]), model[j]) << "list " << j;
}

TEST(PageArena, OneEntryStaysInsideTheListAndMoreGoToABlock) {
  PageArena arena;
  PageList l;
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.capacity(), 1u);
  arena.push_back(l, RankPage{3, 30});
  EXPECT_EQ(arena.entries_held(), 0u);  // no region for a one-entry list
  EXPECT_EQ(arena.view(l).data(), arena.view(static_cast<const PageList&>(l)).data());
  arena.push_back(l, RankPage{5, 50});
  EXPECT_EQ(l.capacity(), 2u);
  EXPECT_GT(arena.entries_held(), 0u);
  EXPECT_EQ(entries(arena, l), (std::vector<std::pair<std::uint32_t, std::uint32_t>>{{3, 30}, {5, 50}}));
  // Cleared keeping one entry: the block goes, the list is inline again.
  arena.clear(l, 1);
  EXPECT_EQ(l.capacity(), 1u);
  EXPECT_TRUE(l.empty());
}

TEST(PageArena, ReservedCapacityIsOneBlockAndGrowingPastItKeepsTheEntries) {
  PageArena arena;
  arena.reserve_entries(100 * 8);
  const std::size_t held = arena.entries_held();
  ASSERT_GE(held, 800u);
  std::vector<PageList> lists(100);
  for (PageList& l : lists) arena.reserve(l, 8);
  for (std::uint32_t i = 0; i < lists.size(); ++i) {
    for (std::uint32_t slot = 0; slot < 8; ++slot) arena.push_back(lists[i], RankPage{slot, i});
    EXPECT_EQ(lists[i].capacity(), 8u);
  }
  EXPECT_EQ(arena.entries_held(), held);  // carved from the reserved region, nothing allocated since
  // Past what was reserved: a larger block, the entries moved into it in order.
  arena.push_back(lists[7], RankPage{8, 7});
  EXPECT_EQ(lists[7].capacity(), 16u);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> want;
  for (std::uint32_t slot = 0; slot <= 8; ++slot) want.emplace_back(slot, 7);
  EXPECT_EQ(entries(arena, lists[7]), want);
  EXPECT_EQ(entries(arena, lists[6]).size(), 8u);
  // Its old block is reused by the next list of that capacity.
  PageList next;
  const RankPage* before = arena.view(lists[8]).data();
  arena.clear(lists[8], 1);
  arena.reserve(next, 5);
  EXPECT_EQ(arena.view(next).data(), before);
}

TEST(PageArena, WhatARegionCannotHoldGoesToTheFreeListsInsteadOfBeingLost) {
  PageArena arena;
  arena.reserve_entries(4096);
  const std::size_t held = arena.entries_held();
  ASSERT_EQ(held, 4096u);
  PageList small;
  arena.reserve(small, 4);  // 4 carved: 4092 left in the region
  PageList big;
  arena.reserve(big, 4096);  // does not fit: a new region, the 4092 left split into free blocks
  EXPECT_EQ(arena.entries_held(), held + 4096);
  // Blocks of every size up to 2048 come from the old region's rest, without another region.
  std::vector<PageList> rest(10);
  std::uint32_t cap = 2048;
  for (PageList& l : rest) {
    arena.reserve(l, cap);
    EXPECT_EQ(l.capacity(), cap);
    cap /= 2;
  }
  EXPECT_EQ(arena.entries_held(), held + 4096);
  // All of them hold their own entries.
  for (std::uint32_t i = 0; i < rest.size(); ++i) {
    for (std::uint32_t j = 0; j < rest[i].capacity(); ++j) arena.push_back(rest[i], RankPage{i, j});
  }
  for (std::uint32_t i = 0; i < rest.size(); ++i) {
    const auto got = entries(arena, rest[i]);
    ASSERT_EQ(got.size(), rest[i].capacity());
    for (std::uint32_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], std::make_pair(i, j));
  }
}

// Through the state: keys on 12 ranks, more than a freed id keeps room for (kKeptPageEntries).
void confirm_on(MetadataState& s, Rank rank, const std::string& key) {
  const std::vector<BlockKey> keys{{key, ""}};
  const auto pages = s.allocate(rank, keys);
  ASSERT_TRUE(pages.has_value());
  ASSERT_GE(pages.value().front(), 0);
  const std::vector<Confirmation> cs{{key, pages.value().front()}};
  ASSERT_TRUE(s.confirm_write(rank, cs, {}).has_value());
}

TEST(StatePageLists, KeysOnManyRanksThroughDropDeleteReuseAndTheImage) {
  constexpr Rank kRanks = 12;
  MetadataState s;
  for (Rank r = 0; r < kRanks; ++r) ASSERT_TRUE(s.initialize(r, 16).has_value());
  for (const std::string key : {"a", "b", "c"}) {
    for (Rank r = 0; r < kRanks; ++r) confirm_on(s, r, key);
  }
  ASSERT_TRUE(s.key_info("b")->complete);
  ASSERT_EQ(s.key_info("b")->pages.size(), 12u);
  // A dropped rank leaves every key one page shorter, the others in order.
  EXPECT_EQ(s.drop_rank(5).mappings, 3u);
  const auto b = s.key_info("b");
  ASSERT_EQ(b->pages.size(), 11u);
  for (const auto& [rank, page] : b->pages) {
    EXPECT_NE(rank, 5);
    EXPECT_EQ(page, 1);  // "b" was the second key on every rank
  }
  EXPECT_FALSE(b->complete);
  // Deleted, its id (and its 16-entry block, more than an id keeps) reused by a key on one rank,
  // then by one on 11 ranks: each holds exactly its own pages.
  const std::vector<std::string> gone{"b"};
  EXPECT_EQ(s.delete_keys(gone), std::vector<bool>{true});
  confirm_on(s, 0, "d");
  // The pool's front (b's page 1 went to its back).
  EXPECT_EQ(s.key_info("d")->pages, (std::vector<std::pair<Rank, Page>>{{0, 3}}));
  EXPECT_EQ(s.page_owner(1, 1), std::nullopt);
  for (Rank r = 1; r < kRanks; ++r) {
    if (r != 5) confirm_on(s, r, "d");
  }
  EXPECT_EQ(s.key_info("d")->pages.size(), 11u);
  EXPECT_EQ(s.key_info("a")->pages.size(), 11u);
  EXPECT_EQ(s.key_info("c")->pages.size(), 11u);
  // The image round trip: reserved blocks, then the pages joining them rank by rank.
  MetadataState copy;
  ASSERT_TRUE(copy.import_image(s.export_image()).has_value());
  EXPECT_EQ(copy.export_image(), s.export_image());
  for (const char* key : {"a", "c", "d"}) EXPECT_EQ(copy.key_info(key), s.key_info(key)) << key;
  // A rank joining later: a key grows past the block reserved for it on import.
  ASSERT_TRUE(copy.initialize(40, 4).has_value());
  confirm_on(copy, 40, "a");
  const auto a = copy.key_info("a");
  ASSERT_EQ(a->pages.size(), 12u);
  EXPECT_EQ(a->pages.back().first, 40);
  EXPECT_EQ(copy.page_owner(40, a->pages.back().second), "a");
}

TEST(StatePageLists, EvictionOfKeysOnSeveralRanksFreesEveryPage) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(0);
  MetadataState s(options);
  constexpr Rank kRanks = 10;
  for (Rank r = 0; r < kRanks; ++r) ASSERT_TRUE(s.initialize(r, 2).has_value());
  for (const std::string key : {"old", "new"}) {
    for (Rank r = 0; r < kRanks; ++r) confirm_on(s, r, key);
  }
  // Every rank full: a third key evicts the least recently used one from all ten ranks.
  for (Rank r = 0; r < kRanks; ++r) confirm_on(s, r, "third");
  EXPECT_FALSE(s.key_info("old").has_value());
  EXPECT_TRUE(s.key_info("new")->complete);
  EXPECT_TRUE(s.key_info("third")->complete);
  EXPECT_EQ(s.stats().evicted_keys, 1u);
  for (Rank r = 0; r < kRanks; ++r) {
    EXPECT_EQ(s.rank_stats(r)->mapped, 2);
    EXPECT_EQ(s.rank_stats(r)->free, 0);
  }
}

}  // namespace
}  // namespace hf3fs_meta
