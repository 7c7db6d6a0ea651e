// The cache lifecycle (all of it off by default): recency (each rank's LRU order of the
// pages of complete, unleased keys), read leases (one list of key ids in the order their leases
// end), eviction, the TTL's reclaim of allocated and orphaned pages and of incomplete keys, and the
// drain of pages under a lease. What the clock, the LRU order and the leases decide is recorded as
// what happened (keys_removed, page_reclaimed, key_drained...), so that replay decides nothing.
// Every operation is O(1) per page it touches. Only under the exclusive lock.
#include <algorithm>
#include <cassert>
#include <chrono>
#include <limits>

#include "state/state_impl.hpp"

namespace hf3fs_meta {

std::int64_t MetadataState::Impl::read_clock() const {
  const auto t = options.clock ? options.clock()
                               : std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch());
  return t.count();
}

// Processes what expired by now, in the order it happened; at one instant, leases first, then
// pages, then keys.
void MetadataState::Impl::advance() {
  if (!lifecycle || core.clock_held) return;
  now = std::max(now, read_clock());
  constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  for (;;) {
    const std::int64_t lease = life.leases.head != kNone ? keys[life.leases.head].lease_end : kNever;
    const std::int64_t page = life.timed_pages.empty() ? kNever : life.timed_pages.front().at + ttl_ms;
    const std::int64_t key = life.timed_keys.empty() ? kNever : life.timed_keys.front().at + ttl_ms;
    const std::int64_t first = std::min({lease, page, key});
    if (first > now) return;
    if (lease == first) {
      end_lease(life.leases.head);
    } else if (page == first) {
      const TimedPage e = life.timed_pages.front();
      life.timed_pages.pop_front();
      expire_page(e);
    } else {
      const TimedKey e = life.timed_keys.front();
      life.timed_keys.pop_front();
      expire_key(e);
    }
  }
}

// A page that became allocated or orphaned (`marker`) now: reclaimed one TTL from now.
void MetadataState::Impl::timed(RankData& r, std::uint32_t slot, std::uint32_t page, std::uint32_t marker) {
  r.stamp[page] = ++stamps;
  life.timed_pages.push_back(TimedPage{now, stamps, slot, page, marker});
}

void MetadataState::Impl::expire_page(const TimedPage& e) {
  if (!ranks[e.slot]) return;  // dropped since
  RankData& r = *ranks[e.slot];
  if (r.owner[e.page] != e.marker || r.stamp[e.page] != e.stamp) return;  // confirmed or released since
  Change change;
  change.kind = ChangeKind::page_reclaimed;
  change.rank = r.rank;
  change.page = e.page;
  change.was = e.marker == kAllocated ? PageState::allocated : PageState::orphaned;
  emit(change);
  reclaim_page(r, e.page);
}

void MetadataState::Impl::expire_key(const TimedKey& e) {
  const KeyRecord& k = keys[e.id];
  if (!k.live || k.complete() || k.incomplete_stamp != e.stamp) return;
  remove_key(e.id, Removal::reclaimed);
}

void MetadataState::Impl::completeness_changed(std::uint32_t id, bool was_complete) {
  KeyRecord& k = keys[id];
  const bool complete = k.complete();
  if (complete == was_complete) return;
  if (complete) {
    ++life.complete;
    use(id, false);
  } else {
    --life.complete;
    if (ttl_ms > 0) {
      k.incomplete_stamp = ++stamps;
      life.timed_keys.push_back(TimedKey{now, stamps, id});
    }
  }
}

// A use of a complete key: to the most recent end of the LRU order, or, for a read (lookup or
// reuse) with leases on, into the lease list until now + lease; a leased key re-enters the LRU
// order when its lease ends.
void MetadataState::Impl::use(std::uint32_t id, bool read) {
  KeyRecord& k = keys[id];
  if (read && lease_ms > 0) {
    if (k.where == Where::lru) lru_unlink(id);
    if (k.where == Where::leased) lease_unlink(id);
    k.lease_end = now + lease_ms;
    lease_push_back(id);
    return;
  }
  if (!lru || k.where == Where::leased) return;
  if (k.where == Where::lru) lru_unlink(id);
  lru_link(id);
}

void MetadataState::Impl::lru_link(std::uint32_t id) {
  KeyRecord& k = keys[id];
  for (const RankPage& rp : keys.pages(k)) {
    RankData& r = *ranks[rp.slot];
    r.lru.push_back(r.lru_links(), rp.page);
  }
  k.where = Where::lru;
}

void MetadataState::Impl::lru_unlink(std::uint32_t id) {
  KeyRecord& k = keys[id];
  for (const RankPage& rp : keys.pages(k)) {
    RankData& r = *ranks[rp.slot];
    r.lru.remove(r.lru_links(), rp.page);
  }
  k.where = Where::none;
}

void MetadataState::Impl::lease_push_back(std::uint32_t id) {
  life.leases.push_back(keys.lease_links(), id);
  keys[id].where = Where::leased;
}

void MetadataState::Impl::lease_unlink(std::uint32_t id) {
  life.leases.remove(keys.lease_links(), id);
  keys[id].where = Where::none;
}

// `journal`: false when replaying the record that says so.
void MetadataState::Impl::end_lease(std::uint32_t id, bool journal) {
  lease_unlink(id);
  KeyRecord& k = keys[id];
  if (!k.live) {
    if (journal) {
      Change change;
      change.kind = ChangeKind::key_drained;
      change.key_id = id;
      emit(change);
    }
    release_key_pages(id, true);
    free_id(id);
  } else if (lru && k.complete()) {
    lru_link(id);
  }
}

