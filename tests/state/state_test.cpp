// MetadataState: each rule of docs/protocol.md's state model and each refusal of the deviations, with a
// check that a refused call changed nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/state_snapshot.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;
using testing::block_keys;
using testing::snapshot;

// The keys every test here uses, so that snapshots compare their records too.
const std::vector<std::string> kKeys = {"a", "b", "c", "d", "e", ""};

template <class T>
void expect_error(const StateResult<T>& result, StateErrc kind, const std::string& message, Rank rank,
                  std::optional<std::size_t> index = std::nullopt) {
  ASSERT_TRUE(result.has_error()) << "expected: " << message;
  EXPECT_EQ(result.error().kind, kind);
  EXPECT_EQ(result.error().message, message);
  EXPECT_EQ(result.error().rank, rank);
  EXPECT_EQ(result.error().index, index);
}

std::vector<Page> allocate(MetadataState& s, Rank rank, const std::vector<std::string>& keys) {
  auto result = s.allocate(rank, block_keys(keys));
  EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
  return result.has_value() ? result.value() : std::vector<Page>{};
}

ConfirmOutcome confirm(MetadataState& s, Rank rank, const std::vector<Confirmation>& confirmations,
                       const std::vector<Page>& release = {}) {
  auto result = s.confirm_write(rank, confirmations, release);
  EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
  return result.has_value() ? result.value() : ConfirmOutcome{};
}

std::vector<bool> exists(const MetadataState& s, const std::vector<std::string>& keys) {
  return s.batch_exists(keys);
}

std::vector<std::optional<Page>> locations(const MetadataState& s, Rank rank, const std::vector<std::string>& keys) {
  auto result = s.get_locations(rank, keys);
  EXPECT_TRUE(result.has_value());
  return result.has_value() ? result.value() : std::vector<std::optional<Page>>{};
}

void expect_counts_add_up(const MetadataState& s) {
  for (const auto& [rank, st] : s.all_rank_stats()) {
    EXPECT_EQ(st.free + st.allocated + st.mapped + st.orphaned, st.num_pages) << "rank " << rank;
    std::int64_t counted[4] = {0, 0, 0, 0};
    for (Page p = 0; p < st.num_pages; ++p) ++counted[static_cast<int>(*s.page_state(rank, p))];
    EXPECT_EQ(counted[0], st.free);
    EXPECT_EQ(counted[1], st.allocated);
    EXPECT_EQ(counted[2], st.mapped);
    EXPECT_EQ(counted[3], st.orphaned);
    EXPECT_EQ(static_cast<std::int64_t>(s.free_pages(rank).size()), st.free);
  }
}

// ---------------------------------------------------------------------------------------------
// initialize

TEST(StateInitialize, CreatesARankWithEveryPageFreeInOrder) {
  MetadataState s;
  auto r = s.initialize(3, 4);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r.value().created);
  EXPECT_EQ(s.rank_count(), 1u);
  EXPECT_THAT(s.free_pages(3), ElementsAre(0, 1, 2, 3));
  const RankStats st = *s.rank_stats(3);
  EXPECT_EQ(st.num_pages, 4);
  EXPECT_EQ(st.free, 4);
  EXPECT_EQ(st.allocated + st.mapped + st.orphaned, 0);
  EXPECT_EQ(s.page_state(3, 0), PageState::free);
}

TEST(StateInitialize, IsIdempotentAndKeepsAnExistingRankAsItIs) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  const auto before = snapshot(s, kKeys);
  auto again = s.initialize(0, 100);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(again.value().created);
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_EQ(s.rank_stats(0)->num_pages, 4);
}

