// MetadataState's introspection (tests, metrics, the server's checks): reads only, under the
// ReadAccess of state_impl.hpp (with the lifecycle on, what expired in the namespace is processed
// first). A namespace that does not exist has nothing in it.
#include <algorithm>

#include "state/state_impl.hpp"

namespace hf3fs_meta {

std::optional<RankStats> MetadataState::rank_stats(NamespaceRef ns, Rank rank) const {
  Impl::ReadAccess access(*core_, ns);
  const Impl* im = access.space();
  const std::uint32_t slot = im ? im->slot_of(rank) : kNone;
  if (slot == kNone) return std::nullopt;
  return im->ranks[slot]->stats();
}

std::vector<std::pair<Rank, RankStats>> MetadataState::all_rank_stats(NamespaceRef ns) const {
  std::vector<std::pair<Rank, RankStats>> result;
  {
    Impl::ReadAccess access(*core_, ns);
    if (const Impl* im = access.space()) {
      result.reserve(im->rank_slots.size());
      for (const auto& r : im->ranks) {
        if (r) result.emplace_back(r->rank, r->stats());
      }
    }
  }
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}

std::optional<PageState> MetadataState::page_state(NamespaceRef ns, Rank rank, Page page) const {
  Impl::ReadAccess access(*core_, ns);
  const Impl* im = access.space();
  const std::uint32_t slot = im ? im->slot_of(rank) : kNone;
  if (slot == kNone || !im->ranks[slot]->in_range(page)) return std::nullopt;
  return im->page_state(*im->ranks[slot], static_cast<std::uint32_t>(page));
}

std::optional<std::string> MetadataState::page_owner(NamespaceRef ns, Rank rank, Page page) const {
  Impl::ReadAccess access(*core_, ns);
  const Impl* im = access.space();
  const std::uint32_t slot = im ? im->slot_of(rank) : kNone;
  if (slot == kNone || !im->ranks[slot]->in_range(page)) return std::nullopt;
  const std::uint32_t owner = im->ranks[slot]->owner[static_cast<std::uint32_t>(page)];
  if (owner >= kKeyIdLimit || !im->keys[owner].live) return std::nullopt;
  return im->keys[owner].name.str();
}

std::vector<Page> MetadataState::free_pages(NamespaceRef ns, Rank rank) const {
  std::vector<Page> result;
  Impl::ReadAccess access(*core_, ns);
  const Impl* im = access.space();
  const std::uint32_t slot = im ? im->slot_of(rank) : kNone;
  if (slot == kNone) return result;
  const RankData& r = *im->ranks[slot];
  result.reserve(r.free_count);
  for (std::uint64_t i = 0; i < r.free_count; ++i) result.push_back(r.pool_at(i));
  return result;
}

std::optional<KeyInfo> MetadataState::Impl::key_info(std::string_view key) const {
  const std::uint32_t key_id = id_of(HashedKey{key});
  if (key_id == kNone) return std::nullopt;
  const KeyRecord& k = keys[key_id];
  KeyInfo info;
  info.tp_world_size = k.tp_world_size;
  info.complete = k.complete();
  for (const RankPage& rp : keys.pages(k)) info.pages.emplace_back(ranks[rp.slot]->rank, Page{rp.page});
  return info;
}

std::optional<KeyInfo> MetadataState::key_info(NamespaceRef ns, std::string_view key) const {
  std::optional<KeyInfo> info;
  {
    Impl::ReadAccess access(*core_, ns);
    if (const Impl* im = access.space()) info = im->key_info(key);
  }
  if (info) std::sort(info->pages.begin(), info->pages.end());
  return info;
}

std::vector<std::optional<KeyInfo>> MetadataState::key_status(NamespaceRef ns, std::span<const std::string_view> keys,
                                                              std::size_t* ranks_initialized) const {
  std::vector<std::optional<KeyInfo>> result(keys.size());
  {
    Impl::ReadAccess access(*core_, ns);
    const Impl* im = access.space();
    if (ranks_initialized) *ranks_initialized = im ? im->rank_slots.size() : 0;
    if (im) {
      for (std::size_t i = 0; i < keys.size(); ++i) result[i] = im->key_info(keys[i]);
    }
  }
  for (std::optional<KeyInfo>& info : result) {
    if (info) std::sort(info->pages.begin(), info->pages.end());
  }
  return result;
}

std::size_t MetadataState::ranks_initialized(NamespaceRef ns) const {
  Impl::ReadAccess access(*core_, ns);
  return access.space() ? access.space()->rank_slots.size() : 0;
}

void MetadataState::Impl::fill_stats(StateStats& out) const {
  out.ranks.reserve(rank_slots.size());
  for (const auto& r : ranks) {
    if (r) out.ranks.emplace_back(r->rank, r->stats());
  }
  out.keys_complete = life.complete;
  out.keys_incomplete = keys.live() - life.complete;
  out.keys_leased = life.leases.size;
  out.key_records = keys.size();
  out.evicted_keys = counters.evicted;
  out.deleted_keys = counters.deleted;
  out.reclaimed_keys = counters.reclaimed_keys;
  out.reclaimed_allocated_pages = counters.reclaimed_allocated;
  out.reclaimed_orphaned_pages = counters.reclaimed_orphaned;
  std::sort(out.ranks.begin(), out.ranks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

StateStats MetadataState::stats(NamespaceRef ns) const {
  StateStats out;
  Impl::ReadAccess access(*core_, ns);
  if (const Impl* im = access.space()) im->fill_stats(out);
  return out;
}

bool MetadataState::holds(NamespaceRef ns, Rank rank, std::span<const Page> pages,
                          std::span<const BlockKey> keys) const {
  if (pages.size() != keys.size()) return false;
  Impl::ReadAccess access(*core_, ns);  // with the lifecycle, what expired is taken back first
  const Impl* im = access.space();
  const std::uint32_t slot = im ? im->slot_of(rank) : kNone;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] == kNoPage) continue;
    if (slot == kNone || !im->ranks[slot]->in_range(pages[i])) return false;
    const RankData& r = *im->ranks[slot];
    const auto page = static_cast<std::uint32_t>(pages[i]);
    const HashedKey key{keys[i].key};
    const std::uint32_t owner = r.owner[page];
    const bool held = owner == kAllocated ? r.allocated_for[page] == page_tag(key.name)
                                          : owner < kKeyIdLimit && owner == im->id_of(key);
    if (!held) return false;
  }
  return true;
}

}  // namespace hf3fs_meta
