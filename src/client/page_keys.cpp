#include "client/page_keys.hpp"

namespace hf3fs_meta::internal {

void PageKeys::remember(Rank rank, std::span<const BlockKey> keys, std::span<const Page> pages) {
  std::lock_guard lock(mutex_);
  auto& known = ranks_[rank];
  for (std::size_t i = 0; i < pages.size() && i < keys.size(); ++i) {
    if (pages[i] < 0) continue;  // kNoPage: no page was given
    if (auto it = known.find(pages[i]); it != known.end()) {
      it->second = keys[i].key;  // allocated again, for another key: the newer allocation counts
    } else if (known.size() < max_per_rank_) {
      known.emplace(pages[i], keys[i].key);
    }
  }
  if (known.empty()) ranks_.erase(rank);
}

std::vector<ReleaseKey> PageKeys::release_keys(Rank rank, std::span<const Page> pages) const {
  std::vector<ReleaseKey> out;
  std::lock_guard lock(mutex_);
  const auto r = ranks_.find(rank);
  if (r == ranks_.end()) return out;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (auto it = r->second.find(pages[i]); it != r->second.end()) out.push_back(ReleaseKey{i, it->second});
  }
  return out;
}

void PageKeys::forget(Rank rank, std::span<const Confirmation> confirmed, std::span<const Page> released) {
  std::lock_guard lock(mutex_);
  const auto r = ranks_.find(rank);
  if (r == ranks_.end()) return;
  for (const auto& c : confirmed) r->second.erase(c.page);
  for (const Page page : released) r->second.erase(page);
  if (r->second.empty()) ranks_.erase(r);
}

void PageKeys::forget_rank(Rank rank) {
  std::lock_guard lock(mutex_);
  ranks_.erase(rank);
}

void PageKeys::clear() {
  std::lock_guard lock(mutex_);
  ranks_.clear();
}

std::size_t PageKeys::size(Rank rank) const {
  std::lock_guard lock(mutex_);
  const auto r = ranks_.find(rank);
  return r == ranks_.end() ? 0 : r->second.size();
}

}  // namespace hf3fs_meta::internal
