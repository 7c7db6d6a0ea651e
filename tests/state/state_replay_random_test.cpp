// Live against replayed: random calls (every operation, the cache lifecycle on and off, a fake clock
// driving eviction, reclaim and drain, across three namespaces, named ones dropped and created
// again) on one MetadataState, whose change records are replayed with
// apply() into a second one; the two export_image()s must be equal after every step. An image of the
// live state imported into a third state must export the same image again. Deterministic: fixed
// seeds, a fake clock, a bounded number of steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {
namespace {

// A change record with copies of everything its views point at (they are valid only during the
// sink's call).
struct OwnedChange {
  Change change;
  std::vector<AllocatedItem> allocated;
  std::vector<ConfirmedItem> confirmed;
  std::vector<std::uint32_t> released;
  std::vector<std::string_view> deleted;
  std::vector<std::unique_ptr<std::string>> names;  // stable addresses for the items' views

  explicit OwnedChange(const Change& c) : change(c) {
    const auto keep = [&](std::string_view name) -> std::string_view {
      return *names.emplace_back(std::make_unique<std::string>(name));
    };
    for (AllocatedItem item : c.allocated) {
      item.key = keep(item.key);
      allocated.push_back(item);
    }
    for (ConfirmedItem item : c.confirmed) {
      item.key = keep(item.key);
      confirmed.push_back(item);
    }
    released.assign(c.released.begin(), c.released.end());
    for (const std::string_view name : c.deleted) deleted.push_back(keep(name));
    change.ns_name = keep(c.ns_name);
    change.allocated = allocated;
    change.confirmed = confirmed;
    change.released = released;
    change.deleted = deleted;
  }
};

struct Config {
  const char* name;
  Eviction eviction = Eviction::none;
  std::int64_t lease_ms = 0;
  std::int64_t ttl_ms = 0;
};

constexpr std::array kConfigs = {
    Config{"off"},
    Config{"lru", Eviction::lru},
    Config{"lease", Eviction::none, 40},
    Config{"ttl", Eviction::none, 0, 60},
    Config{"lru+lease", Eviction::lru, 40},
    Config{"lease+ttl", Eviction::none, 40, 60},
    Config{"all", Eviction::lru, 40, 60},
};

constexpr int kSteps = 1500;
constexpr std::array<std::uint64_t, 3> kSeeds = {1, 20260102, 777};
constexpr Rank kRanks = 3;
constexpr int kKeys = 20;
// The default namespace and two named ones: each operation acts in one of them.
constexpr std::array<std::string_view, 3> kSpaces = {"", "m1", "m2"};

class LiveAndReplica {
 public:
  LiveAndReplica(const Config& config, std::uint64_t seed) : rng_(seed) {
    options_.eviction = config.eviction;
    options_.read_lease = std::chrono::milliseconds(config.lease_ms);
    options_.allocation_ttl = std::chrono::milliseconds(config.ttl_ms);
    options_.clock = [this] { return std::chrono::milliseconds(now_); };
    live_ = std::make_unique<MetadataState>(options_);
    replica_ = std::make_unique<MetadataState>(options_);
    // Copied, applied after the call (a sink must not call into a state).
    live_->set_change_sink([this](const Change& c) { pending_.push_back(std::make_unique<OwnedChange>(c)); });
  }

  // One random operation on the live state, its records applied to the replica.
  void step() {
    ns_ = NamespaceRef{kSpaces[static_cast<std::size_t>(pick(3))]};
    const int op = pick(100);
    if (op < 5) {
      initialize();
    } else if (op < 25) {
      allocate();
    } else if (op < 40) {
      save();
    } else if (op < 60) {
      confirm();
    } else if (op < 75) {
      lookup();
    } else if (op < 81) {
      delete_keys();
    } else if (op < 83) {
      (void)live_->drop_rank(ns_, pick(kRanks));
    } else if (op < 84) {
      live_->clear(ns_);
    } else if (op < 85) {
      drop_namespace();
    } else {
      now_ += pick(30);  // what expired is processed by the next call
      (void)live_->rank_stats(ns_, 0);
    }
    for (const auto& owned : pending_) {
      kinds_.insert(owned->change.kind);
      const StateResult<void> applied = replica_->apply(owned->change);
      ASSERT_TRUE(applied.has_value()) << "record " << owned->change.seq << ": " << applied.error().message;
    }
    pending_.clear();
  }

