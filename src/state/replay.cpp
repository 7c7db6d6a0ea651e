// MetadataState::apply: replays a change record. Each kind is checked against the state first (the
// page taken is the pool's front, a confirmed page is allocated or orphaned...), so that a record
// that does not belong after this state is refused, and then applied through the same effects
// (effects.cpp) the live call applied: replay decides nothing.
#include <algorithm>
#include <mutex>

#include "state/state_impl.hpp"

namespace hf3fs_meta {
namespace {

StateError unfit(const Change& change, const std::string& why) {
  return make_error(StateErrc::invalid_argument,
                    "change " + std::to_string(change.seq) + " does not fit the state: " + why, change.rank);
}

std::string rank_text(const Change& change) { return "rank " + std::to_string(change.rank); }

}  // namespace

// The namespaces' own kinds are the core's; every other kind acts in the namespace it names.
StateResult<void> MetadataState::apply(const Change& change, bool to_sink) {
  std::unique_ptr<Impl> gone;  // a dropped namespace, freed after the lock
  std::unique_lock lock(core_->mutex);
  if (change.seq != core_->seq + 1) {
    return unfit(change, "expected change " + std::to_string(core_->seq + 1));
  }
  StateResult<void> applied = boost::outcome_v2::success();
  Impl* space = core_->space(change.ns);
  if (change.kind == ChangeKind::namespace_created) {
    applied = core_->apply_namespace_created(change);
  } else if (!space) {
    applied = unfit(change, "it names namespace " + std::to_string(change.ns) + ", which does not exist");
  } else if (change.kind == ChangeKind::namespace_dropped) {
    if (change.ns == 0) {
      applied = unfit(change, "the default namespace cannot be dropped");
    } else {
      core_->remove_space(*space, gone);
    }
  } else {
    applied = space->apply_change(change);
  }
  if (!applied) return applied;
  core_->seq = change.seq;
  if (to_sink && core_->sink) core_->sink(change);
  return applied;
}

StateResult<void> MetadataState::Core::apply_namespace_created(const Change& change) {
  const std::string name(change.ns_name);
  if (change.ns != next_id()) {
    return unfit(change, "namespace id " + std::to_string(change.ns) + " is not the next one (" +
                             std::to_string(next_id()) + ")");
  }
  if (name.empty() || name == kDefaultNamespace || find(NamespaceRef{name})) {
    return unfit(change, "namespace " + name + " exists");
  }
  if (auto limit = check_new_space(name, 0); !limit) return unfit(change, limit.error().message);
  add_space(change.ns, name);
  return boost::outcome_v2::success();
}

// For a replayed batch: each lookup waits on three misses in turn (the key's slot, its record, its
// name and page list). Each level's misses are started for every key of the batch before the next
// level needs them, so that they overlap. Only loads: which id a tag leads to is checked later.
void MetadataState::Impl::prefetch_records(const std::vector<HashedKey>& hashed) const noexcept {
  prefetch(hashed);
  auto first_with_tag = [&](const HashedKey& key) {
    return keys.index.find(key.short_hash(), [](std::uint32_t) { return true; });
  };
  for (const HashedKey& key : hashed) {
    if (const std::uint32_t id = first_with_tag(key); id != kNone) internal::touch(&keys[id].hash);
  }
  for (const HashedKey& key : hashed) {
    const std::uint32_t id = first_with_tag(key);
    if (id == kNone) continue;
    const KeyRecord& k = keys[id];
    internal::touch(k.name.data());
    if (!k.pages.empty()) internal::touch(keys.pages(k).data());
  }
}

StateResult<void> MetadataState::Impl::apply_change(const Change& change) {
  switch (change.kind) {
    case ChangeKind::cleared: {
      Impl empty(core, 0, {});
      swap_contents(empty);
      ++epoch;
      return boost::outcome_v2::success();
    }
    case ChangeKind::rank_created: return apply_rank_created(change);
    case ChangeKind::clock:
      now = change.clock_ms;  // a replay's clock may go back: it is the original's
      recorded_now = change.clock_ms;
      return boost::outcome_v2::success();
    default: break;
  }
  // Records written without the clock (no TTL then) time what they create as now.
  if (ttl_ms > 0 && !recorded_now) now = std::max(now, read_clock());
  if (change.kind == ChangeKind::keys_deleted || change.kind == ChangeKind::keys_removed) return apply_removal(change);
  if (change.kind == ChangeKind::key_drained) return apply_key_drained(change);
  const std::uint32_t slot = slot_of(change.rank);
  if (slot == kNone) return unfit(change, rank_text(change) + " does not exist");
  if (change.kind == ChangeKind::rank_dropped) {
    std::unique_ptr<RankData> gone;
    drop(slot, gone);
    return boost::outcome_v2::success();
  }
  return apply_on_rank(change, slot);
}

StateResult<void> MetadataState::Impl::apply_rank_created(const Change& change) {
  if (slot_of(change.rank) != kNone) return unfit(change, rank_text(change) + " exists");
  if (change.num_pages == 0) return unfit(change, "num_pages 0");
  if (auto limit = check_max_pages(change.num_pages); !limit) return unfit(change, limit.error().message);
  if (auto limit = check_room_for(change.rank, change.num_pages); !limit) return unfit(change, limit.error().message);
  add_rank(std::make_unique<RankData>(change.rank, change.num_pages, lru, ttl_ms > 0));
  return boost::outcome_v2::success();
}

StateResult<void> MetadataState::Impl::apply_removal(const Change& change) {
  // keys_deleted: as the record was made, nothing drains (no read lease then).
  const bool deleted = change.kind == ChangeKind::keys_deleted;
  if (!deleted && change.removal != Removal::evicted && change.removal != Removal::reclaimed &&
      change.removal != Removal::deleted) {
    return unfit(change, "unknown removal " + std::to_string(static_cast<int>(change.removal)));
  }
  std::vector<std::uint32_t> ids;
  ids.reserve(change.deleted.size());
  for (const std::string_view key : change.deleted) {
    const std::uint32_t id = id_of(HashedKey{key});
    if (id == kNone) return unfit(change, "key " + std::string(key) + " does not exist");
    ids.push_back(id);
  }
  // A key named twice would be removed twice: sorted, so that a batch of a million keys is not
  // checked pairwise.
  std::vector<std::uint32_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return unfit(change, "key " + keys[*twice].name.str() + " is named twice");
  }
  for (const std::uint32_t id : ids) {
    remove_key_as(id, deleted ? Removal::deleted : change.removal, !deleted && change.draining);
  }
  return boost::outcome_v2::success();
}

