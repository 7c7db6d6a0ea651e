// MetadataState's image: export_image() (the state at one instant, for a snapshot) and
// import_image() (the state replaced by an image, after checking that it is consistent).
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <shared_mutex>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "state/state_impl.hpp"

namespace hf3fs_meta {
namespace {

constexpr std::uint32_t kKeysPerChunk = 4096;  // export: a writer waits for one chunk of names at most

StateError bad_image(const std::string& why) {
  return make_error(StateErrc::invalid_argument, "inconsistent image: " + why, 0);
}

// A rank's page table, pool, counts and marks into its image, at the instant (under the lock). The
// pages' key hashes are copied whole into `p.hashes`, to be picked out after the instant.
void copy_rank(const RankData& r, PreparedRank& p, RankImage& ri) {
  p.num_pages = r.num_pages;
  if (r.allocated != 0) p.hashes.resize(r.num_pages);
  ri.rank = r.rank;
  ri.kept_on_release = r.kept_on_release;
  ri.reclaimed = r.reclaim_marks();
  ri.owner.resize(r.num_pages);
  std::copy_n(r.owner.data(), r.num_pages, ri.owner.begin());
  if (r.allocated != 0) std::memcpy(p.hashes.data(), r.allocated_for.get(), std::size_t{r.num_pages} * 4);
  ri.allocated_for.resize(r.allocated);  // filled from p.hashes after the instant
  ri.free_pool.resize(r.free_count);
  const std::uint32_t first = std::min(r.free_count, r.num_pages - r.head);
  std::copy_n(r.ring.get() + r.head, first, ri.free_pool.begin());
  std::copy_n(r.ring.get(), r.free_count - first, ri.free_pool.begin() + first);
}

// The allocated pages' key hashes, in page order, out of the copies.
void fill_allocated_for(SpaceImage& image, const std::vector<PreparedRank>& prepared,
                        const std::vector<std::uint32_t>& slot_of_image) {
  for (std::size_t i = 0; i < image.ranks.size(); ++i) {
    RankImage& ri = image.ranks[i];
    const std::vector<std::uint32_t>& hashes = prepared[slot_of_image[i]].hashes;
    std::size_t filled = 0;
    for (std::uint32_t page = 0; page < ri.owner.size() && filled < ri.allocated_for.size(); ++page) {
      if (ri.owner[page] == kAllocated) ri.allocated_for[filled++] = hashes[page];
    }
  }
}

// import: the ids the image says are free and draining, checked.
StateResult<void> mark_ids(const SpaceImage& image, std::vector<bool>& free_id, std::vector<bool>& draining) {
  const std::size_t key_count = image.keys.size();
  free_id.assign(key_count, false);
  for (const std::uint32_t id : image.free_ids) {
    if (id >= key_count || free_id[id]) return bad_image("free key id " + std::to_string(id));
    free_id[id] = true;
  }
  draining.assign(key_count, false);
  for (const std::uint32_t id : image.draining_ids) {
    if (id >= key_count || free_id[id] || draining[id]) return bad_image("draining key id " + std::to_string(id));
    draining[id] = true;
  }
  return boost::outcome_v2::success();
}

}  // namespace

// One namespace's part of an export: its image, its ranks' copies, and what the instant saw of it.
struct MetadataState::Core::ExportedSpace {
  std::uint32_t id = 0;
  SpaceImage* image = nullptr;
  std::vector<PreparedRank> prepared;        // by slot
  std::vector<std::uint32_t> slot_of_image;  // the slot each image rank was copied from
  std::uint64_t epoch = 0;
};

// Writers wait only while the page tables are copied, into memory sized and touched before the
// instant (a fresh page's first touch is a fault, costly in a VM); the pages' key hashes are picked
// out of their copy afterwards. The names are copied after the instant, a chunk at a time, unless a
// key id was freed meanwhile (its name may be another key's by then), its namespace went or the
// state was imported: then the export starts over; the third attempt copies the names under the
// lock too, so that a state freeing ids all the time cannot starve it. Every namespace is copied at
// the one instant.
StateImage MetadataState::export_image(const std::function<void(std::uint64_t seq)>& at_instant) const {
  for (int attempt = 1;; ++attempt) {
    const bool names_under_lock = attempt >= 3;
    StateImage image;
    std::vector<Core::ExportedSpace> parts;
    core_->prepare_export(image, parts);
    const std::uint64_t imports = core_->copy_at_instant(image, parts, names_under_lock, at_instant);
    for (Core::ExportedSpace& part : parts) fill_allocated_for(*part.image, part.prepared, part.slot_of_image);
    if (names_under_lock || core_->copy_names_after(parts, imports)) return image;
  }
}

// Sizes the image's arrays, under the shared lock, and touches them outside it. A namespace created
// after this is sized at the instant.
void MetadataState::Core::prepare_export(StateImage& image, std::vector<ExportedSpace>& parts) const {
  std::vector<std::uint32_t> key_counts;
  {
    SharedAll lock(*this);
    image.namespaces.reserve(by_name.size());
    parts.reserve(by_name.size() + 1);
    key_counts.reserve(by_name.size() + 1);
    for (const auto& [id, space] : spaces) {
      ExportedSpace& part = parts.emplace_back();
      part.id = space->id;
      if (space->id == 0) {
        part.image = &image;
      } else {
        NamespaceImage& n = image.namespaces.emplace_back();
        n.id = space->id;
        n.name = space->name;
        part.image = &n.space;
      }
      key_counts.push_back(space->size_export(part.prepared));
    }
  }
  for (std::size_t i = 0; i < parts.size(); ++i) Impl::touch_export(*parts[i].image, parts[i].prepared, key_counts[i]);
}

// The instant, under the exclusive lock: every namespace's ranks, ids and lifecycle; the names too
// with `names_under_lock`. Returns the import count of the instant.
std::uint64_t MetadataState::Core::copy_at_instant(StateImage& image, std::vector<ExportedSpace>& parts,
                                                   bool names_under_lock,
                                                   const std::function<void(std::uint64_t)>& at_instant) const {
  std::unique_lock lock(mutex);
  image.seq = seq;
  image.next_namespace_id = next_id();
  if (ttl_ms > 0) image.clock_ms = recorded_now;
  // The namespaces of the instant, in id order, as prepared where they were (dropped ones go).
  std::vector<ExportedSpace> current;
  std::vector<NamespaceImage> named;
  current.reserve(parts.size());
  std::size_t p = 0;
  for (const auto& [id, space] : spaces) {
    while (p < parts.size() && parts[p].id < space->id) ++p;
    if (p < parts.size() && parts[p].id == space->id) {
      current.push_back(std::move(parts[p]));
    } else {
      current.emplace_back().id = space->id;
    }
  }
  for (const ExportedSpace& part : current) {
    if (part.id == 0) continue;
    NamespaceImage& n = named.emplace_back();
    n.id = part.id;
    n.name = space(part.id)->name;
    if (part.image) n.space = std::move(*part.image);
  }
  image.namespaces = std::move(named);
  std::size_t next_named = 0;
  for (ExportedSpace& part : current) {
    part.image = part.id == 0 ? static_cast<SpaceImage*>(&image) : &image.namespaces[next_named++].space;
    part.epoch = space(part.id)->copy_at_instant(*part.image, part.prepared, part.slot_of_image, names_under_lock);
  }
  parts = std::move(current);
  if (at_instant) at_instant(image.seq);
  return imports;
}

// After the instant, a chunk at a time under the shared lock: false if, since the instant, a key id
// was freed in a namespace, a namespace was dropped or the state was imported (the export starts over).
// An id free at the instant is left empty: a key created since may have taken it (taking a free id
// bumps no epoch), and that name is not the instant's (import_image refuses a free id with a name:
// "free key id N has a key").
bool MetadataState::Core::copy_names_after(std::vector<ExportedSpace>& parts, std::uint64_t instant_imports) const {
  std::vector<bool> free_at_instant;
  for (ExportedSpace& part : parts) {
    const auto key_count = static_cast<std::uint32_t>(part.image->keys.size());
    free_at_instant.assign(key_count, false);
    for (const std::uint32_t id : part.image->free_ids) {
      if (id < key_count) free_at_instant[id] = true;
    }
    for (std::uint32_t begin = 0; begin < key_count; begin += kKeysPerChunk) {
      std::shared_lock lock(mutex);
      const Impl* space = this->space(part.id);
      if (!space) return false;
      std::shared_lock names(space->mutex);
      if (imports != instant_imports || space->epoch != part.epoch) return false;
      space->copy_names(*part.image, begin, std::min(key_count, begin + kKeysPerChunk), &free_at_instant);
    }
  }
  return true;
}

// One namespace's ranks' copies sized (under the shared lock); returns its key count.
std::uint32_t MetadataState::Impl::size_export(std::vector<PreparedRank>& prepared) const {
  prepared.resize(ranks.size());
  for (std::size_t slot = 0; slot < ranks.size(); ++slot) {
    if (!ranks[slot]) continue;
    prepared[slot].num_pages = ranks[slot]->num_pages;
    if (ranks[slot]->allocated != 0) prepared[slot].hashes.resize(prepared[slot].num_pages);
  }
  return static_cast<std::uint32_t>(keys.size());
}

// One namespace's image arrays sized and touched, outside the lock.
void MetadataState::Impl::touch_export(SpaceImage& image, const std::vector<PreparedRank>& prepared,
                                       std::uint32_t key_count) {
  image.ranks.reserve(prepared.size());
  image.keys.reserve(key_count + key_count / 8 + 1024);  // room for the keys created until the instant
  image.keys.resize(key_count);
  for (const PreparedRank& p : prepared) {
    if (p.num_pages == 0) continue;
    RankImage& ri = image.ranks.emplace_back();
    ri.owner.resize(p.num_pages);
    ri.free_pool.resize(p.num_pages);  // shrunk to the pool's size at the instant (no reallocation)
  }
}

// One namespace at the instant, under the exclusive lock: everything but the names (unless
// `names_under_lock`). Returns its epoch of the instant.
std::uint64_t MetadataState::Impl::copy_at_instant(SpaceImage& image, std::vector<PreparedRank>& prepared,
                                                   std::vector<std::uint32_t>& slot_of_image,
                                                   bool names_under_lock) const {
  std::size_t next = 0;  // the image rank to fill
  std::vector<std::uint32_t> index_of_slot(ranks.size(), kNone);  // for the lifecycle's part
  slot_of_image.reserve(ranks.size());
  for (std::size_t slot = 0; slot < ranks.size(); ++slot) {
    const RankData* r = ranks[slot].get();
    if (!r) continue;
    // A rank created or dropped since the sizing (rare) is sized here, under the lock.
    if (slot >= prepared.size()) prepared.resize(slot + 1);
    if (next == image.ranks.size()) image.ranks.emplace_back();
    slot_of_image.push_back(static_cast<std::uint32_t>(slot));
    index_of_slot[slot] = static_cast<std::uint32_t>(next);
    copy_rank(*r, prepared[slot], image.ranks[next++]);
  }
  image.ranks.resize(next);
  image.free_ids = keys.free_ids;
  export_lifecycle(index_of_slot, image);
  image.keys.resize(keys.size());
  if (names_under_lock) copy_names(image, 0, static_cast<std::uint32_t>(image.keys.size()), nullptr);
  return epoch;
}

// `skip`: ids left empty (free at the instant).
void MetadataState::Impl::copy_names(SpaceImage& image, std::uint32_t begin, std::uint32_t end,
                                     const std::vector<bool>* skip) const {
  for (std::uint32_t id = begin; id < end; ++id) {
    if (skip && (*skip)[id]) continue;
    const KeyRecord& k = keys[id];
    image.keys[id] = KeyImage{k.name.str(), k.tp_world_size};
  }
}

// The lifecycle's part of a namespace's image (SpaceImage): what is current of the timed events, in their
// order, and the draining keys. Under the lock.
void MetadataState::Impl::export_lifecycle(const std::vector<std::uint32_t>& index_of_slot, SpaceImage& image) const {
  for (std::uint32_t id = life.leases.head; id != kNone; id = keys[id].lease_next) {
    if (!keys[id].live) image.draining_ids.push_back(id);
  }
  std::sort(image.draining_ids.begin(), image.draining_ids.end());
  for (const TimedPage& e : life.timed_pages) {
    const RankData* r = ranks[e.slot].get();
    if (r && r->owner[e.page] == e.marker && r->stamp[e.page] == e.stamp) {
      image.timed_pages.push_back(TimedPageImage{e.at, index_of_slot[e.slot], e.page});
    }
  }
  for (const TimedKey& e : life.timed_keys) {
    const KeyRecord& k = keys[e.id];
    if (k.live && !k.complete() && k.incomplete_stamp == e.stamp) image.timed_keys.push_back(TimedKeyImage{e.at, e.id});
  }
}

// Built on a core of its own (the live one is left alone until every namespace is checked), then
// swapped in under the lock: the default namespace keeps its object, the named ones are new.
StateResult<void> MetadataState::import_image(StateImage image) {
  Core next(core_->options);
  // The clock: the one the image's last change was recorded at, or, without one, now.
  if (image.clock_ms) {
    next.now = *image.clock_ms;
    next.recorded_now = image.clock_ms;
  } else if (next.lifecycle) {
    next.now = next.default_space->read_clock();
  }
  if (auto imported = next.default_space->import_space(image); !imported) return imported;
  if (auto imported = next.import_namespaces(image); !imported) return imported;
  // The live core's namespaces, built before the lock (nothing of the core is touched).
  decltype(Core::spaces) fresh;
  decltype(Core::by_name) by_name;
  by_name.reserve(next.by_name.size());
  for (const auto& [id, space] : next.spaces) {
    if (id == 0) continue;
    auto& slot = fresh[id];
    slot = std::make_unique<Impl>(*core_, id, space->name);
    by_name.emplace(space->name, slot.get());
  }
  {
    std::unique_lock lock(core_->mutex);
    for (const auto& [id, space] : next.spaces) {
      // `next` takes the old contents of the default namespace, freed after the lock.
      (id == 0 ? *core_->default_space : *fresh[id]).swap_contents(*space);
    }
    fresh[0] = std::move(core_->spaces[0]);
    core_->spaces.swap(fresh);  // `fresh` takes the old named namespaces, freed after the lock
    core_->next_space_id = next.next_space_id;
    core_->by_name.swap(by_name);
    core_->now = next.now;
    core_->recorded_now = next.recorded_now;
    core_->stamps = std::max(core_->stamps, next.stamps);  // stamps stay unique
    ++core_->default_space->epoch;
    ++core_->imports;
    core_->seq = image.seq;
  }
  return boost::outcome_v2::success();
}

// The image's named namespaces, checked (ids ascending below next_namespace_id, names unique and
// not the default's, within --max-namespaces), each into a new namespace of this core.
StateResult<void> MetadataState::Core::import_namespaces(StateImage& image) {
  if (image.next_namespace_id == 0) return bad_image("next namespace id 0");
  if (static_cast<std::int64_t>(image.namespaces.size()) + 1 > options.max_namespaces) {
    return make_error(StateErrc::invalid_argument,
                      "the image is beyond this state's limits: " + std::to_string(image.namespaces.size() + 1) +
                          " namespaces, above the maximum " + std::to_string(options.max_namespaces),
                      0);
  }
  std::uint32_t last = 0;
  for (NamespaceImage& n : image.namespaces) {
    if (n.id <= last || n.id >= image.next_namespace_id) return bad_image("namespace id " + std::to_string(n.id));
    if (!valid_namespace_name(n.name) || n.name == kDefaultNamespace || find(NamespaceRef{n.name})) {
      return bad_image("namespace " + n.name + " (id " + std::to_string(n.id) + ")");
    }
    last = n.id;
    if (auto imported = add_space(n.id, n.name).import_space(n.space); !imported) {
      return make_error(StateErrc::invalid_argument, "namespace " + n.name + ": " + imported.error().message,
                        imported.error().rank);
    }
  }
  next_space_id = std::max(next_space_id, image.next_namespace_id);
  return boost::outcome_v2::success();
}

// One namespace's image into this (empty) namespace; the core's clock is set.
StateResult<void> MetadataState::Impl::import_space(SpaceImage& image) {
  if (image.keys.size() > kKeyIdLimit) return bad_image("too many keys");
  std::vector<bool> free_id;
  std::vector<bool> draining;
  if (auto marked = mark_ids(image, free_id, draining); !marked) return marked;
  const std::size_t live = import_keys(image, free_id, draining);
#if defined(__GLIBC__)
  // The image's names were heap blocks, freed one by one as the records took them: tens of megabytes
  // of resident free heap, which the ranks' arrays made next would take (a free pool and the
  // allocated pages' hashes, 8 bytes a page, mostly never written), holding them resident (26 MB more
  // after recovering 1,000,000 keys of 32 bytes on 8 ranks of 1,000,000 pages). Handed back first,
  // those arrays' pages stay unmapped until written, as on a fresh heap. Per namespace, before its
  // ranks' arrays; a namespace without keys freed no names.
  if (!image.keys.empty()) malloc_trim(0);
#endif
  if (auto imported = import_ranks(image); !imported) return imported;
  if (auto imported = import_pages(image, free_id, draining); !imported) return imported;
  if (auto imported = import_pools(image); !imported) return imported;
  if (auto entered = enter_keys(free_id, draining, live); !entered) return entered;
  keys.free_ids = std::move(image.free_ids);
  return import_timed(image, draining);
}

// The image's keys into records (names moved out of the image as they go). Returns the keys to
// enter in the key table (neither free nor draining).
std::size_t MetadataState::Impl::import_keys(SpaceImage& image, const std::vector<bool>& free_id,
                                             const std::vector<bool>& draining) {
  const std::size_t rank_count = image.ranks.size();
  constexpr std::size_t kReservedPagesLimit = 64;  // a TP group larger than this is not expected
  std::size_t live = 0;
  keys.records.reserve(image.keys.size());
  // A key has at most one page per rank and needs tp_world_size: one block, not one per doubling, and
  // all the blocks carved from one region. Bounded besides: the image is not checked yet, and a
  // damaged one must not reserve gigabytes.
  const auto reserved = [&](const KeyImage& k) {
    return static_cast<std::uint32_t>(std::min<std::size_t>({k.tp_world_size, rank_count, kReservedPagesLimit}));
  };
  std::size_t entries = 0;
  for (const KeyImage& k : image.keys) {
    if (reserved(k) > 1) entries += std::bit_ceil(reserved(k));
  }
  keys.page_blocks.reserve_entries(entries);
  for (std::uint32_t id = 0; id < image.keys.size(); ++id) {
    KeyImage& k = image.keys[id];
    KeyRecord& record = keys.records.emplace_back();
    record.name.assign(k.name);
    std::string().swap(k.name);  // held twice otherwise
    record.tp_world_size = k.tp_world_size;
    if (!free_id[id]) {
      record.hash = HashedKey(record.name.view()).hash;  // removing the key erases it by this hash
      if (!draining[id]) ++live;
    }
    keys.page_blocks.reserve(record.pages, reserved(k));
  }
  return live;
}

// The ranks, their page tables moved in; their pools are written by import_pools.
StateResult<void> MetadataState::Impl::import_ranks(SpaceImage& image) {
  for (auto& ri : image.ranks) {
    const std::string rank_text = "rank " + std::to_string(ri.rank);
    if (slot_of(ri.rank) != kNone) return bad_image(rank_text + " twice");
    if (ri.owner.empty() || ri.owner.size() > static_cast<std::size_t>(kPageLimit)) {
      return bad_image(rank_text + " size");
    }
    const auto n = static_cast<std::uint32_t>(ri.owner.size());
    // The --max-* limits hold for a restored state as for a replayed one (apply's rank_created): a
    // state saved under larger limits is refused, not taken in beyond them.
    StateResult<void> limit = check_max_pages(n);
    if (limit) limit = check_room_for(ri.rank, n);
    if (!limit) {
      return make_error(StateErrc::invalid_argument,
                        "the image is beyond this state's limits: " + rank_text + ": " + limit.error().message,
                        ri.rank);
    }
    auto r = std::make_unique<RankData>(ri.rank, std::move(ri.owner), lru, ttl_ms > 0);
    r->kept_on_release = ri.kept_on_release;
    r->free_count = 0;  // counted by import_pages
    add_rank(std::move(r));
  }
  return boost::outcome_v2::success();
}

// Each mapped page joins its key's page list, page number by page number across the ranks (each
// rank's pages still in order): ranks that served the same keys in the same order, a TP group's
// workers, hold a key at the same page number, so its record is read once for all of them, not in
// one pass over every record per rank (measured in the commit). With the ranks sorted largest
// first, those that have a page number are a prefix.
StateResult<void> MetadataState::Impl::import_pages(const SpaceImage& image, const std::vector<bool>& free_id,
                                                    const std::vector<bool>& draining) {
  const std::size_t key_count = image.keys.size();
  std::vector<std::uint32_t> by_size(ranks.size());
  std::iota(by_size.begin(), by_size.end(), std::uint32_t{0});
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return ranks[a]->num_pages > ranks[b]->num_pages; });
  std::size_t having = by_size.size();
  for (std::uint32_t page = 0; having > 0; ++page) {
    while (having > 0 && ranks[by_size[having - 1]]->num_pages <= page) --having;
    for (std::size_t i = 0; i < having; ++i) {
      const std::uint32_t slot = by_size[i];
      RankData& r = *ranks[slot];
      const std::vector<std::uint32_t>& allocated_for = image.ranks[slot].allocated_for;
      const std::uint32_t owner = r.owner[page];
      if (owner == kFree) {
        ++r.free_count;
      } else if (owner == kAllocated) {
        if (r.allocated >= allocated_for.size()) return bad_image("rank " + std::to_string(r.rank) + " allocated pages");
        r.allocated_for[page] = allocated_for[r.allocated];
        ++r.allocated;
      } else if (owner == kOrphaned) {
        ++r.orphaned;
      } else if (owner < key_count && !free_id[owner]) {
        KeyRecord& k = keys[owner];
        if (keys.on(k, slot)) {
          return bad_image("key " + k.name.str() + " has two pages on rank " + std::to_string(r.rank));
        }
        keys.add_page(k, RankPage{slot, page});
        ++(draining[owner] ? r.draining : r.mapped);
      } else {
        return bad_image("rank " + std::to_string(r.rank) + " page " + std::to_string(page) + " names no key");
      }
    }
  }
  return boost::outcome_v2::success();
}

