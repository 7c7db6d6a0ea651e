// The effects of the calls on the state's parts: a rank added, pages taken, a confirmation mapped,
// pages pushed back to their pools, a key removed, a rank dropped. The live calls decide and then
// apply them; replay (replay.cpp) checks a record and then applies the same ones, so that what a
// replay does cannot drift from what the live call did. Only under the exclusive lock.
#include <algorithm>
#include <cassert>
#include <type_traits>

#include "state/state_impl.hpp"

namespace hf3fs_meta {

void MetadataState::Impl::add_rank(std::unique_ptr<RankData> data) {
  total_pages += data->num_pages;
  ranks.reserve(ranks.size() + 1);
  rank_slots.emplace(data->rank, static_cast<std::uint32_t>(ranks.size()));
  ranks.push_back(std::move(data));
}

// tp_world_size: the ranks initialized now (a scheduler never creates one, so workers only).
std::uint32_t MetadataState::Impl::create_key(const HashedKey& key, std::uint32_t tp_world_size) {
  const std::uint32_t id = keys.take_id();
  KeyRecord& k = keys[id];
  k.name.assign(key.name);
  k.hash = key.hash;
  k.tp_world_size = tp_world_size;
  keys.enter(id);
  if (ttl_ms > 0) {
    k.incomplete_stamp = ++stamps;
    life.timed_keys.push_back(TimedKey{now, stamps, id});
  }
  return id;
}

// Preconditions (checked by validation): page is allocated, orphaned, or already this key's.
void MetadataState::Impl::map_page(RankData& r, std::uint32_t slot, std::uint32_t id, std::uint32_t page) {
  KeyRecord& k = keys[id];
  if (RankPage* rp = keys.on(k, slot)) {
    if (rp->page == page) return;
    // vLLM overwrites the key's page and never frees the old one: it stays owned by nobody.
    if (k.where == Where::lru) r.lru.replace(r.lru_links(), rp->page, page);
    r.owner[rp->page] = kOrphaned;
    --r.mapped;
    ++r.orphaned;
    if (ttl_ms > 0) timed(r, slot, rp->page, kOrphaned);
    rp->page = page;
  } else {
    const bool was_complete = k.complete();
    if (k.where == Where::lru) lru_unlink(id);  // the key stops being complete
    keys.add_page(k, RankPage{slot, page});
    completeness_changed(id, was_complete);
  }
  const std::uint32_t before = r.owner[page];
  assert(before == kAllocated || before == kOrphaned);
  --r.count(RankData::of_marker(before));
  r.owner[page] = id;
  r.clear_after_reclaim(page);
  ++r.mapped;
}

// One confirmation: the key (created first when it does not exist, id kNone, with the
// tp_world_size given) maps `page` on the rank. Returns the key's id.
std::uint32_t MetadataState::Impl::map_confirmation(RankData& r, std::uint32_t slot, std::uint32_t id,
                                                    const HashedKey& key, std::uint32_t page,
                                                    std::uint32_t new_key_tp_world_size) {
  if (id == kNone) id = create_key(key, new_key_tp_world_size);
  map_page(r, slot, id, page);
  return id;
}

// confirm_write's releases (checked by check_releases): a mapped (or draining) page is kept,
// whichever the release; a bare release frees an allocated or orphaned page (a free one is
// skipped); a keyed one frees only a page still allocated for its key (else it is late).
void MetadataState::Impl::release(RankData& r, std::span<const Page> pages, std::span<const ReleaseKey> keyed,
                                  Scratch& s, ConfirmOutcome& outcome) {
  const bool record = static_cast<bool>(sink);
  // vLLM's releases: the loop as it was before keyed ones (bench_state's Release1000Into1M).
  const auto bare = [&](auto may_be_reclaimed) {
    std::size_t released = 0, kept = 0;  // in registers, not in `outcome`
    for (const Page p : pages) {
      const auto page = static_cast<std::uint32_t>(p);
      const std::uint32_t owner = r.owner[page];
      if (owner == kFree) continue;  // already in the pool (or released earlier in this list)
      if (owner < kKeyIdLimit) {
        // Freeing a mapped (or draining) page would let another key overwrite what a reader reads: kept.
        ++kept;
        continue;
      }
      r.template to_pool<decltype(may_be_reclaimed)::value>(page, RankData::of_marker(owner));
      if (record) s.released.push_back(page);
      ++released;
    }
    outcome.released += released;
    outcome.kept_mapped += kept;
  };
  if (keyed.empty()) {
    if (r.reclaimed) {
      bare(std::true_type{});
    } else {
      bare(std::false_type{});
    }
  } else {
    std::size_t next = 0;
    for (std::size_t j = 0; j < pages.size(); ++j) {
      const auto page = static_cast<std::uint32_t>(pages[j]);
      const std::uint32_t owner = r.owner[page];
      const bool is_keyed = next < keyed.size() && keyed[next].index == j;
      const std::uint32_t hash = is_keyed ? s.release_hashes[next++] : 0;
      if (owner < kKeyIdLimit) {
        // Mapped or draining: kept, keyed or not (kept_on_release counts every such release).
        ++outcome.kept_mapped;
        continue;
      }
      if (is_keyed ? owner != kAllocated || r.allocated_for[page] != hash : owner == kFree) {
        if (is_keyed) ++outcome.late;
        continue;
      }
      r.to_pool(page, RankData::of_marker(owner));
      if (record) s.released.push_back(page);
      ++outcome.released;
    }
  }
  r.kept_on_release += outcome.kept_mapped;
}

// An allocated or orphaned page back to its pool, by the TTL.
void MetadataState::Impl::reclaim_page(RankData& r, std::uint32_t page) {
  const std::uint32_t was = r.owner[page];
  ++(was == kAllocated ? counters.reclaimed_allocated : counters.reclaimed_orphaned);
  r.to_pool(page, RankData::of_marker(was));
  r.set_after_reclaim(page);
}

// Removes a key from every lookup. `drain`: its pages wait for the key's lease to end (a replay,
// which has no leases, makes one); else they return to the back of their pools now.
void MetadataState::Impl::remove_key_as(std::uint32_t id, Removal why, bool drain) {
  ++(why == Removal::evicted ? counters.evicted : why == Removal::deleted ? counters.deleted : counters.reclaimed_keys);
  KeyRecord& k = keys[id];
  keys.leave(id);
  if (k.complete()) --life.complete;
  if (k.where == Where::lru) lru_unlink(id);
  if (drain) {
    for (const RankPage& rp : keys.pages(k)) {
      RankData& r = *ranks[rp.slot];
      --r.mapped;
      ++r.draining;
    }
    if (k.where != Where::leased) {
      k.lease_end = now + lease_ms;
      lease_push_back(id);
    }
    return;
  }
  if (k.where == Where::leased) lease_unlink(id);
  release_key_pages(id, false);
  free_id(id);
}

// An orphaned page that a reader may still be reading (its key moved while under a read lease):
// drains as a removed key's pages do, owned by a key record of its own (no name, in no lookup,
// never live) whose lease ends with the key's (`leased`, placed beside it in the lease list,
// which stays in end order), or, replaying (kNone), one lease period from now, as a replayed
// removal's does (its key_drained record ends it). Returns the record's id.
std::uint32_t MetadataState::Impl::drain_orphan(RankData& r, std::uint32_t slot, std::uint32_t page,
                                                std::uint32_t leased) {
  assert(r.owner[page] == kOrphaned);
  const std::uint32_t id = keys.take_id();
  KeyRecord& k = keys[id];
  k.hash = HashedKey(std::string_view()).hash;  // as import_image computes it for a nameless record
  k.tp_world_size = 0;
  k.live = false;
  keys.add_page(k, RankPage{slot, page});
  r.owner[page] = id;
  --r.orphaned;
  ++r.draining;
  if (leased == kNone) {
    k.lease_end = now + lease_ms;
    lease_push_back(id);
    return id;
  }
  k.lease_end = keys[leased].lease_end;
  life.leases.insert_after(keys.lease_links(), leased, id);
  k.where = Where::leased;
  return id;
}

// A removed key's pages (mapped, or `draining`) back to their pools.
void MetadataState::Impl::release_key_pages(std::uint32_t id, bool draining) {
  const PageState was = draining ? PageState::draining : PageState::mapped;
  for (const RankPage& rp : keys.pages(keys[id])) ranks[rp.slot]->to_pool(rp.page, was);
}

void MetadataState::Impl::free_id(std::uint32_t id) {
  keys.free_id(id);
  ++epoch;
}

// See drop_rank. `gone` takes the rank's data, to be freed by the caller.
DropOutcome MetadataState::Impl::drop(std::uint32_t slot, std::unique_ptr<RankData>& gone) {
  RankData& r = *ranks[slot];
  DropOutcome outcome{true, r.num_pages, 0, 0};
  for (std::uint32_t page = 0; page < r.num_pages; ++page) {
    const std::uint32_t id = r.owner[page];
    if (id >= kKeyIdLimit) continue;
    ++outcome.mappings;
    KeyRecord& k = keys[id];
    const bool was_complete = k.complete();
    if (k.live && k.where == Where::lru) lru_unlink(id);  // while its page on this rank is still listed
    keys.remove_page_on(k, slot);
    if (!k.live) continue;  // deleted, draining under a lease: its page goes with the rank
    if (k.pages.empty()) {
      ++outcome.keys_removed;
      if (was_complete) --life.complete;
      if (k.where == Where::leased) lease_unlink(id);
      keys.leave(id);
      free_id(id);
      continue;
    }
    completeness_changed(id, was_complete);
    if (lru && k.where == Where::none && k.complete()) lru_link(id);
  }
  rank_slots.erase(r.rank);
  total_pages -= r.num_pages;
  gone = std::move(ranks[slot]);
  return outcome;
}

}  // namespace hf3fs_meta