StateResult<void> MetadataState::Impl::apply_key_drained(const Change& change) {
  const std::uint32_t id = change.key_id;
  if (id >= keys.size() || keys[id].live || keys[id].where != Where::leased) {
    return unfit(change, "key id " + std::to_string(id) + " is not draining");
  }
  end_lease(id, false);
  return boost::outcome_v2::success();
}

StateResult<void> MetadataState::Impl::apply_on_rank(const Change& change, std::uint32_t slot) {
  RankData& r = *ranks[slot];
  switch (change.kind) {
    case ChangeKind::page_reclaimed: return apply_page_reclaimed(change, r);
    case ChangeKind::page_draining: return apply_page_draining(change, r, slot);
    case ChangeKind::allocated: return apply_allocated(change, r, slot);
    case ChangeKind::confirmed: return apply_confirmed(change, r, slot);
    default: return unfit(change, "unknown kind");
  }
}

StateResult<void> MetadataState::Impl::apply_page_reclaimed(const Change& change, RankData& r) {
  const std::uint32_t marker = change.was == PageState::allocated  ? kAllocated
                               : change.was == PageState::orphaned ? kOrphaned
                                                                   : kFree;
  if (change.page >= r.num_pages || marker == kFree || r.owner[change.page] != marker) {
    return unfit(change, "page " + std::to_string(change.page) + " of " + rank_text(change) + " cannot be reclaimed");
  }
  reclaim_page(r, change.page);
  return boost::outcome_v2::success();
}