  MetadataState& live() { return *live_; }
  MetadataState& replica() { return *replica_; }
  const StateOptions& options() const { return options_; }
  const std::set<ChangeKind>& kinds() const { return kinds_; }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::string key() { return "key-" + std::to_string(pick(kKeys)); }
  std::vector<std::string> some_keys(int most) {
    std::vector<std::string> keys;
    for (int i = 0, n = 1 + pick(most); i < n; ++i) keys.push_back(key());
    return keys;
  }
  // Mostly one of the last pages the key was given on the rank (so that a complete key can move to
  // another), sometimes any page (orphan-making, or refused), rarely one out of range.
  Page page_for(Rank rank, const std::string& key) {
    const auto it = given_.find({std::string(ns_.name), rank, key});
    const int dice = pick(20);
    if (it != given_.end() && dice >= 2) {
      return it->second[static_cast<std::size_t>(pick(static_cast<int>(it->second.size())))];
    }
    return dice == 0 ? 13 * pick(2) - 1 : pick(12);
  }
  void remember(Rank rank, const std::string& key, Page page) {
    std::vector<Page>& pages = given_[{std::string(ns_.name), rank, key}];
    pages.push_back(page);
    if (pages.size() > 3) pages.erase(pages.begin());
  }
  std::vector<BlockKey> distinct_keys(int most) {
    std::vector<BlockKey> keys;
    for (const auto& k : some_keys(most)) {
      if (std::find_if(keys.begin(), keys.end(), [&](const BlockKey& b) { return b.key == k; }) == keys.end()) {
        keys.emplace_back(k);
      }
    }
    return keys;
  }

  void initialize() {
    const std::int64_t pages = pick(10) == 0 ? 0 : 2 + pick(10);
    (void)live_->initialize(ns_, pick(kRanks), pages, pick(10) == 0 ? Role::scheduler : Role::worker);
  }
  void allocate() {
    const Rank rank = pick(kRanks);
    std::vector<BlockKey> keys = distinct_keys(4);
    if (pick(8) == 0) keys.push_back(keys.front());  // a duplicate: refused
    const auto pages = live_->allocate(ns_, rank, keys);
    if (!pages) return;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (pages.value()[i] != kNoPage) remember(rank, keys[i].key, pages.value()[i]);
    }
  }
  // A worker's cycle on every rank: allocate, then confirm what was given (keys become complete).
  void save() {
    const std::vector<BlockKey> keys = distinct_keys(3);
    for (Rank rank = 0; rank < kRanks; ++rank) {
      const auto pages = live_->allocate(ns_, rank, keys);
      if (!pages) continue;
      std::vector<Confirmation> confirmations;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (pages.value()[i] == kNoPage) continue;
        remember(rank, keys[i].key, pages.value()[i]);
        confirmations.push_back({keys[i].key, pages.value()[i]});
      }
      (void)live_->confirm_write(ns_, rank, confirmations, {});
    }
  }
  void confirm() {
    const Rank rank = pick(kRanks);
    std::vector<Confirmation> confirmations;
    for (const auto& k : some_keys(2)) confirmations.push_back({k, page_for(rank, k)});
    if (pick(4) == 0) confirmations.clear();  // releases only
    std::vector<Page> releases;
    std::vector<ReleaseKey> keyed;
    for (int i = 0, n = pick(3); i < n; ++i) {
      const std::string k = key();
      releases.push_back(page_for(rank, k));
      if (pick(2) == 0) keyed.push_back(ReleaseKey{releases.size() - 1, k});
    }
    if (!keyed.empty() && pick(20) == 0) std::swap(keyed.front(), keyed.back());  // out of order: refused
    (void)live_->confirm_write(ns_, rank, confirmations, releases, keyed);
  }
  void lookup() {
    const auto keys = some_keys(4);
    if (pick(2) == 0) {
      (void)live_->batch_exists(ns_, keys);
    } else {
      (void)live_->get_locations(ns_, pick(kRanks), keys);
    }
  }
  void delete_keys() { (void)live_->delete_keys(ns_, some_keys(3)); }
  // A named namespace dropped (created again by a later initialize), or, rarely, everything forgotten.
  void drop_namespace() {
    if (pick(4) == 0) {
      live_->clear_all();
      given_.clear();
      return;
    }
    const std::string_view name = kSpaces[static_cast<std::size_t>(1 + pick(2))];
    (void)live_->drop_namespace(name);
    std::erase_if(given_, [&](const auto& entry) { return std::get<0>(entry.first) == name; });
  }

  std::mt19937_64 rng_;
  std::int64_t now_ = 1000;
  StateOptions options_;
  std::unique_ptr<MetadataState> live_;
  std::unique_ptr<MetadataState> replica_;
  std::vector<std::unique_ptr<OwnedChange>> pending_;
  NamespaceRef ns_;  // the namespace of this step's operation
  std::map<std::tuple<std::string, Rank, std::string>, std::vector<Page>> given_;  // the last pages given
  std::set<ChangeKind> kinds_;
};

