// Namespaces of MetadataState: isolation of every call, tp_world_size per namespace, the
// quotas and their refusals (which change nothing and record nothing), a namespace that does not
// exist answering as a fresh server and creating nothing, drop, the change records and the image.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
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

const NamespaceRef kA{"tenant-a"};
const NamespaceRef kB{"tenant.b_2"};

struct FakeClock {
  std::shared_ptr<std::chrono::milliseconds> now = std::make_shared<std::chrono::milliseconds>(0);
  void set(std::int64_t ms) { *now = std::chrono::milliseconds(ms); }
  std::function<std::chrono::milliseconds()> fn() const {
    return [n = now] { return *n; };
  }
};

// Every figure of a StateStats (which has no ==), to compare two.
std::string text(const StateStats& s) {
  std::string out;
  for (const auto& [rank, r] : s.ranks) {
    out += "rank " + std::to_string(rank) + ": " + std::to_string(r.num_pages) + " " + std::to_string(r.free) + " " +
           std::to_string(r.allocated) + " " + std::to_string(r.mapped) + " " + std::to_string(r.orphaned) + " " +
           std::to_string(r.draining) + " " + std::to_string(r.kept_on_release) + "; ";
  }
  for (const std::uint64_t n : {s.keys_complete, s.keys_incomplete, s.keys_leased, s.key_records, s.evicted_keys,
                                s.deleted_keys, s.reclaimed_keys, s.reclaimed_allocated_pages,
                                s.reclaimed_orphaned_pages}) {
    out += std::to_string(n) + " ";
  }
  return out;
}

// A record's kind, namespace and name (its views are valid only during the sink's call).
struct Record {
  ChangeKind kind;
  std::uint32_t ns;
  std::string ns_name;
  Rank rank;
  friend bool operator==(const Record&, const Record&) = default;
};

class Namespaces : public ::testing::Test {
 protected:
  std::unique_ptr<MetadataState> make(StateOptions options = {}) {
    options.clock = clock.fn();
    auto state = std::make_unique<MetadataState>(std::move(options));
    state->set_change_sink(
        [this](const Change& c) { records.push_back(Record{c.kind, c.ns, std::string(c.ns_name), c.rank}); });
    return state;
  }

  static void init(MetadataState& s, NamespaceRef ns, Rank rank, std::int64_t pages) {
    const auto result = s.initialize(ns, rank, pages);
    ASSERT_TRUE(result.has_value()) << result.error().message;
    EXPECT_TRUE(result.value().created);
  }
  static std::vector<Page> allocate(MetadataState& s, NamespaceRef ns, Rank rank,
                                    const std::vector<std::string>& keys) {
    auto result = s.allocate(ns, rank, block_keys(keys));
    EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
    return result.has_value() ? result.value() : std::vector<Page>{};
  }
  // Allocates and confirms the key on each rank: complete once every rank of the namespace has it.
  static void save(MetadataState& s, NamespaceRef ns, const std::vector<Rank>& ranks, const std::string& key) {
    for (const Rank rank : ranks) {
      const std::vector<Page> pages = allocate(s, ns, rank, {key});
      ASSERT_EQ(pages.size(), 1u);
      ASSERT_NE(pages[0], kNoPage);
      const auto confirmed = s.confirm_write(ns, rank, std::vector<Confirmation>{{key, pages[0]}}, {});
      ASSERT_TRUE(confirmed.has_value()) << confirmed.error().message;
    }
  }
  static bool exists(const MetadataState& s, NamespaceRef ns, const std::string& key) {
    return s.batch_exists(ns, std::vector<std::string>{key}).at(0);
  }
  static std::optional<Page> location(const MetadataState& s, NamespaceRef ns, Rank rank, const std::string& key) {
    const auto result = s.get_locations(ns, rank, std::vector<std::string>{key});
    EXPECT_TRUE(result.has_value()) << (result.has_error() ? result.error().message : "");
    return result.has_value() ? result.value().at(0) : std::nullopt;
  }
  static std::vector<std::string> names(const MetadataState& s) {
    std::vector<std::string> result;
    for (const NamespaceSummary& n : s.namespaces()) result.push_back(n.name);
    return result;
  }

  FakeClock clock;
  std::vector<Record> records;
};

