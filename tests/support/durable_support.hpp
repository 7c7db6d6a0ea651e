// A random workload for the durability tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {

// Random calls over a few ranks, pages and keys, mostly ones the state accepts; refusals included.
// With `clock` (the fake clock of a state with the cache lifecycle on), time also passes and keys are
// looked up (leases), so that evictions, reclaims and drains happen too.
class Workload {
 public:
  explicit Workload(unsigned seed, std::string prefix = "k", std::int64_t* clock = nullptr) : rng_(seed), clock_(clock) {
    // Appended rather than prefix + to_string(i), which trips a false -Wrestrict in GCC 12.
    for (int i = 0; i < 40; ++i) keys_.push_back(std::string(prefix).append(std::to_string(i)));
  }

  void step(MetadataState& state) {
    if (clock_) {
      if (pick(0, 2) == 0) *clock_ += pick(1, 12);
      if (pick(0, 4) == 0) {
        std::vector<std::string> keys;
        for (int i = pick(1, 3); i > 0; --i) keys.push_back(key());
        looked_up_ = keys;
        if (pick(0, 1) == 0) {
          (void)state.batch_exists(keys);
        } else {
          (void)state.get_locations(pick(0, 1), keys);
        }
        return;
      }
    }
    const int op = pick(0, 99);
    // With the lifecycle, two ranks, so that keys complete.
    const Rank r = clock_ ? pick(0, 1) : pick(0, 9) == 0 ? pick(-1, 3) : pick(0, 2);
    if (op < 8) {
      (void)state.initialize(r, pick(0, 20) == 0 ? 0 : pick(1, 40), pick(0, 9) == 0 ? Role::scheduler : Role::worker);
    } else if (op < 45) {
      std::vector<BlockKey> batch;
      for (int i = pick(0, 4); i > 0; --i) {
        std::string k = key();
        // Mostly distinct keys, so that most batches get past the duplicate check.
        for (int tries = 0; pick(0, 9) != 0 && tries < 8; ++tries) {
          if (std::none_of(batch.begin(), batch.end(), [&](const BlockKey& b) { return b.key == k; })) break;
          k = key();
        }
        batch.push_back(BlockKey{k, ""});
      }
      const auto pages = state.allocate(r, batch);
      if (clock_ && pages) {
        for (std::size_t i = 0; i < batch.size(); ++i) {
          if (pages.value()[i] != kNoPage) recent_.push_back(Allocation{r, batch[i].key, pages.value()[i]});
        }
        if (recent_.size() > 64) recent_.erase(recent_.begin(), recent_.begin() + 32);
      }
    } else if (op < 93 && clock_ && !recent_.empty() && pick(0, 2) != 0) {
      // Mostly what was allocated, so that keys complete (and then are looked up, leased, evicted).
      const Allocation a = recent_[static_cast<std::size_t>(pick(0, static_cast<int>(recent_.size()) - 1))];
      const std::vector<Confirmation> cs{Confirmation{a.key, a.page}};
      (void)state.confirm_write(a.rank, cs, {});
    } else if (op < 93) {
      std::vector<Confirmation> cs;
      for (int i = pick(0, 3); i > 0; --i) cs.push_back(Confirmation{key(), page(state, r)});
      std::vector<Page> released;
      for (int i = pick(0, 2); i > 0; --i) released.push_back(page(state, r));
      (void)state.confirm_write(r, cs, released);
    } else if (op < 97) {
      // POST /keys/delete: keys that exist, keys that do not, the same key twice.
      std::vector<std::string> gone;
      for (int i = pick(0, 3); i > 0; --i) gone.push_back(key());
      // With leases: mostly keys just looked up (leased, so their pages drain).
      if (clock_ && pick(0, 1) == 0) gone = looked_up_;
      (void)state.delete_keys(gone);
    } else if (op == 97) {
      state.drop_rank(r);
    } else if (pick(0, 1) == 0) {
      state.clear();
    }
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  const std::string& key() {
    const int n = clock_ ? 16 : static_cast<int>(keys_.size());  // the lifecycle needs keys that complete
    return keys_[static_cast<std::size_t>(pick(0, n - 1))];
  }
  // Mostly a page that is not free (so that confirmations go through), sometimes any page.
  Page page(const MetadataState& state, Rank r) {
    const auto stats = state.rank_stats(r);
    if (!stats) return pick(0, 9);
    if (pick(0, 9) < 7) {
      for (int tries = 0; tries < 20; ++tries) {
        const Page p = pick(0, static_cast<int>(stats->num_pages) - 1);
        const auto s = state.page_state(r, p);
        if (s && (*s == PageState::allocated || *s == PageState::orphaned || pick(0, 3) == 0) && *s != PageState::free) {
          return p;
        }
      }
    }
    return pick(0, static_cast<int>(stats->num_pages));
  }

  std::mt19937 rng_;
  std::int64_t* clock_;
  struct Allocation {
    Rank rank;
    std::string key;
    Page page;
  };
  std::vector<Allocation> recent_;
  std::vector<std::string> looked_up_;
  std::vector<std::string> keys_;
};

}  // namespace hf3fs_meta::testing