// Each rank's free pool (front first) and reclaim marks, checked against its page table.
StateResult<void> MetadataState::Impl::import_pools(SpaceImage& image) {
  for (std::uint32_t slot = 0; slot < ranks.size(); ++slot) {
    RankData& r = *ranks[slot];
    RankImage& ri = image.ranks[slot];
    const std::string rank_text = "rank " + std::to_string(r.rank);
    if (r.free_count != ri.free_pool.size()) return bad_image(rank_text + " pool size");
    if (r.allocated != ri.allocated_for.size()) return bad_image(rank_text + " allocated pages");
    std::vector<bool> pooled(r.num_pages, false);
    for (std::uint32_t i = 0; i < r.free_count; ++i) {
      const std::uint32_t page = ri.free_pool[i];
      if (page >= r.num_pages || r.owner[page] != kFree || pooled[page]) {
        return bad_image(rank_text + " pool entry " + std::to_string(i));
      }
      pooled[page] = true;
      r.ring[i] = page;
    }
    r.head = 0;
    for (std::size_t i = 0; i < ri.reclaimed.size(); ++i) {
      const std::uint32_t page = ri.reclaimed[i];
      if (page >= r.num_pages || (i > 0 && page <= ri.reclaimed[i - 1])) {
        return bad_image(rank_text + " reclaim mark " + std::to_string(i));
      }
      r.set_after_reclaim(page);
    }
    ri = RankImage{};  // gigabytes may be held twice otherwise
  }
  return boost::outcome_v2::success();
}