TEST(StateInitialize, RefusesWorkerWithoutPages) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(1, 2).has_value());
  const auto before = snapshot(s, kKeys);
  expect_error(s.initialize(0, 0), StateErrc::invalid_initialization, "Invalid initialization parameters", 0);
  expect_error(s.initialize(0, -3), StateErrc::invalid_initialization, "Invalid initialization parameters", 0);
  // Refused even for a rank that exists.
  expect_error(s.initialize(1, 0), StateErrc::invalid_initialization, "Invalid initialization parameters", 1);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateInitialize, RefusesMoreThanTheMaximumEvenForAnExistingRank) {
  MetadataState s(StateOptions{16});
  ASSERT_TRUE(s.initialize(0, 16).has_value());
  const auto before = snapshot(s, kKeys);
  expect_error(s.initialize(1, 17), StateErrc::invalid_initialization,
               "Invalid initialization parameters: num_pages 17 is above the maximum 16", 1);
  expect_error(s.initialize(0, 17), StateErrc::invalid_initialization,
               "Invalid initialization parameters: num_pages 17 is above the maximum 16", 0);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateInitialize, RanksAreLimitedAndAnExistingRankIsStillAccepted) {
  MetadataState s(StateOptions{.max_ranks = 2});
  EXPECT_EQ(MetadataState().options().max_ranks, 1024);
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  const auto before = snapshot(s, kKeys);
  expect_error(s.initialize(2, 4), StateErrc::invalid_initialization,
               "Invalid initialization parameters: rank 2 does not fit: the server has reached its limit of ranks", 2);
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_FALSE(s.initialize(1, 4).value().created);  // idempotent, as before
  s.clear();
  EXPECT_TRUE(s.initialize(2, 4).value().created);
}

TEST(StateInitialize, PagesOfAllRanksTogetherAreLimited) {
  MetadataState s(StateOptions{.max_pages = 100, .max_total_pages = 150});
  EXPECT_EQ(MetadataState().options().max_total_pages, std::int64_t{1} << 28);
  ASSERT_TRUE(s.initialize(0, 100).has_value());
  const auto before = snapshot(s, kKeys);
  expect_error(s.initialize(1, 51), StateErrc::invalid_initialization,
               "Invalid initialization parameters: num_pages 51 would exceed the server's limit of pages",
               1);
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_TRUE(s.initialize(1, 50).value().created);
  s.clear();  // a clear gives the pages back
  EXPECT_TRUE(s.initialize(1, 100).value().created);
}

TEST(StateInitialize, DefaultMaximumIsTwoToThe24) {
  MetadataState s;
  EXPECT_EQ(s.options().max_pages, std::int64_t{1} << 24);
  expect_error(s.initialize(0, (std::int64_t{1} << 24) + 1), StateErrc::invalid_initialization,
               "Invalid initialization parameters: num_pages 16777217 is above the maximum 16777216", 0);
  expect_error(s.initialize(0, std::int64_t{1} << 62), StateErrc::invalid_initialization,
               "Invalid initialization parameters: num_pages 4611686018427387904 is above the maximum 16777216", 0);
  EXPECT_EQ(s.rank_count(), 0u);
}

TEST(StateInitialize, MaximumIsCappedAt32BitPages) {
  MetadataState s(StateOptions{std::int64_t{1} << 40});
  EXPECT_EQ(s.options().max_pages, 4294967295);
}

TEST(StateInitialize, SchedulerChangesNothing) {
  MetadataState s;
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{5}, std::int64_t{1} << 40}) {
    auto r = s.initialize(2, n, Role::scheduler);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r.value().created);
  }
  EXPECT_EQ(s.rank_count(), 0u);
  EXPECT_FALSE(s.rank_stats(2).has_value());
  // A scheduler never counts towards a key's tp_world_size.
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4, Role::scheduler).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  EXPECT_EQ(s.key_info("a")->tp_world_size, 1);
  EXPECT_THAT(exists(s, {"a"}), ElementsAre(true));
}

TEST(StateInitialize, AcceptsNegativeRanks) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(-7, 2).has_value());
  EXPECT_THAT(allocate(s, -7, {"a"}), ElementsAre(0));
}

// ---------------------------------------------------------------------------------------------
// allocate