TEST(StateReplayRandom, ReplayedRecordsGiveTheLiveImageAfterEveryStep) {
  std::set<ChangeKind> kinds;
  int steps_with_named_ranks = 0;  // images in which a named namespace has a rank
  for (const Config& config : kConfigs) {
    for (const std::uint64_t seed : kSeeds) {
      SCOPED_TRACE(std::string(config.name) + " seed " + std::to_string(seed));
      LiveAndReplica run(config, seed);
      for (int i = 0; i < kSteps; ++i) {
        ASSERT_NO_FATAL_FAILURE(run.step()) << "step " << i;
        const StateImage image = run.live().export_image();
        steps_with_named_ranks += std::any_of(image.namespaces.begin(), image.namespaces.end(),
                                              [](const NamespaceImage& n) { return !n.space.ranks.empty(); });
        ASSERT_EQ(run.replica().export_image(), image) << "step " << i;
        ASSERT_EQ(run.replica().seq(), run.live().seq()) << "step " << i;
        if (i % 50 == 0) {
          // The image itself: imported, it exports the same image.
          MetadataState restored(run.options());
          const StateResult<void> imported = restored.import_image(image);
          ASSERT_TRUE(imported.has_value()) << "step " << i << ": " << imported.error().message;
          ASSERT_EQ(restored.export_image(), image) << "step " << i;
        }
      }
      kinds.insert(run.kinds().begin(), run.kinds().end());
    }
  }
  EXPECT_GT(steps_with_named_ranks, kSteps);
  // Every kind of record was replayed at least once: the runs reached every effect.
  for (const ChangeKind kind :
       {ChangeKind::rank_created, ChangeKind::allocated, ChangeKind::confirmed, ChangeKind::cleared,
        ChangeKind::rank_dropped, ChangeKind::keys_deleted, ChangeKind::keys_removed, ChangeKind::page_reclaimed,
        ChangeKind::key_drained, ChangeKind::clock, ChangeKind::page_draining, ChangeKind::namespace_created,
        ChangeKind::namespace_dropped}) {
    EXPECT_TRUE(kinds.contains(kind)) << "kind " << static_cast<int>(kind) << " never recorded";
  }
}

}  // namespace
}  // namespace hf3fs_meta