// Every id is either a live key with a page (a key with none is removed at once), a draining one
// (its pages wait for its lease to end; restarted() says when) or a free one.
// The table is sized once, and the keys are entered kBatch at a time, the slots of a batch loaded
// first, all together: each is a cache miss (ids come in no hash order), and misses started
// together overlap where one lookup after another waits for each (measured in the commit).
StateResult<void> MetadataState::Impl::enter_keys(const std::vector<bool>& free_id, const std::vector<bool>& draining,
                                                  std::size_t live) {
  const auto key_count = static_cast<std::uint32_t>(keys.size());
  keys.index.reserve(live);
  constexpr std::uint32_t kBatch = 64;
  for (std::uint32_t begin = 0; begin < key_count; begin += kBatch) {
    const std::uint32_t end = std::min(key_count, begin + kBatch);
    for (std::uint32_t id = begin; id < end; ++id) keys.index.prefetch(keys[id].tag());
    for (std::uint32_t id = begin; id < end; ++id) {
      KeyRecord& k = keys[id];
      if (free_id[id]) {
        if (!k.name.empty() || k.tp_world_size != 0) return bad_image("free key id " + std::to_string(id) + " has a key");
        continue;
      }
      if (draining[id]) {
        k.lease_end = now + lease_ms;
        lease_push_back(id);
        continue;
      }
      if (k.pages.empty()) return bad_image("key " + k.name.str() + " has no page");
      if (k.tp_world_size == 0) return bad_image("key " + k.name.str() + " has tp_world_size 0");
      if (id_of(HashedKey{k.name.view(), k.hash}) != kNone) return bad_image("key " + k.name.str() + " twice");
      keys.enter(id);
      if (k.complete()) {
        ++life.complete;
        // The recency order is not in the image: complete keys enter it in id order.
        if (lru) lru_link(id);
      }
    }
  }
  return boost::outcome_v2::success();
}