TEST(StateAllocate, RankNotInitialized) {
  MetadataState s;
  expect_error(s.allocate(3, block_keys({"a"})), StateErrc::not_initialized, "Rank 3 not initialized", 3);
  expect_error(s.allocate(-2, block_keys({})), StateErrc::not_initialized, "Rank -2 not initialized", -2);
  ASSERT_TRUE(s.initialize(2, 4).has_value());
  const auto before = snapshot(s, kKeys);
  // The rank is judged before the batch, as vLLM does.
  expect_error(s.allocate(3, block_keys({"a", "a"})), StateErrc::not_initialized, "Rank 3 not initialized", 3);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateAllocate, TakesFromTheFrontAndReleasedPagesGoToTheBack) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  EXPECT_THAT(allocate(s, 0, {"a", "b"}), ElementsAre(0, 1));
  EXPECT_EQ(s.page_state(0, 0), PageState::allocated);
  EXPECT_EQ(s.rank_stats(0)->allocated, 2);
  confirm(s, 0, {}, {1, 0});
  EXPECT_THAT(s.free_pages(0), ElementsAre(2, 3, 1, 0));
  EXPECT_THAT(allocate(s, 0, {"c", "d", "e"}), ElementsAre(2, 3, 1));
  EXPECT_THAT(s.free_pages(0), ElementsAre(0));
  expect_counts_add_up(s);
}

TEST(StateAllocate, WrapsAroundThePoolManyTimes) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 3).has_value());
  for (int round = 0; round < 10; ++round) {
    const auto pages = allocate(s, 0, {"a", "b"});
    ASSERT_EQ(pages.size(), 2u);
    confirm(s, 0, {}, {pages[1], pages[0]});
  }
  EXPECT_EQ(s.free_pages(0).size(), 3u);
  expect_counts_add_up(s);
}

TEST(StateAllocate, EmptyBatchAnswersNothing) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 1).has_value());
  EXPECT_TRUE(allocate(s, 0, {}).empty());
  EXPECT_EQ(s.rank_stats(0)->free, 1);
}

TEST(StateAllocate, DuplicateKeyIsRefusedAndNothingIsTaken) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 8).has_value());
  const auto before = snapshot(s, kKeys);
  expect_error(s.allocate(0, block_keys({"a", "b", "a"})), StateErrc::invalid_argument,
               "keys[2]: duplicate key 'a' (also keys[0])", 0, 2);
  expect_error(s.allocate(0, block_keys({"x", "b", "c", "b", "c"})), StateErrc::invalid_argument,
               "keys[3]: duplicate key 'b' (also keys[1])", 0, 3);
  // Keys differing only in their prefix key are still the same key.
  std::vector<BlockKey> same{{"a", "p"}, {"a", "q"}};
  expect_error(s.allocate(0, same), StateErrc::invalid_argument, "keys[1]: duplicate key 'a' (also keys[0])", 0, 1);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateAllocate, ShortPoolTakesNothing) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 3).has_value());
  allocate(s, 0, {"a"});
  const auto before = snapshot(s, kKeys);
  EXPECT_THAT(allocate(s, 0, {"b", "c", "d"}), ElementsAre(-1, -1, -1));
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_THAT(allocate(s, 0, {"b", "c"}), ElementsAre(1, 2));
}

TEST(StateAllocate, ShortPoolStillAnswersCompleteKeysOnThisRank) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 2).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  const auto before = snapshot(s, kKeys);
  EXPECT_THAT(allocate(s, 0, {"b", "a", "c"}), ElementsAre(-1, 0, -1));
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateAllocate, CompleteKeyGetsItsPageAndTheTakenPageGoesToTheBack) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  EXPECT_THAT(s.free_pages(0), ElementsAre(1, 2, 3));
  EXPECT_THAT(allocate(s, 0, {"a", "b"}), ElementsAre(0, 2));
  // Page 1 was taken for "a", then handed back to the end of the pool.
  EXPECT_THAT(s.free_pages(0), ElementsAre(3, 1));
  EXPECT_EQ(s.page_state(0, 1), PageState::free);
  EXPECT_EQ(s.page_state(0, 2), PageState::allocated);
  expect_counts_add_up(s);
}

TEST(StateAllocate, IncompleteKeyGetsAFreshPage) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});  // tp_world_size 2, one rank: incomplete
  EXPECT_THAT(allocate(s, 0, {"a"}), ElementsAre(1));
}

TEST(StateAllocate, CompleteKeyWithoutAPageOnThisRankGetsAFreshPage) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});  // tp_world_size 1: complete
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  EXPECT_THAT(allocate(s, 1, {"a"}), ElementsAre(0));
  EXPECT_EQ(s.page_state(1, 0), PageState::allocated);
}

// ---------------------------------------------------------------------------------------------
// confirm_write