TEST_F(Namespaces, TheSameKeyOnTheSameRankInTwoNamespacesIsTwoKeys) {
  auto s = make();
  init(*s, kA, 0, 4);
  init(*s, kB, 0, 4);
  // a's pool moves on; b's does not: independent pages.
  EXPECT_THAT(allocate(*s, kA, 0, {"other"}), ElementsAre(0));
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "k"));
  EXPECT_THAT(allocate(*s, kB, 0, {"k"}), ElementsAre(0));
  EXPECT_EQ(s->page_state(kB, 0, 0), PageState::allocated);
  EXPECT_EQ(s->page_owner(kA, 0, 1), "k");
  EXPECT_EQ(s->page_owner(kB, 0, 1), std::nullopt);

  EXPECT_TRUE(exists(*s, kA, "k"));
  EXPECT_FALSE(exists(*s, kB, "k"));
  EXPECT_FALSE(exists(*s, NamespaceRef{}, "k"));
  EXPECT_THAT(location(*s, kA, 0, "k"), Optional(Page{1}));
  EXPECT_EQ(location(*s, kB, 0, "k"), std::nullopt);
  EXPECT_FALSE(s->get_locations(NamespaceRef{}, 0, std::vector<std::string>{"k"}).has_value());  // no rank 0 there

  // A delete in b finds nothing; in a it removes a's key only.
  EXPECT_THAT(s->delete_keys(kB, std::vector<std::string>{"k"}), ElementsAre(false));
  EXPECT_TRUE(exists(*s, kA, "k"));
  ASSERT_NO_FATAL_FAILURE(save(*s, kB, {0}, "k"));
  EXPECT_THAT(s->delete_keys(kA, std::vector<std::string>{"k"}), ElementsAre(true));
  EXPECT_FALSE(exists(*s, kA, "k"));
  EXPECT_TRUE(exists(*s, kB, "k"));

  // clear and drop_rank act in their namespace only.
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "k"));
  const StateStats b_before = s->stats(kB);
  s->clear(kA);
  EXPECT_EQ(s->ranks_initialized(kA), 0u);
  EXPECT_FALSE(exists(*s, kA, "k"));
  EXPECT_TRUE(exists(*s, kB, "k"));
  EXPECT_EQ(text(s->stats(kB)), text(b_before));
  init(*s, kA, 0, 4);
  EXPECT_TRUE(s->drop_rank(kA, 0).dropped);
  EXPECT_EQ(s->rank_stats(kA, 0), std::nullopt);
  EXPECT_TRUE(s->rank_stats(kB, 0).has_value());
  EXPECT_TRUE(exists(*s, kB, "k"));
  EXPECT_THAT(s->key_info(kB, "k"), Optional(KeyInfo{1, {{0, 1}}, true}));
}

TEST_F(Namespaces, TheDefaultNamespaceIsTheOneWithoutANameAndIsCalledDefault) {
  auto s = make();
  init(*s, NamespaceRef{kDefaultNamespace}, 3, 2);
  EXPECT_TRUE(s->rank_stats(3).has_value());
  ASSERT_NO_FATAL_FAILURE(save(*s, NamespaceRef{}, {3}, "k"));
  EXPECT_TRUE(s->batch_exists(std::vector<std::string>{"k"}).at(0));
  EXPECT_TRUE(exists(*s, NamespaceRef{"default"}, "k"));
  EXPECT_EQ(names(*s), std::vector<std::string>{"default"});
  EXPECT_EQ(s->namespace_name(0), "default");
  // Nothing of it is a named namespace's record: every record carries namespace 0.
  for (const Record& r : records) EXPECT_EQ(r.ns, 0u);
}

