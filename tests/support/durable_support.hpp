// A random workload for the durability tests.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {

// Random calls over a few ranks, pages and keys, mostly ones the state accepts; refusals included.
class Workload {
 public:
  explicit Workload(unsigned seed, std::string prefix = "k") : rng_(seed) {
    // Appended rather than prefix + to_string(i), which trips a false -Wrestrict in GCC 12.
    for (int i = 0; i < 40; ++i) keys_.push_back(std::string(prefix).append(std::to_string(i)));
  }

  void step(MetadataState& state) {
    const int op = pick(0, 99);
    const Rank r = pick(0, 9) == 0 ? pick(-1, 3) : pick(0, 2);
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
      (void)state.allocate(r, batch);
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
      (void)state.delete_keys(gone);
    } else if (op == 97) {
      state.drop_rank(r);
    } else if (pick(0, 1) == 0) {
      state.clear();
    }
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  const std::string& key() { return keys_[static_cast<std::size_t>(pick(0, static_cast<int>(keys_.size()) - 1))]; }
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
  std::vector<std::string> keys_;
};

}  // namespace hf3fs_meta::testing