TEST(StateConfirm, RankNotInitializedAppliesNothing) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(9, std::vector<Confirmation>{{"a", 0}}, {}), StateErrc::not_initialized,
               "Rank 9 not initialized", 9);
  expect_error(s.confirm_write(9, {}, std::vector<Page>{0}), StateErrc::not_initialized, "Rank 9 not initialized", 9);
  // Judged before the items: a malformed item on a missing rank still reads "not initialized".
  expect_error(s.confirm_write(9, std::vector<Confirmation>{{"a", 99}}, std::vector<Page>{-5}),
               StateErrc::not_initialized, "Rank 9 not initialized", 9);
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_EQ(s.key_count(), 0u);
}

TEST(StateConfirm, NothingToDoSucceedsEvenWithoutTheRank) {
  MetadataState s;
  auto r = s.confirm_write(9, {}, {});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().confirmed + r.value().released + r.value().kept_mapped, 0u);
  EXPECT_EQ(s.rank_count(), 0u);
}

TEST(StateConfirm, MapsAllocatedPages) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a", "b"});
  const auto out = confirm(s, 0, {{"a", 0}, {"b", 1}});
  EXPECT_EQ(out.confirmed, 2u);
  EXPECT_EQ(s.page_state(0, 0), PageState::mapped);
  EXPECT_EQ(s.page_owner(0, 0), "a");
  EXPECT_EQ(s.page_owner(0, 1), "b");
  EXPECT_EQ(s.page_owner(0, 2), std::nullopt);
  const RankStats st = *s.rank_stats(0);
  EXPECT_EQ(st.mapped, 2);
  EXPECT_EQ(st.allocated, 0);
  EXPECT_EQ(s.key_count(), 2u);
  EXPECT_EQ(s.key_info("a"), (KeyInfo{1, {{0, 0}}, true}));
}

TEST(StateConfirm, PageOutOfRangeIsInvalidAndNothingIsApplied) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 8).has_value());
  allocate(s, 0, {"a", "b"});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 0}, {"b", 1}, {"c", 99}}, {}),
               StateErrc::invalid_argument, "confirmations[2]: page 99 is outside 0..7 on rank 0", 0, 2);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", -1}}, {}), StateErrc::invalid_argument,
               "confirmations[0]: page -1 is outside 0..7 on rank 0", 0, 0);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 8}}, {}), StateErrc::invalid_argument,
               "confirmations[0]: page 8 is outside 0..7 on rank 0", 0, 0);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", std::int64_t{1} << 32}}, {}),
               StateErrc::invalid_argument, "confirmations[0]: page 4294967296 is outside 0..7 on rank 0", 0, 0);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateConfirm, FreePageIsStale) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(4, 8).has_value());
  allocate(s, 4, {"a", "b"});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(4, std::vector<Confirmation>{{"a", 0}, {"c", 5}}, {}), StateErrc::stale,
               "page 5 of key c is not allocated on rank 4", 4, 1);
  EXPECT_EQ(snapshot(s, kKeys), before);
  // Released pages are free again: stale too.
  confirm(s, 4, {}, {1});
  const auto after_release = snapshot(s, kKeys);
  expect_error(s.confirm_write(4, std::vector<Confirmation>{{"b", 1}}, {}), StateErrc::stale,
               "page 1 of key b is not allocated on rank 4", 4, 0);
  EXPECT_EQ(snapshot(s, kKeys), after_release);
}

TEST(StateConfirm, StaleAfterClear) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  s.clear();
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {}), StateErrc::stale,
               "page 0 of key a is not allocated on rank 0", 0, 0);
}

TEST(StateConfirm, PageOfAnotherKeyIsAConflict) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a", "b"});
  confirm(s, 0, {{"a", 0}});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"b", 1}, {"b", 0}}, {}), StateErrc::conflict,
               "page 0 of key b is mapped to key a on rank 0", 0, 1);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