StateResult<void> MetadataState::Impl::apply_page_draining(const Change& change, RankData& r, std::uint32_t slot) {
  if (change.page >= r.num_pages || r.owner[change.page] != kOrphaned) {
    return unfit(change, "page " + std::to_string(change.page) + " of " + rank_text(change) + " is not orphaned");
  }
  if (change.key_id != keys.next_id()) {
    return unfit(change, "key id " + std::to_string(change.key_id) + " is not the next one (" +
                             std::to_string(keys.next_id()) + ")");
  }
  drain_orphan(r, slot, change.page, kNone);
  return boost::outcome_v2::success();
}

// Checked before anything is applied, so that a record that does not fit changes nothing.
StateResult<void> MetadataState::Impl::apply_allocated(const Change& change, RankData& r, std::uint32_t slot) {
  if (change.allocated.size() > r.free_count) {
    return unfit(change, "more pages taken than " + rank_text(change) + " has free");
  }
  for (std::size_t i = 0; i < change.allocated.size(); ++i) {
    const AllocatedItem& item = change.allocated[i];
    if (r.pool_at(i) != item.taken) {
      return unfit(change, "page " + std::to_string(item.taken) + " is not next in the pool of " + rank_text(change));
    }
    if (item.page != item.taken && complete_page(HashedKey{item.key}, slot) != item.page) {
      return unfit(change, "key " + std::string(item.key) + " has no page " + std::to_string(item.page));
    }
  }
  for (const AllocatedItem& item : change.allocated) {
    const bool keep = item.page == item.taken;
    take_page(r, slot, keep ? page_tag(item.key) : 0, keep);
  }
  return boost::outcome_v2::success();
}

// Confirmations may depend on each other (a key moving twice), so they are judged as applied; the
// only state they can leave half-done is a state the journal no longer describes, which stops
// recovery anyway.
StateResult<void> MetadataState::Impl::apply_confirmed(const Change& change, RankData& r, std::uint32_t slot) {
  std::vector<HashedKey>& hashed = scratch().hashed;
  for (const ConfirmedItem& item : change.confirmed) hashed.emplace_back(item.key);
  prefetch_records(hashed);
  for (std::size_t i = 0; i < change.confirmed.size(); ++i) {
    const ConfirmedItem& item = change.confirmed[i];
    if (item.page >= r.num_pages) return unfit(change, "page " + std::to_string(item.page) + " out of range");
    const HashedKey& key = hashed[i];
    const std::uint32_t id = id_of(key);
    if ((id == kNone) != (item.new_key_tp_world_size != 0)) {
      return unfit(change, "key " + std::string(item.key) + (id == kNone ? " does not exist" : " exists"));
    }
    if (id == kNone && keys.ids_in_use() >= kKeyIdLimit) return unfit(change, "too many keys");
    const std::uint32_t owner = r.owner[item.page];
    if (owner != kAllocated && owner != kOrphaned && (id == kNone || owner != id)) {
      return unfit(change, "page " + std::to_string(item.page) + " of " + rank_text(change) + " cannot be confirmed");
    }
    map_confirmation(r, slot, id, key, item.page, item.new_key_tp_world_size);
  }
  for (const std::uint32_t page : change.released) {
    if (page >= r.num_pages || (r.owner[page] != kAllocated && r.owner[page] != kOrphaned)) {
      return unfit(change, "page " + std::to_string(page) + " of " + rank_text(change) + " cannot be released");
    }
    r.to_pool(page, RankData::of_marker(r.owner[page]));
  }
  r.kept_on_release += change.kept_mapped;
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta
