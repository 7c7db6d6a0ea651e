// MetadataState: see include/hf3fs_meta/state.hpp, docs/protocol.md "State model" (the rules)
// and docs/design.md "State" (the layout).
//
// Layout, chosen so that every operation costs O(1) per page and per key and nothing scans a pool:
// - per rank, the page pool and page table (state/page_pool.hpp);
// - keys: the key table (state/key_table.hpp);
// - the cache lifecycle (all of it off by default): state/lifecycle.cpp;
// - the lock and which file holds what: state/state_impl.hpp.
// This file holds the calls: what they check before anything changes, the lock, and their change
// records; the effects they then apply are state/effects.cpp's, shared with replay.
#include "hf3fs_meta/state.hpp"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <utility>

#include "internal/field_text.hpp"
#include "state/state_impl.hpp"

namespace hf3fs_meta {
namespace state_model {

void Scratch::reset() {
  // A huge batch must not leave a huge table behind for every later call to clear.
  constexpr std::size_t kKeep = 4096;
  if (seen.size() > kKeep) decltype(seen){}.swap(seen);
  if (page_overlay.size() > kKeep) decltype(page_overlay){}.swap(page_overlay);
  if (hashed.capacity() > kKeep) std::vector<HashedKey>{}.swap(hashed);
  if (local_of.capacity() > kKeep) std::vector<std::uint32_t>{}.swap(local_of);
  if (pages.capacity() > kKeep) std::vector<std::uint32_t>{}.swap(pages);
  if (locals.capacity() > kKeep) std::vector<LocalKey>{}.swap(locals);
  if (allocated.capacity() > kKeep) std::vector<AllocatedItem>{}.swap(allocated);
  if (confirmed.capacity() > kKeep) std::vector<ConfirmedItem>{}.swap(confirmed);
  if (released.capacity() > kKeep) std::vector<std::uint32_t>{}.swap(released);
  if (deleted.capacity() > kKeep) std::vector<std::string_view>{}.swap(deleted);
  if (drains.capacity() > kKeep) decltype(drains){}.swap(drains);
  drains.clear();
  if (release_hashes.capacity() > kKeep) std::vector<std::uint32_t>{}.swap(release_hashes);
  release_hashes.clear();
  allocated.clear();
  confirmed.clear();
  released.clear();
  deleted.clear();
  seen.clear();
  page_overlay.clear();
  hashed.clear();
  local_of.clear();
  locals.clear();
  pages.clear();
}

Scratch& scratch() {
  thread_local Scratch s;
  s.reset();
  return s;
}

StateError not_initialized(Rank rank) {
  return make_error(StateErrc::not_initialized, "Rank " + std::to_string(rank) + " not initialized", rank);
}

std::string out_of_range(std::string_view field, std::size_t index, Page page, const RankData& r) {
  return internal::indexed(field, index) + ": page " + std::to_string(page) + " is outside 0.." +
         std::to_string(Page{r.num_pages} - 1) + " on rank " + std::to_string(r.rank);
}

}  // namespace state_model

namespace {

// In confirm_write's page overlay (whose values are otherwise local key indexes or kOrphaned): a page
// a leased key left in this call, draining.
constexpr std::uint32_t kOverlayDraining = kAllocated;

// allocate's keys, distinct (hashed before the lock: they depend on the batch alone).
StateResult<void> check_distinct(Rank rank, std::span<const BlockKey> keys, const std::vector<HashedKey>& hashed,
                                 Scratch& s) {
  if (keys.size() <= 1) return boost::outcome_v2::success();
  s.seen.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto [it, inserted] = s.seen.try_emplace(hashed[i], static_cast<std::uint32_t>(i));
    if (!inserted) {
      return make_error(StateErrc::invalid_argument,
                        internal::indexed("keys", i) + ": duplicate key " + internal::quoted(keys[i].key) + " (also " +
                            internal::indexed("keys", it->second) + ")",
                        rank, i);
    }
  }
  return boost::outcome_v2::success();
}

}  // namespace

void MetadataState::Impl::emit_clock() {
  recorded_now = now;
  Change tick;
  tick.kind = ChangeKind::clock;
  tick.clock_ms = now;
  tick.seq = ++seq;
  if (sink) sink(tick);
}

StateResult<void> MetadataState::Impl::check_max_pages(const StateOptions& options, std::int64_t num_pages) {
  if (num_pages <= options.max_pages) return boost::outcome_v2::success();
  return make_error(StateErrc::invalid_initialization,
                    "num_pages " + std::to_string(num_pages) + " is above the maximum " +
                        std::to_string(options.max_pages),
                    0);
}