// A silent corruption this prevents: A allocated page 0, the server restarted, B was given page 0; A's
// stale confirm must not take it (B's data would be found under key A).
TEST(StateConfirm, PageAllocatedForAnotherKeyIsAConflict) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  EXPECT_THAT(allocate(s, 0, {"a"}), ElementsAre(0));
  s.clear();  // as a restart
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  EXPECT_THAT(allocate(s, 0, {"b", "c"}), ElementsAre(0, 1));
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {}), StateErrc::conflict,
               "page 0 of key a was allocated for another key on rank 0", 0, 0);
  // Also when the right confirmations come first in the call, and with releases: nothing applied.
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"c", 1}, {"a", 0}}, std::vector<Page>{2}),
               StateErrc::conflict, "page 0 of key a was allocated for another key on rank 0", 0, 1);
  EXPECT_EQ(snapshot(s, kKeys), before);
  EXPECT_EQ(confirm(s, 0, {{"b", 0}, {"c", 1}}).confirmed, 2u);
  EXPECT_EQ(s.page_owner(0, 0), "b");
  EXPECT_EQ(s.page_owner(0, 1), "c");
}

TEST(StateConfirm, ReleasedAndReallocatedPageRemembersOnlyItsNewKey) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 1).has_value());
  EXPECT_THAT(allocate(s, 0, {"a"}), ElementsAre(0));
  confirm(s, 0, {}, {0});
  EXPECT_THAT(allocate(s, 0, {"b"}), ElementsAre(0));
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 0}}, {}), StateErrc::conflict,
               "page 0 of key a was allocated for another key on rank 0", 0, 0);
  EXPECT_EQ(confirm(s, 0, {{"b", 0}}).confirmed, 1u);
}

TEST(StateConfirm, TwoKeysOnOnePageInOneCallIsAConflict) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a", "b", "c"});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"b", 1}, {"a", 1}}, {}), StateErrc::conflict,
               "page 1 of key a is mapped to key b on rank 0", 0, 1);
  // A new key (never seen before the call) is named as well.
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"c", 2}, {"a", 0}, {"d", 2}}, {}),
               StateErrc::conflict, "page 2 of key d is mapped to key c on rank 0", 0, 2);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateConfirm, SameKeyTwiceIsAppliedInOrderAndOrphansTheFirstPage) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 0, {"a"});  // an incomplete key gets a fresh page each time
  const auto out = confirm(s, 0, {{"a", 0}, {"a", 1}});
  EXPECT_EQ(out.confirmed, 2u);
  EXPECT_EQ(s.page_state(0, 0), PageState::orphaned);
  EXPECT_EQ(s.page_owner(0, 0), std::nullopt);
  EXPECT_EQ(s.page_owner(0, 1), "a");
  EXPECT_EQ(s.key_info("a"), (KeyInfo{1, {{0, 1}}, true}));
  const RankStats st = *s.rank_stats(0);
  EXPECT_EQ(st.orphaned, 1);
  EXPECT_EQ(st.mapped, 1);
  EXPECT_EQ(st.free, 2);
  expect_counts_add_up(s);
}

TEST(StateConfirm, KeyMovedInALaterCallOrphansItsOldPage) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  confirm(s, 0, {{"a", 1}});
  EXPECT_EQ(s.page_state(0, 0), PageState::orphaned);
  EXPECT_THAT(locations(s, 0, {"a"}), ElementsAre(Optional(1)));
  // The orphaned page never returns to the pool by itself.
  EXPECT_THAT(allocate(s, 0, {"c", "d"}), ElementsAre(2, 3));
  EXPECT_THAT(allocate(s, 0, {"e"}), ElementsAre(-1));
  expect_counts_add_up(s);
}

TEST(StateConfirm, SamePageAgainBySameKeyChangesNothing) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  const auto before = snapshot(s, kKeys);
  EXPECT_EQ(confirm(s, 0, {{"a", 0}, {"a", 0}}).confirmed, 2u);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateConfirm, OrphanedPageMayBeConfirmedByAnyKey) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}, {"a", 1}});
  ASSERT_EQ(s.page_state(0, 0), PageState::orphaned);
  confirm(s, 0, {{"b", 0}});
  EXPECT_EQ(s.page_owner(0, 0), "b");
  EXPECT_EQ(s.rank_stats(0)->orphaned, 0);
  EXPECT_EQ(s.rank_stats(0)->mapped, 2);
  expect_counts_add_up(s);
}