TEST_F(Namespaces, EvictionLeasesAndReclaimActInTheirNamespaceOnly) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(100);
  auto s = make(options);
  for (const NamespaceRef ns : {kA, kB}) {
    init(*s, ns, 0, 2);
    ASSERT_NO_FATAL_FAILURE(save(*s, ns, {0}, "old"));
    ASSERT_NO_FATAL_FAILURE(save(*s, ns, {0}, "new"));
  }
  // a: the pool is empty; a third key evicts a's least recently used key, once its lease (from the
  // save) has ended. b's keys stay.
  clock.set(200);
  EXPECT_THAT(allocate(*s, kA, 0, {"third"}), ElementsAre(0));
  EXPECT_FALSE(exists(*s, kA, "old"));
  EXPECT_TRUE(exists(*s, kA, "new"));
  EXPECT_TRUE(exists(*s, kB, "old"));
  EXPECT_EQ(s->stats(kA).evicted_keys, 1u);
  EXPECT_EQ(s->stats(kB).evicted_keys, 0u);

  // A lookup in b leases b's key; deleted in both, only b's page drains.
  clock.set(300);
  EXPECT_TRUE(exists(*s, kB, "new"));
  EXPECT_EQ(s->stats(kB).keys_leased, 1u);
  EXPECT_EQ(s->stats(kA).keys_leased, 0u);
  const Page a_page = s->key_info(kA, "new")->pages.at(0).second;
  const Page b_page = s->key_info(kB, "new")->pages.at(0).second;
  EXPECT_THAT(s->delete_keys(kA, std::vector<std::string>{"new"}), ElementsAre(true));
  EXPECT_THAT(s->delete_keys(kB, std::vector<std::string>{"new"}), ElementsAre(true));
  EXPECT_EQ(s->page_state(kA, 0, a_page), PageState::free);
  EXPECT_EQ(s->page_state(kB, 0, b_page), PageState::draining);
  clock.set(401);
  EXPECT_EQ(s->page_state(kB, 0, b_page), PageState::free);
}

TEST_F(Namespaces, TheAllocationTtlReclaimsInTheNamespaceCalled) {
  StateOptions options;
  options.allocation_ttl = std::chrono::milliseconds(100);
  auto s = make(options);
  init(*s, kA, 0, 4);
  init(*s, kB, 0, 4);
  EXPECT_THAT(allocate(*s, kA, 0, {"k"}), ElementsAre(0));
  EXPECT_THAT(allocate(*s, kB, 0, {"k"}), ElementsAre(0));
  clock.set(50);
  EXPECT_THAT(allocate(*s, kB, 0, {"j"}), ElementsAre(1));
  clock.set(120);
  EXPECT_EQ(s->page_state(kA, 0, 0), PageState::free);
  EXPECT_EQ(s->stats(kA).reclaimed_allocated_pages, 1u);
  EXPECT_EQ(s->page_state(kB, 0, 0), PageState::free);
  EXPECT_EQ(s->page_state(kB, 0, 1), PageState::allocated);  // allocated at 50: reclaimed at 150
  EXPECT_EQ(s->stats(kB).reclaimed_allocated_pages, 1u);
  clock.set(150);
  EXPECT_EQ(s->page_state(kB, 0, 1), PageState::free);
  EXPECT_EQ(s->stats(kA).reclaimed_allocated_pages, 1u);
  EXPECT_EQ(s->stats(kB).reclaimed_allocated_pages, 2u);
}

// A name no header could carry (the server refuses it first) is kept out of the state: nothing made.
TEST_F(Namespaces, ANameThatNoHeaderCouldCarryIsRefused) {
  auto s = make();
  for (const std::string& bad : std::vector<std::string>{"a b", "a/b", std::string(65, 'n'), "caf\xC3\xA9"}) {
    const auto refused = s->initialize(NamespaceRef{bad}, 0, 4);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_EQ(refused.error().message, "Invalid initialization parameters: a namespace name is 1 to 64 characters of "
                                       "A-Z, a-z, 0-9, '.', '_' and '-'");
  }
  EXPECT_EQ(s->namespaces().size(), 1u);
  EXPECT_EQ(s->seq(), 0u);
}