// A refusal names the caller's own namespace's figures only: the server's totals would tell one
// tenant how much the others hold.
StateResult<void> MetadataState::Impl::check_room(const Core& core, const Impl* space, std::string_view name,
                                                  Rank rank, std::int64_t num_pages) {
  if (core.rank_total() >= core.options.max_ranks) {
    return make_error(StateErrc::invalid_initialization,
                      "rank " + std::to_string(rank) + " does not fit: the server has reached its limit of ranks",
                      rank);
  }
  const std::int64_t rank_quota =
      core.options.namespace_max_ranks > 0 ? core.options.namespace_max_ranks : core.options.max_ranks;
  const auto ranks = static_cast<std::int64_t>(space ? space->rank_slots.size() : 0);
  if (ranks >= rank_quota) {
    return make_error(StateErrc::invalid_initialization,
                      "rank " + std::to_string(rank) + " would exceed the maximum of " + std::to_string(rank_quota) +
                          " ranks of namespace " + std::string(name),
                      rank);
  }
  if (num_pages > core.options.max_total_pages - core.page_total()) {
    return make_error(StateErrc::invalid_initialization,
                      "num_pages " + std::to_string(num_pages) + " would exceed the server's limit of pages",
                      rank);
  }
  const std::int64_t quota = core.options.namespace_max_total_pages;
  const std::int64_t pages = space ? space->total_pages : 0;
  if (quota > 0 && num_pages > quota - pages) {
    return make_error(StateErrc::invalid_initialization,
                      "num_pages " + std::to_string(num_pages) + " would bring the pages of namespace " +
                          std::string(name) + " to " + std::to_string(pages + num_pages) + ", above its maximum " +
                          std::to_string(quota),
                      rank);
  }
  return boost::outcome_v2::success();
}

// The lookups behind both overloads of batch_exists and get_locations (std::string keys and
// views), on the call's keys hashed before the lock is taken.
void MetadataState::Impl::batch_exists(const std::vector<HashedKey>& hashed, std::vector<bool>& result) {
  prefetch(hashed);
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    const std::uint32_t id = id_of(hashed[i]);
    result[i] = id != kNone && keys[id].complete();
    if (lifecycle && result[i]) use(id, true);
  }
}

StateResult<void> MetadataState::Impl::get_locations(Rank rank, const std::vector<HashedKey>& hashed,
                                                     std::vector<std::optional<Page>>& result) {
  const std::uint32_t slot = slot_of(rank);
  if (slot == kNone) return not_initialized(rank);
  prefetch(hashed);
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    if (!lifecycle) {
      const std::uint32_t page = complete_page(hashed[i], slot);
      if (page != kNone) result[i] = page;
      continue;
    }
    const std::uint32_t id = id_of(hashed[i]);
    if (id == kNone || !keys[id].complete()) continue;
    if (const RankPage* rp = keys.on(keys[id], slot)) {
      result[i] = rp->page;
      use(id, true);
    }
  }
  return boost::outcome_v2::success();
}

std::vector<bool> MetadataState::Impl::delete_keys(const std::vector<HashedKey>& hashed, Scratch& s) {
  std::vector<bool> result(hashed.size(), false);
  advance();
  // Without leases nothing drains: one keys_deleted record (the format without the lifecycle).
  const bool batched = lease_ms == 0;
  for (std::size_t i = 0; i < hashed.size(); ++i) {
    const std::uint32_t id = id_of(hashed[i]);
    if (id == kNone) continue;
    remove_key(id, Removal::deleted, !batched);
    result[i] = true;
    if (batched) s.deleted.push_back(hashed[i].name);  // the caller's bytes (the record's are gone with it)
  }
  if (!s.deleted.empty()) {
    Change change;
    change.kind = ChangeKind::keys_deleted;
    change.deleted = s.deleted;
    emit(change);
  }
  return result;
}

void MetadataState::Impl::clear_into(Impl& old) {
  advance();  // what expired before the clear is counted
  swap_contents(old);
  ++epoch;
  Change change;
  change.kind = ChangeKind::cleared;
  emit(change);
}

MetadataState::MetadataState(StateOptions options) : core_(std::make_unique<Core>(std::move(options))) {}

MetadataState::~MetadataState() = default;

const StateOptions& MetadataState::options() const noexcept { return core_->options; }

