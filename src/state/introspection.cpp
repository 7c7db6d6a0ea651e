// MetadataState's introspection (tests, metrics, the server's checks): reads only, under the
// ReadAccess of state_impl.hpp (with the lifecycle on, what expired is processed first).
#include <algorithm>

#include "state/state_impl.hpp"

namespace hf3fs_meta {

std::optional<RankStats> MetadataState::rank_stats(Rank rank) const {
  Impl::ReadAccess access(*impl_);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return std::nullopt;
  return impl_->ranks[slot]->stats();
}

std::vector<std::pair<Rank, RankStats>> MetadataState::all_rank_stats() const {
  std::vector<std::pair<Rank, RankStats>> result;
  {
    Impl::ReadAccess access(*impl_);
    result.reserve(impl_->rank_slots.size());
    for (const auto& r : impl_->ranks) {
      if (r) result.emplace_back(r->rank, r->stats());
    }
  }
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}

std::optional<PageState> MetadataState::page_state(Rank rank, Page page) const {
  Impl::ReadAccess access(*impl_);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone || !impl_->ranks[slot]->in_range(page)) return std::nullopt;
  return impl_->page_state(*impl_->ranks[slot], static_cast<std::uint32_t>(page));
}

std::optional<std::string> MetadataState::page_owner(Rank rank, Page page) const {
  Impl::ReadAccess access(*impl_);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone || !impl_->ranks[slot]->in_range(page)) return std::nullopt;
  const std::uint32_t owner = impl_->ranks[slot]->owner[static_cast<std::uint32_t>(page)];
  if (owner >= kKeyIdLimit || !impl_->keys[owner].live) return std::nullopt;
  return impl_->keys[owner].name.str();
}

std::vector<Page> MetadataState::free_pages(Rank rank) const {
  std::vector<Page> result;
  Impl::ReadAccess access(*impl_);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return result;
  const RankData& r = *impl_->ranks[slot];
  result.reserve(r.free_count);
  for (std::uint64_t i = 0; i < r.free_count; ++i) result.push_back(r.pool_at(i));
  return result;
}

std::optional<KeyInfo> MetadataState::key_info(std::string_view key) const {
  KeyInfo info;
  {
    Impl::ReadAccess access(*impl_);
    const std::uint32_t id = impl_->id_of(HashedKey{key});
    if (id == kNone) return std::nullopt;
    const KeyRecord& k = impl_->keys[id];
    info.tp_world_size = k.tp_world_size;
    info.complete = k.complete();
    for (const RankPage& rp : impl_->keys.pages(k)) info.pages.emplace_back(impl_->ranks[rp.slot]->rank, Page{rp.page});
  }
  std::sort(info.pages.begin(), info.pages.end());
  return info;
}

std::size_t MetadataState::key_count() const {
  Impl::ReadAccess access(*impl_);
  return impl_->keys.live();
}

StateStats MetadataState::stats() const {
  StateStats out;
  {
    Impl::ReadAccess access(*impl_);
    out.ranks.reserve(impl_->rank_slots.size());
    for (const auto& r : impl_->ranks) {
      if (r) out.ranks.emplace_back(r->rank, r->stats());
    }
    out.keys_complete = impl_->life.complete;
    out.keys_incomplete = impl_->keys.live() - impl_->life.complete;
    out.keys_leased = impl_->life.leases.size;
    out.key_records = impl_->keys.size();
    out.evicted_keys = impl_->counters.evicted;
    out.deleted_keys = impl_->counters.deleted;
    out.reclaimed_keys = impl_->counters.reclaimed_keys;
    out.reclaimed_allocated_pages = impl_->counters.reclaimed_allocated;
    out.reclaimed_orphaned_pages = impl_->counters.reclaimed_orphaned;
  }
  std::sort(out.ranks.begin(), out.ranks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::size_t MetadataState::rank_count() const {
  Impl::ReadAccess access(*impl_);
  return impl_->rank_slots.size();
}

bool MetadataState::holds(Rank rank, std::span<const Page> pages, std::span<const BlockKey> keys) const {
  if (pages.size() != keys.size()) return false;
  Impl::ReadAccess access(*impl_);  // with the lifecycle, what expired is taken back first
  const std::uint32_t slot = impl_->slot_of(rank);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] == kNoPage) continue;
    if (slot == kNone || !impl_->ranks[slot]->in_range(pages[i])) return false;
    const RankData& r = *impl_->ranks[slot];
    const auto page = static_cast<std::uint32_t>(pages[i]);
    const HashedKey key{keys[i].key};
    const std::uint32_t owner = r.owner[page];
    const bool held = owner == kAllocated ? r.allocated_for[page] == key.short_hash()
                                          : owner < kKeyIdLimit && owner == impl_->id_of(key);
    if (!held) return false;
  }
  return true;
}

}  // namespace hf3fs_meta