TEST_F(Namespaces, ATp2AndATp4InstanceBothCompleteTheirKeys) {
  auto s = make();
  const NamespaceRef tp2{"tp2"};
  const NamespaceRef tp4{"tp4"};
  for (Rank r = 0; r < 2; ++r) init(*s, tp2, r, 8);
  for (Rank r = 0; r < 4; ++r) init(*s, tp4, r, 8);
  EXPECT_EQ(s->ranks_initialized(tp2), 2u);
  EXPECT_EQ(s->ranks_initialized(tp4), 4u);
  ASSERT_NO_FATAL_FAILURE(save(*s, tp2, {0, 1}, "block"));
  ASSERT_NO_FATAL_FAILURE(save(*s, tp4, {0, 1, 2, 3}, "block"));
  EXPECT_TRUE(exists(*s, tp2, "block"));
  EXPECT_TRUE(exists(*s, tp4, "block"));
  EXPECT_THAT(s->key_info(tp2, "block"), Optional(KeyInfo{2, {{0, 0}, {1, 0}}, true}));
  EXPECT_EQ(s->key_info(tp4, "block")->tp_world_size, 4);

  // Without namespaces (both in the default one) the TP=2 instance's key never completes: the why.
  for (Rank r = 0; r < 4; ++r) init(*s, NamespaceRef{}, r, 8);
  ASSERT_NO_FATAL_FAILURE(save(*s, NamespaceRef{}, {0, 1}, "block"));
  EXPECT_FALSE(exists(*s, NamespaceRef{}, "block"));
  const std::vector<std::string_view> keys = {"block", "unknown"};
  const auto status = s->key_status(NamespaceRef{}, keys);
  ASSERT_EQ(status.size(), 2u);
  EXPECT_THAT(status[0], Optional(KeyInfo{4, {{0, 0}, {1, 0}}, false}));
  EXPECT_EQ(status[1], std::nullopt);
  std::size_t ranks = 0;
  EXPECT_THAT(s->key_status(tp2, keys, &ranks)[0], Optional(KeyInfo{2, {{0, 0}, {1, 0}}, true}));
  EXPECT_EQ(ranks, 2u);
}

TEST_F(Namespaces, KeyStatusTakesNoLeaseAndMovesNoRecency) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(100);
  auto s = make(options);
  init(*s, kA, 0, 2);
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "old"));
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "new"));
  clock.set(200);  // the saves' leases are over
  const std::vector<std::string_view> keys = {"old"};
  EXPECT_TRUE(s->key_status(kA, keys)[0]->complete);
  EXPECT_EQ(s->stats(kA).keys_leased, 0u);
  EXPECT_THAT(allocate(*s, kA, 0, {"third"}), ElementsAre(0));  // "old" is still the least recently used
  EXPECT_FALSE(exists(*s, kA, "old"));
}

TEST_F(Namespaces, ANamespaceThatDoesNotExistAnswersAsAFreshServerAndIsNotCreated) {
  auto s = make();
  init(*s, kA, 0, 4);
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "k"));
  records.clear();
  const StateImage before = s->export_image();
  const NamespaceRef missing{"missing"};
  const std::vector<std::string> keys = {"k"};
  const std::vector<std::string_view> views = {"k"};
  EXPECT_THAT(s->batch_exists(missing, keys), ElementsAre(false));
  EXPECT_THAT(s->batch_exists(missing, std::span<const std::string_view>(views)), ElementsAre(false));
  const auto locations = s->get_locations(missing, 0, keys);
  ASSERT_FALSE(locations.has_value());
  EXPECT_EQ(locations.error().kind, StateErrc::not_initialized);
  EXPECT_EQ(locations.error().message, "Rank 0 not initialized");
  EXPECT_FALSE(s->get_locations(missing, 0, std::span<const std::string_view>(views)).has_value());
  const auto allocated = s->allocate(missing, 0, block_keys(keys));
  ASSERT_FALSE(allocated.has_value());
  EXPECT_EQ(allocated.error().message, "Rank 0 not initialized");
  const auto confirmed = s->confirm_write(missing, 0, std::vector<Confirmation>{{"k", 0}}, {});
  ASSERT_FALSE(confirmed.has_value());
  EXPECT_EQ(confirmed.error().message, "Rank 0 not initialized");
  EXPECT_THAT(s->delete_keys(missing, keys), ElementsAre(false));
  EXPECT_THAT(s->delete_keys(missing, std::span<const std::string_view>(views)), ElementsAre(false));
  s->clear(missing);
  EXPECT_FALSE(s->drop_rank(missing, 0).dropped);
  EXPECT_EQ(text(s->stats(missing)), text(StateStats{}));
  EXPECT_TRUE(s->all_rank_stats(missing).empty());
  EXPECT_EQ(s->rank_stats(missing, 0), std::nullopt);
  EXPECT_EQ(s->page_state(missing, 0, 0), std::nullopt);
  EXPECT_EQ(s->page_owner(missing, 0, 1), std::nullopt);
  EXPECT_TRUE(s->free_pages(missing, 0).empty());
  EXPECT_EQ(s->key_info(missing, "k"), std::nullopt);
  EXPECT_THAT(s->key_status(missing, views), ElementsAre(std::nullopt));
  EXPECT_EQ(s->ranks_initialized(missing), 0u);
  std::size_t ranks = 7;
  EXPECT_THAT(s->key_status(missing, views, &ranks), ElementsAre(std::nullopt));
  EXPECT_EQ(ranks, 0u);
  EXPECT_FALSE(s->holds(missing, 0, std::vector<Page>{1}, block_keys(keys)));
  EXPECT_TRUE(s->holds(missing, 0, std::vector<Page>{kNoPage}, block_keys(keys)));
  // A scheduler's initialize creates nothing either; a refused worker's neither.
  EXPECT_FALSE(s->initialize(missing, 0, 4, Role::scheduler).value().created);
  EXPECT_FALSE(s->initialize(missing, 0, 0).has_value());
  EXPECT_FALSE(s->initialize(missing, 0, std::int64_t{1} << 40).has_value());
  EXPECT_EQ(names(*s), (std::vector<std::string>{"default", "tenant-a"}));
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(s->export_image(), before);
}