StateResult<InitializeOutcome> MetadataState::initialize(NamespaceRef ns, Rank rank, std::int64_t num_pages,
                                                         Role role) {
  if (role == Role::scheduler) return InitializeOutcome{false};
  // Checked before looking the rank up: an oversized request is refused even for an existing rank.
  if (num_pages <= 0) {
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters", rank);
  }
  const auto refuse = [&](const StateResult<void>& limit) {
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters: " + limit.error().message,
                      rank);
  };
  if (auto limit = Impl::check_max_pages(core_->options, num_pages); !limit) return refuse(limit);
  const std::string_view name = ns.name.empty() ? kDefaultNamespace : ns.name;
  // Checked before building the rank (so a refused request costs no memory) and again under the
  // exclusive lock (another rank, or namespace, may have been added meanwhile).
  const auto check = [&](const Impl* space) {
    if (!space) {
      if (auto limit = core_->check_new_space(name, rank); !limit) return limit;
    }
    return Impl::check_room(*core_, space, name, rank, num_pages);
  };
  {
    // The server-wide limits read every namespace: without the lifecycle, under every namespace's
    // lock (SharedAll); with it, ReadAccess holds the core's lock exclusively.
    std::optional<Impl::ReadAccess> one;
    std::optional<Core::SharedAll> all;
    const Impl* space = nullptr;
    if (core_->lifecycle) {
      space = one.emplace(*core_, ns).space();
    } else {
      all.emplace(*core_);
      space = core_->find(ns);
    }
    if (const std::uint32_t slot = space ? space->slot_of(rank) : kNone; slot != kNone) {
      return InitializeOutcome{false, space->ranks[slot]->num_pages};
    }
    if (auto limit = check(space); !limit) return refuse(limit);
  }
  // Filling megabytes of page arrays must not stall the other ranks: build first, then insert.
  auto data = std::make_unique<RankData>(rank, static_cast<std::uint32_t>(num_pages), core_->lru,
                                         core_->ttl_ms > 0);
  std::unique_lock lock(core_->mutex);
  Impl* space = core_->find(ns);
  if (space) {
    space->advance();
    if (const std::uint32_t slot = space->slot_of(rank); slot != kNone) {
      return InitializeOutcome{false, space->ranks[slot]->num_pages};  // another thread won the race
    }
  }
  if (auto limit = check(space); !limit) return refuse(limit);
  if (!space) space = &core_->create_space(name);
  space->add_rank(std::move(data));
  Change change;
  change.kind = ChangeKind::rank_created;
  change.rank = rank;
  change.num_pages = static_cast<std::uint32_t>(num_pages);
  space->emit(change);
  return InitializeOutcome{true};
}

StateResult<std::vector<Page>> MetadataState::allocate(NamespaceRef ns, Rank rank, std::span<const BlockKey> keys) {
  // Hashes and duplicates depend on the batch alone: found before taking the lock; a duplicate is
  // reported after the rank check, which comes first as in vLLM.
  Scratch& s = scratch();
  const auto& hashed = hash_all(s, keys, [](const BlockKey& k) { return std::string_view(k.key); });
  const StateResult<void> distinct = check_distinct(rank, keys, hashed, s);
  std::vector<Page> result(keys.size(), kNoPage);

  Impl::RankAccess access(*core_, ns, rank);
  if (!access.space()) return not_initialized(rank);
  Impl& im = *access.space();
  const std::uint32_t slot = access.slot();
  if (!distinct) return distinct.error();
  RankData& r = *im.ranks[slot];
  const bool looked_up = im.lifecycle;
  im.prefetch(hashed);
  if (looked_up) im.before_allocate(r, slot, hashed, s);
  // The page a complete key has on this rank, else kNone.
  const auto existing_page = [&](std::size_t i) { return looked_up ? s.pages[i] : im.complete_page(hashed[i], slot); };

  if (r.free_count < keys.size()) {
    // Nothing is taken; only complete keys already on this rank get an answer.
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::uint32_t existing = existing_page(i);
      if (existing != kNone) result[i] = existing;
    }
    return result;
  }
  const bool record = static_cast<bool>(im.sink);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::uint32_t existing = existing_page(i);
    // A complete key's page is answered; the page taken for it goes back (as vLLM).
    const std::uint32_t page =
        im.take_page(r, slot, existing == kNone ? page_tag(hashed[i].name) : 0, existing == kNone);
    result[i] = existing != kNone ? existing : page;
    if (record) s.allocated.push_back(AllocatedItem{keys[i].key, page, static_cast<std::uint32_t>(result[i])});
  }
  if (!keys.empty()) {
    Change change;
    change.kind = ChangeKind::allocated;
    change.rank = rank;
    change.allocated = s.allocated;
    im.emit(change);
  }
  return result;
}