// The image's reclaim times, checked, in the order they were timed; with a TTL, an allocated or
// orphaned page or an incomplete key the image has no time for is timed now.
StateResult<void> MetadataState::Impl::import_timed(const SpaceImage& image, const std::vector<bool>& draining) {
  std::vector<TimedPage> pages;
  std::vector<std::vector<bool>> page_timed(ranks.size());
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  for (const TimedPageImage& e : image.timed_pages) {
    if (e.rank_index >= ranks.size() || e.page >= ranks[e.rank_index]->num_pages) {
      return bad_image("timed page out of range");
    }
    RankData& r = *ranks[e.rank_index];
    const std::uint32_t marker = r.owner[e.page];
    std::vector<bool>& seen = page_timed[e.rank_index];
    seen.resize(r.num_pages, false);
    if ((marker != kAllocated && marker != kOrphaned) || seen[e.page] || e.at < last) {
      return bad_image("timed page " + std::to_string(e.page) + " of rank " + std::to_string(r.rank));
    }
    seen[e.page] = true;
    last = e.at;
    pages.push_back(TimedPage{e.at, 0, e.rank_index, e.page, marker});
  }
  std::vector<TimedKey> timed_keys;
  std::vector<bool> key_timed(keys.size(), false);
  last = std::numeric_limits<std::int64_t>::min();
  for (const TimedKeyImage& e : image.timed_keys) {
    if (e.id >= keys.size() || draining[e.id] || !keys[e.id].live || keys[e.id].complete() || key_timed[e.id] ||
        e.at < last) {
      return bad_image("timed key id " + std::to_string(e.id));
    }
    key_timed[e.id] = true;
    last = e.at;
    timed_keys.push_back(TimedKey{e.at, 0, e.id});
  }
  if (ttl_ms == 0) return boost::outcome_v2::success();
  time_untimed(pages, timed_keys, page_timed, key_timed);
  return boost::outcome_v2::success();
}