TEST_F(Namespaces, MaxNamespacesCountsTheDefaultAndARefusalChangesNothing) {
  StateOptions options;
  options.max_namespaces = 3;
  auto s = make(options);
  init(*s, kA, 0, 4);
  init(*s, kB, 0, 4);
  records.clear();
  const StateImage before = s->export_image();
  const auto refused = s->initialize(NamespaceRef{"c"}, 0, 4);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().kind, StateErrc::invalid_initialization);
  EXPECT_EQ(refused.error().message,
            "Invalid initialization parameters: namespace c does not fit: the server has reached its limit of namespaces");
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(s->export_image(), before);
  EXPECT_EQ(names(*s), (std::vector<std::string>{"default", "tenant-a", "tenant.b_2"}));
  // Existing namespaces still take ranks; a dropped one makes room.
  init(*s, kA, 1, 4);
  init(*s, NamespaceRef{}, 0, 4);
  ASSERT_TRUE(s->drop_namespace(kB.name).value().dropped);
  init(*s, NamespaceRef{"c"}, 0, 4);
}

TEST_F(Namespaces, NamespaceMaxTotalPagesBoundsEachNamespaceAndARefusalChangesNothing) {
  StateOptions options;
  options.namespace_max_total_pages = 150;
  auto s = make(options);
  const NamespaceRef m1{"m1"};
  init(*s, m1, 0, 100);
  init(*s, NamespaceRef{"m2"}, 0, 100);  // a quota per namespace, not for all of them
  records.clear();
  const StateImage before = s->export_image();
  const auto refused = s->initialize(m1, 1, 60);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().message,
            "Invalid initialization parameters: num_pages 60 would bring the pages of namespace m1 to 160, above "
            "its maximum 150");
  // A new namespace is checked as an empty one, and is not created when refused.
  const auto too_big = s->initialize(NamespaceRef{"m3"}, 0, 151);
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.error().message,
            "Invalid initialization parameters: num_pages 151 would bring the pages of namespace m3 to 151, above "
            "its maximum 150");
  const auto default_refused = s->initialize(NamespaceRef{}, 0, 151);
  ASSERT_FALSE(default_refused.has_value());
  EXPECT_THAT(default_refused.error().message, ::testing::HasSubstr("of namespace default to 151"));
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(s->export_image(), before);
  init(*s, m1, 1, 50);
}