StateResult<ConfirmOutcome> MetadataState::confirm_write(NamespaceRef ns, Rank rank,
                                                         std::span<const Confirmation> confirmations,
                                                         std::span<const Page> pages_to_release,
                                                         std::span<const ReleaseKey> release_keys) {
  if (confirmations.empty() && pages_to_release.empty()) {
    // vLLM does nothing here, whether the rank exists or not.
    return ConfirmOutcome{};
  }
  // Group the confirmations by key before locking: the same key twice is allowed (applied in order).
  Scratch& s = scratch();
  s.seen.reserve(confirmations.size());
  s.local_of.resize(confirmations.size());
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    const HashedKey key{confirmations[i].key};
    const auto [it, inserted] = s.seen.try_emplace(key, static_cast<std::uint32_t>(s.locals.size()));
    if (inserted) s.locals.push_back(LocalKey{key});
    s.local_of[i] = it->second;
  }
  for (const ReleaseKey& keyed : release_keys) s.release_hashes.push_back(page_tag(keyed.key));

  Impl::RankAccess access(*core_, ns, rank);
  if (!access.space()) return not_initialized(rank);
  Impl& im = *access.space();
  const std::uint32_t slot = access.slot();
  RankData& r = *im.ranks[slot];
  if (auto valid = im.validate_confirmations(r, slot, confirmations, s); !valid) return std::move(valid).error();
  if (auto valid = im.check_releases(r, s, pages_to_release, release_keys); !valid) {
    return std::move(valid).error();
  }
  // Apply. Only an allocation failure (bad_alloc) can interrupt this part.
  ConfirmOutcome outcome = im.apply_confirmations(r, slot, confirmations, s);
  im.release(r, pages_to_release, release_keys, s, outcome);
  im.record_confirm(rank, s, outcome);
  return outcome;
}

// Validation: replays the confirmations on an overlay (page -> local key or kOrphaned, and each
// local key's current page) so that each one is judged against the state the earlier ones leave.
StateResult<void> MetadataState::Impl::validate_confirmations(RankData& r, std::uint32_t slot,
                                                              std::span<const Confirmation> confirmations,
                                                              Scratch& s) const {
  const Rank rank = r.rank;
  std::size_t new_keys = 0;
  for (LocalKey& local : s.locals) {
    local.id = id_of(local.key);
    if (local.id == kNone) {
      ++new_keys;
    } else if (const RankPage* rp = keys.on(keys[local.id], slot)) {
      local.page = rp->page;
    }
  }
  if (new_keys > kKeyIdLimit - keys.ids_in_use()) {
    return make_error(StateErrc::invalid_argument, "confirmations: too many keys", rank);
  }
  s.page_overlay.reserve(2 * confirmations.size());
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    const Confirmation& c = confirmations[i];
    const auto refuse = [&](StateErrc kind, const std::string& what) {
      return make_error(kind, "page " + std::to_string(c.page) + " of key " + c.key + what + " on rank " +
                                  std::to_string(rank),
                        rank, i);
    };
    if (!r.in_range(c.page)) {
      return make_error(StateErrc::invalid_argument, out_of_range("confirmations", i, c.page, r), rank, i);
    }
    const auto page = static_cast<std::uint32_t>(c.page);
    const std::uint32_t l = s.local_of[i];
    LocalKey& local = s.locals[l];
    std::optional<std::string_view> other;  // the key mapping the page, when it is another key
    if (const auto it = s.page_overlay.find(page); it != s.page_overlay.end()) {
      // Touched earlier in this call: orphaned (fine), draining, or mapped by a key of this call.
      // Draining: deleted, or orphaned, under a read lease: a reader may still be reading it.
      if (it->second == kOverlayDraining) return refuse(StateErrc::conflict, " is draining");
      if (it->second != kOrphaned && it->second != l) other = s.locals[it->second].key.name;
    } else {
      const std::uint32_t owner = r.owner[page];
      if (owner == kFree) return refuse(StateErrc::stale, " is not allocated");
      // An orphaned page is owned by nobody, so confirming it takes nothing from any key: allowed,
      // as vLLM allows it. Refusing it would not protect any data and would break a worker that
      // re-confirms a page its key moved away from.
      if (owner < kKeyIdLimit && owner != local.id && !keys[owner].live) {
        return refuse(StateErrc::conflict, " is draining");
      }
      if (owner < kKeyIdLimit && owner != local.id) other = keys[owner].name.view();
      if (owner == kAllocated && r.allocated_for[page] != page_tag(local.key.name)) {
        return refuse(StateErrc::conflict, " was allocated for another key");
      }
    }
    if (other) return refuse(StateErrc::conflict, " is mapped to key " + std::string(*other));
    if (local.page != kNone && local.page != page) {
      // A reader that looked a leased key up may be reading the page it leaves: that page drains.
      const bool leased = local.id != kNone && keys[local.id].where == Where::leased;
      s.page_overlay.insert_or_assign(local.page, leased ? kOverlayDraining : kOrphaned);
    }
    s.page_overlay.insert_or_assign(page, l);
    local.page = page;
  }
  return boost::outcome_v2::success();
}