// With a TTL: what the image has no time for is timed now; then every timed event, in time order,
// gets its stamp.
void MetadataState::Impl::time_untimed(std::vector<TimedPage>& pages, std::vector<TimedKey>& timed_keys,
                                       std::vector<std::vector<bool>>& page_timed,
                                       const std::vector<bool>& key_timed) {
  for (std::uint32_t slot = 0; slot < ranks.size(); ++slot) {
    RankData& r = *ranks[slot];
    page_timed[slot].resize(r.num_pages, false);
    for (std::uint32_t page = 0; page < r.num_pages; ++page) {
      if ((r.owner[page] == kAllocated || r.owner[page] == kOrphaned) && !page_timed[slot][page]) {
        pages.push_back(TimedPage{now, 0, slot, page, r.owner[page]});
      }
    }
  }
  for (std::uint32_t id = 0; id < keys.size(); ++id) {
    if (keys[id].live && !keys[id].complete() && !key_timed[id]) timed_keys.push_back(TimedKey{now, 0, id});
  }
  std::stable_sort(pages.begin(), pages.end(), [](const TimedPage& a, const TimedPage& b) { return a.at < b.at; });
  std::stable_sort(timed_keys.begin(), timed_keys.end(),
                   [](const TimedKey& a, const TimedKey& b) { return a.at < b.at; });
  for (TimedPage& e : pages) {
    e.stamp = ++stamps;
    ranks[e.slot]->stamp[e.page] = e.stamp;
    life.timed_pages.push_back(e);
  }
  for (TimedKey& e : timed_keys) {
    e.stamp = ++stamps;
    keys[e.id].incomplete_stamp = e.stamp;
    life.timed_keys.push_back(e);
  }
}

}  // namespace hf3fs_meta