TEST_F(Namespaces, MaxRanksAndMaxTotalPagesCountEveryNamespaceWithoutTheirFigures) {
  StateOptions options;
  options.max_ranks = 3;
  options.max_total_pages = 200;
  auto s = make(options);
  init(*s, kA, 0, 150);
  records.clear();
  const StateImage before = s->export_image();
  const auto pages = s->initialize(kB, 0, 60);
  ASSERT_FALSE(pages.has_value());
  EXPECT_EQ(pages.error().message,
            "Invalid initialization parameters: num_pages 60 would exceed the server's limit of pages");
  EXPECT_EQ(names(*s), (std::vector<std::string>{"default", "tenant-a"}));
  init(*s, kB, 0, 20);
  init(*s, NamespaceRef{}, 0, 20);
  records.clear();
  const StateImage full = s->export_image();
  const auto ranks = s->initialize(NamespaceRef{"c"}, 0, 1);
  ASSERT_FALSE(ranks.has_value());
  EXPECT_EQ(ranks.error().message, "Invalid initialization parameters: rank 0 does not fit: the server has reached its limit of ranks");
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(s->export_image(), full);
  EXPECT_NE(full, before);
}

// One namespace cannot take every rank the server has: with namespace_max_ranks, another's first
// initialize still finds room, and the refusal names only the caller's own figures.
TEST_F(Namespaces, NamespaceMaxRanksKeepsRoomForTheOthersAndNamesOnlyTheCallersFigures) {
  StateOptions options;
  options.max_ranks = 4;
  options.namespace_max_ranks = 2;
  auto s = make(options);
  init(*s, kA, 0, 10);
  init(*s, kA, 1, 10);
  records.clear();
  const StateImage before = s->export_image();
  const auto third = s->initialize(kA, 2, 10);
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().kind, StateErrc::invalid_initialization);
  EXPECT_EQ(third.error().message,
            "Invalid initialization parameters: rank 2 would exceed the maximum of 2 ranks of namespace tenant-a");
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(s->export_image(), before);
  // An existing rank is still answered, and the other namespace still has room.
  EXPECT_FALSE(s->initialize(kA, 1, 10).value().created);
  init(*s, kB, 0, 10);
  init(*s, kB, 1, 10);
  // The server-wide limit names no figure of anybody's.
  const auto over = s->initialize(NamespaceRef{}, 0, 10);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().message,
            "Invalid initialization parameters: rank 0 does not fit: the server has reached its limit of ranks");
}

TEST_F(Namespaces, DropRemovesANamedNamespaceAndRefusesTheDefault) {
  auto s = make();
  init(*s, kA, 0, 8);
  init(*s, kA, 1, 8);
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0, 1}, "k1"));
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0, 1}, "k2"));
  init(*s, kB, 0, 4);
  ASSERT_NO_FATAL_FAILURE(save(*s, kB, {0}, "k1"));
  records.clear();

  const auto refused = s->drop_namespace("default");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().kind, StateErrc::invalid_argument);
  EXPECT_EQ(refused.error().message, "the default namespace cannot be dropped: POST /clear in it empties it");
  EXPECT_FALSE(s->drop_namespace("").has_value());
  EXPECT_EQ(s->drop_namespace("missing").value(), NamespaceDropOutcome{});
  EXPECT_TRUE(records.empty());

  EXPECT_EQ(s->drop_namespace(kA.name).value(), (NamespaceDropOutcome{true, 2, 16, 2}));
  EXPECT_THAT(records, ElementsAre(Record{ChangeKind::namespace_dropped, 1, "", 0}));
  EXPECT_EQ(names(*s), (std::vector<std::string>{"default", "tenant.b_2"}));
  EXPECT_EQ(s->namespace_name(1), std::nullopt);
  EXPECT_FALSE(exists(*s, kA, "k1"));
  EXPECT_TRUE(exists(*s, kB, "k1"));
  EXPECT_EQ(s->rank_count(), 1u);
  EXPECT_EQ(s->key_count(), 1u);

  // Created again: empty, under a new id (ids are never reused).
  records.clear();
  init(*s, kA, 0, 8);
  EXPECT_THAT(records, ElementsAre(Record{ChangeKind::namespace_created, 3, "tenant-a", 0},
                                   Record{ChangeKind::rank_created, 3, "", 0}));
  EXPECT_EQ(s->namespace_name(3), "tenant-a");
  EXPECT_FALSE(exists(*s, kA, "k1"));
}

