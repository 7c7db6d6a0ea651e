// Everything a test can observe of a MetadataState, to assert that a refused call changed nothing.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::testing {

struct PageView {
  PageState state = PageState::free;
  std::optional<std::string> owner;
  friend bool operator==(const PageView&, const PageView&) = default;
};

struct RankView {
  Rank rank = 0;
  RankStats stats;
  std::vector<Page> pool;
  std::vector<PageView> pages;
  friend bool operator==(const RankView& a, const RankView& b) {
    return a.rank == b.rank && a.stats.num_pages == b.stats.num_pages && a.stats.free == b.stats.free &&
           a.stats.allocated == b.stats.allocated && a.stats.mapped == b.stats.mapped &&
           a.stats.orphaned == b.stats.orphaned && a.stats.kept_on_release == b.stats.kept_on_release &&
           a.pool == b.pool && a.pages == b.pages;
  }
};

struct Snapshot {
  std::vector<RankView> ranks;
  std::vector<std::pair<std::string, std::optional<KeyInfo>>> keys;
  std::size_t key_count = 0;
  std::size_t rank_count = 0;
  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

// `keys`: the keys the test has used, whose records are compared too. The ranks, pages and keys of
// the namespace `ns`; the counts are of every namespace.
inline Snapshot snapshot(const MetadataState& state, const std::vector<std::string>& keys = {}, NamespaceRef ns = {}) {
  Snapshot s;
  for (const auto& [rank, stats] : state.all_rank_stats(ns)) {
    RankView view{rank, stats, state.free_pages(ns, rank), {}};
    for (Page p = 0; p < stats.num_pages; ++p) {
      view.pages.push_back(PageView{*state.page_state(ns, rank, p), state.page_owner(ns, rank, p)});
    }
    s.ranks.push_back(std::move(view));
  }
  for (const auto& key : keys) s.keys.emplace_back(key, state.key_info(ns, key));
  s.key_count = state.key_count();
  s.rank_count = state.rank_count();
  return s;
}

// The same with the counts of the namespace `ns` alone (zero for one that does not exist).
inline Snapshot namespace_snapshot(const MetadataState& state, const std::vector<std::string>& keys, NamespaceRef ns) {
  Snapshot s = snapshot(state, keys, ns);
  const std::string_view name = ns.name.empty() ? kDefaultNamespace : ns.name;
  s.key_count = 0;
  s.rank_count = 0;
  for (const NamespaceSummary& summary : state.namespaces()) {
    if (summary.name != name) continue;
    s.key_count = summary.keys;
    s.rank_count = summary.ranks.size();
  }
  return s;
}

inline std::ostream& operator<<(std::ostream& os, const Snapshot& s) {
  os << "{ranks " << s.rank_count << ", keys " << s.key_count;
  for (const auto& r : s.ranks) {
    os << "; rank " << r.rank << " free " << r.stats.free << " allocated " << r.stats.allocated << " mapped "
       << r.stats.mapped << " orphaned " << r.stats.orphaned << " pool [";
    for (Page p : r.pool) os << p << ' ';
    os << "]";
  }
  return os << "}";
}

inline std::vector<BlockKey> block_keys(const std::vector<std::string>& keys) {
  std::vector<BlockKey> result;
  for (const auto& k : keys) result.push_back(BlockKey{k, ""});
  return result;
}

}  // namespace hf3fs_meta::testing