TEST(StateConfirm, PageLeftEarlierInTheSameCallIsNotAConflict) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  for (const char* k : {"a", "a", "c", "c"}) allocate(s, 0, {k});  // a: 0 1, c: 2 3
  confirm(s, 0, {{"a", 0}});
  // "a" leaves page 0 first, so "b" takes an orphaned page, not a's.
  confirm(s, 0, {{"a", 1}, {"b", 0}});
  EXPECT_EQ(s.page_owner(0, 0), "b");
  EXPECT_EQ(s.page_owner(0, 1), "a");
  // Within one call: "c" moves from 2 to 3... then "a" takes 2, which "c" left.
  confirm(s, 0, {{"c", 2}, {"c", 3}, {"a", 2}});
  EXPECT_EQ(s.page_owner(0, 2), "a");
  EXPECT_EQ(s.page_owner(0, 3), "c");
  EXPECT_EQ(s.page_state(0, 1), PageState::orphaned);
  expect_counts_add_up(s);
}

TEST(StateConfirm, PageTakenBackByItsKeyInTheSameCall) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}, {"a", 1}, {"a", 0}});
  EXPECT_EQ(s.page_owner(0, 0), "a");
  EXPECT_EQ(s.page_state(0, 1), PageState::orphaned);
  expect_counts_add_up(s);
}

TEST(StateConfirm, ConflictWithAKeyThatMovedBackLaterInTheCall) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  for (const char* k : {"a", "a", "b"}) allocate(s, 0, {k});  // a: 0 1, b: 2
  confirm(s, 0, {{"a", 0}});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 1}, {"a", 0}, {"b", 0}}, {}), StateErrc::conflict,
               "page 0 of key b is mapped to key a on rank 0", 0, 2);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateConfirm, ReleaseOutOfRangeIsInvalidAndNothingIsApplied) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 8).has_value());
  allocate(s, 0, {"a", "b"});
  const auto before = snapshot(s, kKeys);
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 0}}, std::vector<Page>{1, -5}),
               StateErrc::invalid_argument, "pages_to_release[1]: page -5 is outside 0..7 on rank 0", 0, 1);
  expect_error(s.confirm_write(0, {}, std::vector<Page>{99}), StateErrc::invalid_argument,
               "pages_to_release[0]: page 99 is outside 0..7 on rank 0", 0, 0);
  EXPECT_EQ(snapshot(s, kKeys), before);
}

TEST(StateConfirm, ConfirmationsAreJudgedBeforeReleases) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 8).has_value());
  expect_error(s.confirm_write(0, std::vector<Confirmation>{{"a", 3}}, std::vector<Page>{-1}), StateErrc::stale,
               "page 3 of key a is not allocated on rank 0", 0, 0);
}

TEST(StateConfirm, ReleaseReturnsAllocatedAndOrphanedPagesAndSkipsFreeOnes) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 6).has_value());
  for (const char* k : {"a", "a", "c"}) allocate(s, 0, {k});  // a: 0 1, c: 2
  confirm(s, 0, {{"a", 0}, {"a", 1}});  // 0 orphaned, 1 mapped
  const auto out = confirm(s, 0, {}, {2, 5, 0, 2});
  EXPECT_EQ(out.released, 2u);  // 2 (allocated) and 0 (orphaned); 5 free; the second 2 is free by then
  EXPECT_EQ(out.kept_mapped, 0u);
  EXPECT_THAT(s.free_pages(0), ElementsAre(3, 4, 5, 2, 0));
  expect_counts_add_up(s);
}

TEST(StateConfirm, MappedPageIsKeptAndCounted) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a", "b", "c"});
  confirm(s, 0, {{"a", 0}});
  auto out = confirm(s, 0, {}, {0, 1});
  EXPECT_EQ(out.released, 1u);
  EXPECT_EQ(out.kept_mapped, 1u);
  EXPECT_EQ(s.page_owner(0, 0), "a");
  EXPECT_THAT(s.free_pages(0), ElementsAre(3, 1));
  // Judged after this call's confirmations: "c" maps 2 before the release sees it.
  out = confirm(s, 0, {{"c", 2}}, {2, 0});
  EXPECT_EQ(out.confirmed, 1u);
  EXPECT_EQ(out.released, 0u);
  EXPECT_EQ(out.kept_mapped, 2u);
  EXPECT_EQ(s.rank_stats(0)->kept_on_release, 3u);
  EXPECT_THAT(exists(s, {"a", "c"}), ElementsAre(true, true));
  expect_counts_add_up(s);
}