// confirm_write's releases, judged after its confirmations (the scratch's overlay holds the pages
// they touch). A bare release of a page allocated again after a reclaim is refused: it may be the
// late release of the writer whose allocation was reclaimed, and would free the new holder's page.
StateResult<void> MetadataState::Impl::check_releases(const RankData& r, const Scratch& s,
                                                      std::span<const Page> pages,
                                                      std::span<const ReleaseKey> keyed) const {
  for (std::size_t j = 0; j < pages.size(); ++j) {
    if (!r.in_range(pages[j])) {
      return make_error(StateErrc::invalid_argument, out_of_range("pages_to_release", j, pages[j], r), r.rank, j);
    }
  }
  if (!r.reclaimed && keyed.empty()) return boost::outcome_v2::success();  // vLLM's releases, no reclaim yet
  std::size_t next = 0;  // the next keyed release
  for (std::size_t j = 0; j < pages.size(); ++j) {
    if (next < keyed.size() && keyed[next].index == j) {
      ++next;
      continue;
    }
    const auto page = static_cast<std::uint32_t>(pages[j]);
    if (r.after_reclaim(page) && r.owner[page] == kAllocated && !s.page_overlay.contains(page)) {
      return make_error(StateErrc::conflict,
                        internal::indexed("pages_to_release", j) + ": page " + std::to_string(page) +
                            " was reclaimed by the allocation TTL and allocated again since on rank " +
                            std::to_string(r.rank) +
                            ": a bare release cannot be told from the late release of the writer whose "
                            "allocation was reclaimed (release it as [key, page])",
                        r.rank, j);
    }
  }
  if (next != keyed.size()) {
    return make_error(StateErrc::invalid_argument,
                      "release_keys: indexes must be ascending and name entries of pages_to_release", r.rank);
  }
  return boost::outcome_v2::success();
}

// The validated confirmations, in order; a page a leased key leaves drains (s.drains).
ConfirmOutcome MetadataState::Impl::apply_confirmations(RankData& r, std::uint32_t slot,
                                                       std::span<const Confirmation> confirmations, Scratch& s) {
  ConfirmOutcome outcome;
  const bool record = static_cast<bool>(sink);
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    LocalKey& local = s.locals[s.local_of[i]];
    // A new key counts the ranks initialized now (a scheduler never creates one, so workers only).
    const std::uint32_t created_tp = local.id == kNone ? static_cast<std::uint32_t>(rank_slots.size()) : 0;
    const auto page = static_cast<std::uint32_t>(confirmations[i].page);
    std::uint32_t left = kNone;  // the page a leased key leaves, which drains
    if (lease_ms > 0 && created_tp == 0 && keys[local.id].where == Where::leased) {
      const RankPage* rp = keys.on(keys[local.id], slot);
      if (rp != nullptr && rp->page != page) left = rp->page;
    }
    local.id = map_confirmation(r, slot, local.id, local.key, page, created_tp);
    if (left != kNone) s.drains.emplace_back(left, drain_orphan(r, slot, left, local.id));
    if (record) s.confirmed.push_back(ConfirmedItem{confirmations[i].key, page, created_tp});
    ++outcome.confirmed;
  }
  return outcome;
}

