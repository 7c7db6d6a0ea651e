// drop_rank (extension, POST /rank/{rank}/drop): the rank, its pages and its keys' mappings on it
// go; keys left with no mapping go; later keys count one rank fewer.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {
namespace {

void confirm(MetadataState& s, Rank rank, const std::string& key) {
  const std::vector<BlockKey> keys{{key, ""}};
  const auto pages = s.allocate(rank, keys);
  ASSERT_TRUE(pages.has_value());
  const std::vector<Confirmation> cs{{key, pages.value().front()}};
  ASSERT_TRUE(s.confirm_write(rank, cs, {}).has_value());
}

TEST(StateDropRank, TheRankItsMappingsAndItsOnlyKeysGo) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 8).has_value());
  confirm(s, 0, "both");
  confirm(s, 1, "both");
  confirm(s, 1, "only1");
  confirm(s, 0, "only0");
  ASSERT_EQ(s.key_count(), 3u);
  EXPECT_EQ(s.drop_rank(1), (DropOutcome{true, 8, 2, 1}));
  EXPECT_EQ(s.rank_count(), 1u);
  EXPECT_FALSE(s.rank_stats(1).has_value());
  EXPECT_EQ(s.key_count(), 2u);
  EXPECT_FALSE(s.key_info("only1").has_value());
  const auto both = s.key_info("both");
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->pages, (std::vector<std::pair<Rank, Page>>{{0, 0}}));
  EXPECT_EQ(both->tp_world_size, 2);  // fixed at its first confirmation: incomplete now
  EXPECT_FALSE(both->complete);
  // Page 0 of rank 0 stays "both"'s: nothing else on rank 0 changed.
  EXPECT_EQ(s.page_owner(0, 0), "both");
  EXPECT_EQ(s.rank_stats(0)->mapped, 2);

  // A new key counts the ranks that are left; the dropped key's name can come back.
  confirm(s, 0, "only1");
  EXPECT_EQ(s.key_info("only1")->tp_world_size, 1);
  EXPECT_TRUE(s.key_info("only1")->complete);
  // The rank can come back with another size.
  ASSERT_TRUE(s.initialize(1, 2).has_value());
  EXPECT_EQ(s.rank_stats(1)->num_pages, 2);
  EXPECT_EQ(s.drop_rank(7), DropOutcome{});

  // The image round trip keeps the ids exactly (the removed key's id was reused for the new "only1").
  MetadataState copy;
  ASSERT_TRUE(copy.import_image(s.export_image()).has_value());
  EXPECT_EQ(copy.export_image(), s.export_image());
  EXPECT_EQ(copy.key_count(), 3u);
  EXPECT_EQ(copy.key_info("only1"), s.key_info("only1"));
}


// With the cache lifecycle on, a dropped rank's pages leave the LRU lists, leases and TTL events
// that named them: later evictions, lease ends and expirations touch only the ranks that are left.
TEST(StateDropRank, LeavesNoLifecycleEventOnTheDroppedRank) {
  std::int64_t now = 0;
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(10);
  options.allocation_ttl = std::chrono::milliseconds(100);
  options.clock = [&now] { return std::chrono::milliseconds(now); };
  MetadataState s(options);
  ASSERT_TRUE(s.initialize(0, 2).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  confirm(s, 0, "both");
  confirm(s, 1, "both");
  confirm(s, 1, "leased");
  const std::vector<std::string> leased{"leased"};
  EXPECT_EQ(s.batch_exists(leased), std::vector<bool>{false});  // incomplete (2 ranks): no lease
  const std::vector<BlockKey> pending{{"pending", ""}};
  ASSERT_TRUE(s.allocate(1, pending).has_value());  // an allocated page with a TTL event on rank 1
  EXPECT_EQ(s.drop_rank(1), (DropOutcome{true, 4, 2, 1}));
  EXPECT_FALSE(s.key_info("both")->complete);
  now = 1000;  // every lease, page and key event is due
  EXPECT_EQ(s.stats().reclaimed_allocated_pages, 0u);  // the pending page went with rank 1
  EXPECT_EQ(s.key_count(), 0u);                        // "both" was reclaimed: incomplete past the TTL
  const auto stats = s.rank_stats(0);
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->free, 2);
  // Eviction on rank 0 works on what is left.
  confirm(s, 0, "a");
  confirm(s, 0, "b");
  const std::vector<BlockKey> third{{"c", ""}};
  const auto pages = s.allocate(0, third);
  ASSERT_TRUE(pages.has_value());
  EXPECT_NE(pages.value().front(), kNoPage);
  EXPECT_EQ(s.stats().evicted_keys, 1u);
}

}  // namespace
}  // namespace hf3fs_meta