TEST(StateConfirm, PageLeftByThisCallIsReleased) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  const auto out = confirm(s, 0, {{"a", 1}}, {0});
  EXPECT_EQ(out.released, 1u);
  EXPECT_EQ(s.page_state(0, 0), PageState::free);
  EXPECT_THAT(s.free_pages(0), ElementsAre(2, 3, 0));
  expect_counts_add_up(s);
}

// ---------------------------------------------------------------------------------------------
// completeness, exists, get_locations

TEST(StateKeys, TpWorldSizeIsFixedAtTheFirstConfirmation) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  allocate(s, 0, {"a"});
  allocate(s, 1, {"a"});
  confirm(s, 0, {{"a", 0}});
  EXPECT_EQ(s.key_info("a")->tp_world_size, 2);
  EXPECT_THAT(exists(s, {"a"}), ElementsAre(false));
  ASSERT_TRUE(s.initialize(2, 4).has_value());
  confirm(s, 1, {{"a", 0}});
  EXPECT_EQ(s.key_info("a"), (KeyInfo{2, {{0, 0}, {1, 0}}, true}));
  EXPECT_THAT(exists(s, {"a"}), ElementsAre(true));
  // Exact count: a third rank confirming it makes it incomplete again.
  allocate(s, 2, {"a"});
  confirm(s, 2, {{"a", 0}});
  EXPECT_THAT(exists(s, {"a"}), ElementsAre(false));
  EXPECT_THAT(locations(s, 0, {"a"}), ElementsAre(std::nullopt));
  EXPECT_FALSE(s.key_info("a")->complete);
}

TEST(StateKeys, ExistsIsTrueForCompleteKeysOnly) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a", "b"});
  confirm(s, 0, {{"a", 0}});
  EXPECT_THAT(exists(s, {"a", "b", "zz", "a"}), ElementsAre(true, false, false, true));
  EXPECT_TRUE(exists(s, {}).empty());
}

TEST(StateKeys, LocationsOfCompleteKeysOnThisRank) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  allocate(s, 0, {"a", "b"});
  allocate(s, 1, {"x", "a"});
  confirm(s, 0, {{"a", 0}, {"b", 1}});
  confirm(s, 1, {{"a", 1}});
  EXPECT_THAT(locations(s, 0, {"a", "b", "zz"}), ElementsAre(Optional(0), std::nullopt, std::nullopt));
  EXPECT_THAT(locations(s, 1, {"a"}), ElementsAre(Optional(1)));
  ASSERT_TRUE(s.initialize(2, 4).has_value());
  EXPECT_THAT(locations(s, 2, {"a"}), ElementsAre(std::nullopt));  // complete, but not on rank 2
  expect_error(s.get_locations(5, std::vector<std::string>{"a"}), StateErrc::not_initialized,
               "Rank 5 not initialized", 5);
  expect_error(s.get_locations(5, std::vector<std::string>{}), StateErrc::not_initialized, "Rank 5 not initialized",
               5);
}

// The view overloads answer as the std::string ones, for views cut from one buffer (not
// NUL-terminated, not owned by any std::string); the rank error is the same.
TEST(StateKeys, ViewOverloadsAnswerAsTheStringOnes) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  allocate(s, 0, {"a", "b"});
  allocate(s, 1, {"x", "a"});
  confirm(s, 0, {{"a", 0}, {"b", 1}});
  confirm(s, 1, {{"a", 1}});
  const std::string buffer = "abzza";
  const std::string_view all(buffer);
  const std::vector<std::string_view> views{all.substr(0, 1), all.substr(1, 1), all.substr(2, 2), all.substr(4, 1),
                                            all.substr(0, 0)};
  const std::vector<std::string> strings(views.begin(), views.end());
  EXPECT_THAT(s.batch_exists(std::span<const std::string_view>(views)), ElementsAre(true, false, false, true, false));
  EXPECT_EQ(s.batch_exists(std::span<const std::string_view>(views)), s.batch_exists(strings));
  for (const Rank rank : {0, 1}) {
    auto by_view = s.get_locations(rank, std::span<const std::string_view>(views));
    auto by_string = s.get_locations(rank, strings);
    ASSERT_TRUE(by_view.has_value());
    ASSERT_TRUE(by_string.has_value());
    EXPECT_EQ(by_view.value(), by_string.value());
  }
  EXPECT_THAT(s.get_locations(0, std::span<const std::string_view>(views)).value(),
              ElementsAre(Optional(0), std::nullopt, std::nullopt, Optional(0), std::nullopt));
  EXPECT_TRUE(s.batch_exists(std::span<const std::string_view>()).empty());
  expect_error(s.get_locations(5, std::span<const std::string_view>(views)), StateErrc::not_initialized,
               "Rank 5 not initialized", 5);
}