TEST_F(Namespaces, ClearAllDropsTheNamedNamespacesAndClearsTheDefault) {
  auto s = make();
  init(*s, kA, 0, 4);
  init(*s, kB, 0, 4);
  init(*s, NamespaceRef{}, 0, 4);
  records.clear();
  s->clear_all();
  EXPECT_THAT(records, ElementsAre(Record{ChangeKind::namespace_dropped, 1, "", 0},
                                   Record{ChangeKind::namespace_dropped, 2, "", 0}, Record{ChangeKind::cleared, 0, "", 0}));
  EXPECT_EQ(names(*s), std::vector<std::string>{"default"});
  EXPECT_EQ(s->rank_count(), 0u);
}

TEST_F(Namespaces, IntrospectionOfAllNamespacesIsSortedByName) {
  auto s = make();
  init(*s, NamespaceRef{"zeta"}, 1, 4);
  init(*s, NamespaceRef{"zeta"}, 0, 2);
  init(*s, NamespaceRef{"alpha"}, 0, 8);
  ASSERT_NO_FATAL_FAILURE(save(*s, NamespaceRef{"alpha"}, {0}, "k"));
  const std::vector<NamespaceSummary> all = s->namespaces();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], (NamespaceSummary{"alpha", {0}, 8, 1}));
  EXPECT_EQ(all[1], (NamespaceSummary{"default", {}, 0, 0}));
  EXPECT_EQ(all[2], (NamespaceSummary{"zeta", {0, 1}, 6, 0}));
  const auto stats = s->all_stats();
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].first, "alpha");
  EXPECT_EQ(text(stats[0].second), text(s->stats(NamespaceRef{"alpha"})));
  EXPECT_EQ(stats[0].second.keys_complete, 1u);
  EXPECT_EQ(stats[2].first, "zeta");
  EXPECT_EQ(stats[2].second.ranks.size(), 2u);
  EXPECT_EQ(s->rank_count(), 3u);
  EXPECT_EQ(s->key_count(), 1u);
}

// The records of calls in several namespaces, replayed into a fresh state, give the same image; and
// the image (with its namespaces) imported gives itself back.
TEST_F(Namespaces, RecordsReplayAndTheImageRoundTripsWithNamespaces) {
  auto s = make();
  MetadataState replica;
  std::vector<std::string> failures;
  s->set_change_sink([&](const Change& c) {
    // Applied at once: apply() takes the replica's lock, not the live state's.
    const auto applied = replica.apply(c);
    if (!applied) failures.push_back(applied.error().message);
  });
  init(*s, kA, 0, 4);
  init(*s, kB, 0, 4);
  init(*s, NamespaceRef{}, 5, 4);
  ASSERT_NO_FATAL_FAILURE(save(*s, kA, {0}, "k"));
  ASSERT_NO_FATAL_FAILURE(save(*s, kB, {0}, "k"));
  ASSERT_NO_FATAL_FAILURE(save(*s, NamespaceRef{}, {5}, "k"));
  ASSERT_TRUE(s->drop_namespace(kA.name).has_value());
  init(*s, NamespaceRef{"c"}, 0, 2);
  s->clear(kB);
  init(*s, kB, 1, 3);
  EXPECT_TRUE(failures.empty()) << failures.front();
  const StateImage image = s->export_image();
  EXPECT_EQ(replica.export_image(), image);
  EXPECT_EQ(image.next_namespace_id, 4u);
  ASSERT_EQ(image.namespaces.size(), 2u);
  EXPECT_EQ(image.namespaces[0].id, 2u);
  EXPECT_EQ(image.namespaces[0].name, "tenant.b_2");
  EXPECT_EQ(image.namespaces[1].name, "c");
  EXPECT_EQ(image.ranks.size(), 1u);  // the default's

  // Imported into a state that has namespaces of its own: they are replaced.
  MetadataState restored;
  ASSERT_TRUE(restored.initialize(NamespaceRef{"gone"}, 0, 4).has_value());
  ASSERT_TRUE(restored.import_image(image).has_value());
  EXPECT_EQ(restored.export_image(), image);
  EXPECT_EQ(restored.namespaces(), s->namespaces());
  EXPECT_TRUE(restored.batch_exists(NamespaceRef{}, std::vector<std::string>{"k"}).at(0));
  EXPECT_FALSE(restored.batch_exists(NamespaceRef{"gone"}, std::vector<std::string>{"k"}).at(0));
  // The next namespace created gets the next id, and recorded, replays after the image.
  std::vector<std::uint32_t> ids;
  restored.set_change_sink([&](const Change& c) { ids.push_back(c.ns); });
  ASSERT_TRUE(restored.initialize(NamespaceRef{"d"}, 0, 2).has_value());
  EXPECT_THAT(ids, ElementsAre(4u, 4u));
}