void MetadataState::Impl::record_confirm(Rank rank, const Scratch& s, const ConfirmOutcome& outcome) {
  Change change;
  change.kind = ChangeKind::confirmed;
  change.rank = rank;
  change.confirmed = s.confirmed;
  change.released = s.released;
  change.kept_mapped = static_cast<std::uint32_t>(outcome.kept_mapped);
  emit(change);
  for (const auto& [page, id] : s.drains) {
    Change drain;
    drain.kind = ChangeKind::page_draining;
    drain.rank = rank;
    drain.page = page;
    drain.key_id = id;
    emit(drain);
  }
}

namespace {

constexpr auto kName = [](std::string_view k) { return k; };

}  // namespace

template <class Key>
std::vector<bool> MetadataState::exists_of(NamespaceRef ns, std::span<const Key> keys) const {
  const auto& hashed = hash_all(scratch(), keys, kName);
  std::vector<bool> result(hashed.size(), false);
  Impl::ReadAccess access(*core_, ns);
  if (access.space()) access.space()->batch_exists(hashed, result);
  return result;
}

std::vector<bool> MetadataState::batch_exists(NamespaceRef ns, std::span<const std::string> keys) const {
  return exists_of(ns, keys);
}

std::vector<bool> MetadataState::batch_exists(NamespaceRef ns, std::span<const std::string_view> keys) const {
  return exists_of(ns, keys);
}

template <class Key>
StateResult<std::vector<std::optional<Page>>> MetadataState::locations_of(NamespaceRef ns, Rank rank,
                                                                          std::span<const Key> keys) const {
  const auto& hashed = hash_all(scratch(), keys, kName);
  std::vector<std::optional<Page>> result(hashed.size());
  Impl::ReadAccess access(*core_, ns);
  if (!access.space()) return not_initialized(rank);
  if (auto found = access.space()->get_locations(rank, hashed, result); !found) return std::move(found).error();
  return result;
}

StateResult<std::vector<std::optional<Page>>> MetadataState::get_locations(
    NamespaceRef ns, Rank rank, std::span<const std::string> keys) const {
  return locations_of(ns, rank, keys);
}

StateResult<std::vector<std::optional<Page>>> MetadataState::get_locations(
    NamespaceRef ns, Rank rank, std::span<const std::string_view> keys) const {
  return locations_of(ns, rank, keys);
}

template <class Key>
std::vector<bool> MetadataState::delete_of(NamespaceRef ns, std::span<const Key> keys) {
  Scratch& s = scratch();
  const auto& hashed = hash_all(s, keys, kName);
  std::unique_lock lock(core_->mutex);
  Impl* space = core_->find(ns);
  return space ? space->delete_keys(hashed, s) : std::vector<bool>(keys.size(), false);
}

std::vector<bool> MetadataState::delete_keys(NamespaceRef ns, std::span<const std::string> keys) {
  return delete_of(ns, keys);
}

std::vector<bool> MetadataState::delete_keys(NamespaceRef ns, std::span<const std::string_view> keys) {
  return delete_of(ns, keys);
}

void MetadataState::clear(NamespaceRef ns) {
  // Swapped out under the lock, freed after it: releasing gigabytes must not stall other callers.
  Impl old(*core_, 0, {});  // only swapped with: never registered, never recorded through
  std::unique_lock lock(core_->mutex);
  if (Impl* space = core_->find(ns)) space->clear_into(old);  // a namespace that does not exist: nothing
}

DropOutcome MetadataState::drop_rank(NamespaceRef ns, Rank rank) {
  std::unique_ptr<RankData> gone;  // freed after the lock: megabytes of page arrays
  DropOutcome outcome;
  {
    Impl::RankAccess access(*core_, ns, rank);
    Impl* space = access.space();
    if (!space) return outcome;
    outcome = space->drop(access.slot(), gone);
    Change change;
    change.kind = ChangeKind::rank_dropped;
    change.rank = rank;
    space->emit(change);
  }
  return outcome;
}

void MetadataState::restarted() {
  std::unique_lock lock(core_->mutex);
  for (const auto& [id, space] : core_->spaces) {
    space->restart_leases();
  }
}

void MetadataState::hold_clock(bool held) {
  std::unique_lock lock(core_->mutex);
  core_->clock_held = held;
}

void MetadataState::set_change_sink(ChangeSink sink) {
  std::unique_lock lock(core_->mutex);
  core_->sink = std::move(sink);
}

std::uint64_t MetadataState::seq() const {
  // emit() numbers under emit_mutex; replay, import and the clock's record under the core's
  // exclusive lock: reading needs both.
  std::shared_lock lock(core_->mutex);
  std::lock_guard numbering(core_->emit_mutex);
  return core_->seq;
}

}  // namespace hf3fs_meta