TEST(StateKeys, EmptyKeyIsAKeyLikeAnyOther) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 2).has_value());
  allocate(s, 0, {""});
  confirm(s, 0, {{"", 0}});
  EXPECT_THAT(exists(s, {""}), ElementsAre(true));
  EXPECT_EQ(s.page_owner(0, 0), "");
}

TEST(StateKeys, ManyLongKeysSurviveGrowth) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 20000).has_value());
  std::vector<std::string> keys;
  for (int i = 0; i < 20000; ++i) {
    // Some longer than the arena's small-string limit, so that both storage paths are used.
    keys.push_back((i % 97 == 0 ? std::string(9000, 'k') : std::string("key-")) + std::to_string(i));
  }
  for (std::size_t at = 0; at < keys.size(); at += 128) {
    std::vector<std::string> batch(keys.begin() + at, keys.begin() + std::min(at + 128, keys.size()));
    const auto pages = allocate(s, 0, batch);
    std::vector<Confirmation> confirmations;
    for (std::size_t i = 0; i < batch.size(); ++i) confirmations.push_back({batch[i], pages[i]});
    confirm(s, 0, confirmations);
  }
  EXPECT_EQ(s.key_count(), keys.size());
  const auto found = exists(s, keys);
  EXPECT_EQ(std::count(found.begin(), found.end(), true), static_cast<long>(keys.size()));
  EXPECT_EQ(s.page_owner(0, 19999), keys[19999]);
  EXPECT_EQ(s.page_owner(0, 97), keys[97]);
}

// ---------------------------------------------------------------------------------------------
// clear and introspection

TEST(StateClear, ForgetsEveryRankAndKey) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  s.clear();
  EXPECT_EQ(s.rank_count(), 0u);
  EXPECT_EQ(s.key_count(), 0u);
  EXPECT_THAT(exists(s, {"a"}), ElementsAre(false));
  EXPECT_FALSE(s.key_info("a").has_value());
  expect_error(s.allocate(0, block_keys({"a"})), StateErrc::not_initialized, "Rank 0 not initialized", 0);
  // A key confirmed again after the clear starts over.
  ASSERT_TRUE(s.initialize(0, 4).has_value());
  ASSERT_TRUE(s.initialize(1, 4).has_value());
  allocate(s, 0, {"a"});
  confirm(s, 0, {{"a", 0}});
  EXPECT_EQ(s.key_info("a")->tp_world_size, 2);
  EXPECT_EQ(s.rank_stats(0)->kept_on_release, 0u);
}

TEST(StateIntrospection, UnknownRanksPagesAndKeys) {
  MetadataState s;
  EXPECT_FALSE(s.rank_stats(0).has_value());
  EXPECT_FALSE(s.page_state(0, 0).has_value());
  EXPECT_FALSE(s.page_owner(0, 0).has_value());
  EXPECT_TRUE(s.free_pages(0).empty());
  ASSERT_TRUE(s.initialize(0, 2).has_value());
  EXPECT_FALSE(s.page_state(0, 2).has_value());
  EXPECT_FALSE(s.page_state(0, -1).has_value());
  EXPECT_FALSE(s.page_owner(0, 2).has_value());
  EXPECT_FALSE(s.key_info("a").has_value());
}

TEST(StateIntrospection, AllRankStatsAreSortedByRank) {
  MetadataState s;
  for (Rank r : {5, -1, 3, 0}) ASSERT_TRUE(s.initialize(r, 2).has_value());
  const auto all = s.all_rank_stats();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].first, -1);
  EXPECT_EQ(all[1].first, 0);
  EXPECT_EQ(all[2].first, 3);
  EXPECT_EQ(all[3].first, 5);
}

}  // namespace
}  // namespace hf3fs_meta