TEST_F(Namespaces, ARecordThatDoesNotFitItsNamespaceIsRefused) {
  MetadataState s;
  Change created;
  created.kind = ChangeKind::namespace_created;
  created.seq = 1;
  created.ns = 2;
  created.ns_name = "a";
  auto refused = s.apply(created);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().message, "change 1 does not fit the state: namespace id 2 is not the next one (1)");
  created.ns = 1;
  created.ns_name = "default";
  EXPECT_EQ(s.apply(created).error().message, "change 1 does not fit the state: namespace default exists");
  created.ns_name = "a";
  ASSERT_TRUE(s.apply(created).has_value());

  Change rank;
  rank.kind = ChangeKind::rank_created;
  rank.seq = 2;
  rank.ns = 7;
  rank.num_pages = 4;
  EXPECT_EQ(s.apply(rank).error().message,
            "change 2 does not fit the state: it names namespace 7, which does not exist");
  Change dropped;
  dropped.kind = ChangeKind::namespace_dropped;
  dropped.seq = 2;
  dropped.ns = 0;
  EXPECT_EQ(s.apply(dropped).error().message, "change 2 does not fit the state: the default namespace cannot be dropped");
  dropped.ns = 1;
  ASSERT_TRUE(s.apply(dropped).has_value());
  EXPECT_EQ(s.namespaces().size(), 1u);
  EXPECT_EQ(s.seq(), 2u);

  // --max-namespaces holds for a replayed creation.
  StateOptions options;
  options.max_namespaces = 1;
  MetadataState small(options);
  created.ns = 1;
  EXPECT_EQ(small.apply(created).error().message,
            "change 1 does not fit the state: namespace a does not fit: the server has reached its limit of namespaces");
}

TEST_F(Namespaces, AnImageWithBadNamespacesIsRefusedAndChangesNothing) {
  auto s = make();
  init(*s, kA, 0, 4);
  const StateImage good = s->export_image();
  const auto refused_with = [&](StateImage image) {
    const StateImage before = s->export_image();
    const auto imported = s->import_image(std::move(image));
    EXPECT_EQ(s->export_image(), before);
    return imported.has_value() ? std::string("imported") : imported.error().message;
  };
  StateImage twice = good;
  twice.namespaces.push_back(NamespaceImage{2, "tenant-a", {}});
  twice.next_namespace_id = 3;
  EXPECT_EQ(refused_with(twice), "inconsistent image: namespace tenant-a (id 2)");
  StateImage id_beyond = good;
  id_beyond.next_namespace_id = 1;
  EXPECT_EQ(refused_with(id_beyond), "inconsistent image: namespace id 1");
  StateImage named_default = good;
  named_default.namespaces[0].name = "default";
  EXPECT_EQ(refused_with(named_default), "inconsistent image: namespace default (id 1)");
  StateImage bad_space = good;
  bad_space.namespaces[0].space.free_ids.push_back(9);
  EXPECT_EQ(refused_with(bad_space), "namespace tenant-a: inconsistent image: free key id 9");

  StateOptions options;
  options.max_namespaces = 1;
  MetadataState small(options);
  const auto beyond = small.import_image(good);
  ASSERT_FALSE(beyond.has_value());
  EXPECT_EQ(beyond.error().message, "the image is beyond this state's limits: 2 namespaces, above the maximum 1");
  options.max_namespaces = 2;
  options.namespace_max_total_pages = 3;
  MetadataState quota(options);
  const auto over_quota = quota.import_image(good);
  ASSERT_FALSE(over_quota.has_value());
  EXPECT_THAT(over_quota.error().message, ::testing::HasSubstr("of namespace tenant-a to 4, above its maximum 3"));
}

}  // namespace
}  // namespace hf3fs_meta