// Removes a key from every lookup (eviction, deletion, reclaim). Its pages return to the back of
// their pools now, or, under a read lease, drain back when the lease ends. `journal`: false for a
// deletion journaled with its batch (keys_deleted), and when replaying.
void MetadataState::Impl::remove_key(std::uint32_t id, Removal why, bool journal) {
  const KeyRecord& k = keys[id];
  const bool drain = k.where == Where::leased;
  if (journal) {
    const std::string_view name = k.name.view();
    Change change;
    change.kind = ChangeKind::keys_removed;
    change.removal = why;
    change.draining = drain;
    change.deleted = {&name, 1};
    emit(change);
  }
  remove_key_as(id, why, drain);
}

// Before an allocate of keys on rank r is answered: the keys it reuses (complete, with a page on
// r) are used in request order, then, with eviction, least recently used keys with a page on r are
// evicted until the pool holds one page per key. The reused keys are leased, or at the most recent
// end of r's list: the first lru.size - (reused keys in the list) entries are never this call's.
// `pages` gets each key's page on r if it is reused, else kNone: the allocate's answer, found with
// one lookup per key (no victim is a key of the call, so eviction changes none of them).
void MetadataState::Impl::before_allocate(RankData& r, std::uint32_t slot, const std::vector<HashedKey>& hashed,
                                          Scratch& s) {
  std::vector<std::uint32_t>& pages = s.pages;
  std::uint32_t reused_in_list = 0;
  pages.resize(hashed.size(), kNone);
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    const std::uint32_t id = id_of(hashed[i]);
    if (id == kNone || !keys[id].complete()) continue;
    const RankPage* rp = keys.on(keys[id], slot);
    if (rp == nullptr) continue;
    pages[i] = rp->page;
    use(id, true);
    if (keys[id].where == Where::lru) ++reused_in_list;
  }
  if (!lru || r.free_count >= hashed.size()) return;
  evict(r, std::min<std::size_t>(hashed.size() - r.free_count, r.lru.size - reused_in_list), s);
}

// Evicts the keys of the first n entries of r's LRU list. Each eviction frees one page of r (a key
// has one page per rank), so the victims are the first entries of r's list. Nobody touched them
// lately: what removing them reads and writes (their records, key-table slots, the page lists of
// keys on several ranks, and names when there is a record to write) are cache misses, started here
// all together rather than met one after another.
void MetadataState::Impl::evict(RankData& r, std::size_t n, Scratch& s) {
  victims.clear();
  std::uint32_t last = kNone;  // the last victim's page on r
  for (std::uint32_t page = r.lru.head; victims.size() < n; page = r.lru_next[page]) {
    victims.push_back(r.owner[page]);
    internal::touch(&keys[victims.back()]);
    last = page;
  }
  if (victims.empty()) return;
  const bool record = static_cast<bool>(sink);
  for (const std::uint32_t id : victims) {
    const KeyRecord& k = keys[id];
    keys.index.prefetch(k.tag());
    internal::touch(keys.pages(k).data());
    if (record) internal::touch(k.name.data());
  }
  // One record for all the victims (the names are read only for it): no victim is leased, as the
  // list holds only unleased keys, so none drains.
  Change change;
  change.kind = ChangeKind::keys_removed;
  change.removal = Removal::evicted;
  if (record) {
    for (const std::uint32_t id : victims) s.deleted.push_back(keys[id].name.view());
    change.deleted = s.deleted;
  }
  emit(change);
  // The victims' pages on r are the head of r's list: cut off at once (one write at the cut, where
  // unlinking each would write its neighbours' links, lru_prev entries nothing else has read). Their
  // pages on other ranks are unlinked one by one.
  r.lru.pop_front(r.lru_links(), static_cast<std::uint32_t>(victims.size()), last);
  for (const std::uint32_t id : victims) {
    KeyRecord& k = keys[id];
    assert(k.where == Where::lru);
    for (const RankPage& rp : keys.pages(k)) {
      RankData& other = *ranks[rp.slot];
      if (&other != &r) other.lru.remove(other.lru_links(), rp.page);
    }
    k.where = Where::none;
    remove_key_as(id, Removal::evicted, false);
  }
}

// See MetadataState::restarted().
void MetadataState::Impl::restart_leases() {
  if (lifecycle) now = std::max(now, read_clock());
  std::vector<std::uint32_t> draining;
  for (std::uint32_t id = life.leases.head; id != kNone; id = keys[id].lease_next) {
    if (!keys[id].live) draining.push_back(id);
  }
  if (lease_ms == 0) {
    for (const std::uint32_t id : draining) end_lease(id);  // recorded: the sink is set
    return;
  }
  const std::int64_t end = now + lease_ms;
  for (const std::uint32_t id : draining) keys[id].lease_end = end;
  for (std::uint32_t id = 0; id < keys.size(); ++id) {
    KeyRecord& k = keys[id];
    if (!k.live || !k.complete()) continue;
    if (k.where == Where::lru) lru_unlink(id);
    if (k.where == Where::leased) lease_unlink(id);
    k.lease_end = end;
    lease_push_back(id);
  }
}

}  // namespace hf3fs_meta
