// MetadataState::Core and MetadataState::Impl: the state's parts and the operations on them (internal;
// only src/state/*.cpp include this). A namespace is one Impl: its ranks, keys and
// lifecycle. The Core is what they share: the lock, the change numbering and sink, the clock, and the
// table of namespaces (the default one, id 0, reached without a lookup). Which file holds what:
// - state/page_pool.hpp: one rank's pages (pool, page table, LRU links, reclaim marks);
// - state/key_table.hpp: ids, records and the index from a key to its id;
// - state/index_list.hpp: the index-linked list of both the LRU order and the leases;
// - state/effects.cpp: what a call does to the parts (take pages, map a confirmation, push pages
//   back, remove a key), used alike by the live calls and by replay, so that replay cannot drift;
// - state/lifecycle.cpp: recency, leases, eviction, reclaim, drain (the clock's decisions);
// - state/metadata_state.cpp: the calls (validation, locking, change records); state/introspection.cpp;
// - state/replay.cpp: apply(); state/image.cpp: export_image() and import_image();
// - state/namespaces.cpp: the table of namespaces, their creation and drop, the calls over all.
//
// Locking: two levels of reader-writer locks (a waiting writer goes first), so that a namespace's
// calls wait only on that namespace's. The core's lock guards the set of namespaces and what they
// share; each namespace's lock its contents. A namespace's contents are read under the core's lock
// shared and its own shared, or the core's exclusive; changed under the core's shared and its own
// exclusive, or the core's exclusive. So:
// - allocate, confirm_write, drop_rank: core shared, the namespace exclusive; batch_exists,
//   get_locations, introspection: core shared, the namespace shared;
// - the calls over every namespace (stats, listing, the export's sizing): core shared, then every
//   namespace shared in id order (a writer holds one namespace's lock, so no cycle can form);
// - initialize: its first check of the server-wide limits (which count every namespace) as the
//   calls over every namespace, then the rank added, checked again, under the core's exclusive;
// - delete, clear, drops of namespaces, replay, import and the export's instant: the core's exclusive.
// With the lifecycle on (eviction, leases, TTL) every call takes the core's lock exclusively, as
// before: the clock, its records and the event stamps are shared by every namespace.
// Changes are numbered and handed to the sink under emit_mutex, in the order they were applied
// within each namespace; namespaces' changes commute, so a replay in that order gives every
// namespace's state. What does not need the state is done outside the locks: hashing the keys,
// finding duplicates, building a new rank's arrays, freeing what clear() dropped.
#pragma once

#if defined(__GLIBC__)
#include <pthread.h>  // WriterFirstMutex
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/deque.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include "hf3fs_meta/routes.hpp"  // valid_namespace_name
#include "hf3fs_meta/state.hpp"
#include "hash/keyed_hash.hpp"
#include "state/index_list.hpp"
#include "state/key_table.hpp"
#include "state/page_pool.hpp"
#include "state/scratch.hpp"

namespace hf3fs_meta {
namespace state_model {

// Lifecycle events kept in the order they happened (a clock that never goes back keeps them sorted).
// Each has a stamp unique in the state's life; the page or key keeps the stamp of its latest event,
// so an older event about the same page or id (reallocated, or reused, since) is recognised as stale.
struct TimedPage {
  std::int64_t at = 0;  // when the page became allocated or orphaned
  std::uint64_t stamp = 0;
  std::uint32_t slot = 0;
  std::uint32_t page = 0;
  std::uint32_t marker = kAllocated;  // kAllocated or kOrphaned
};

struct TimedKey {
  std::int64_t at = 0;  // when the key was created or stopped being complete
  std::uint64_t stamp = 0;
  std::uint32_t id = 0;
};

// export_image's copy of a rank, sized before the instant.
struct PreparedRank {
  std::uint32_t num_pages = 0;
  std::vector<std::uint32_t> hashes;  // every page's allocated_for entry, if the rank has allocated pages
};

// Lifecycle state that clear() forgets with the ranks and keys.
struct Lifecycle {
  IndexList leases;       // key ids, in the order their leases began, which is the order they end
  std::uint64_t complete = 0;  // live complete keys
  // Boost's deque allocates at its first element; libstdc++'s std::deque allocates a 512-byte block
  // and its map when made, which every namespace paid twice without a TTL (docs/performance.md,
  // "Memory per namespace").
  boost::container::deque<TimedPage> timed_pages;
  boost::container::deque<TimedKey> timed_keys;
};

// Lifecycle counters, kept across clear().
struct Counters {
  std::uint64_t evicted = 0;
  std::uint64_t deleted = 0;
  std::uint64_t reclaimed_keys = 0;
  std::uint64_t reclaimed_allocated = 0;
  std::uint64_t reclaimed_orphaned = 0;
};

// The state's lock. glibc's default rwlock lets a reader in whenever no writer holds it, even while
// writers wait, so a snapshot copying key names a chunk at a time kept writers out through all the
// chunks; here a waiting writer goes first (new readers wait for it). Not recursive for readers.
// The writer preference is a glibc extension; elsewhere std::shared_mutex, whose fairness the
// platform decides.
#if defined(__GLIBC__)
class WriterFirstMutex {
 public:
  WriterFirstMutex() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~WriterFirstMutex() { pthread_rwlock_destroy(&lock_); }
  WriterFirstMutex(const WriterFirstMutex&) = delete;
  WriterFirstMutex& operator=(const WriterFirstMutex&) = delete;
  void lock() noexcept { pthread_rwlock_wrlock(&lock_); }
  void unlock() noexcept { pthread_rwlock_unlock(&lock_); }
  void lock_shared() noexcept { pthread_rwlock_rdlock(&lock_); }
  void unlock_shared() noexcept { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};
#else
using WriterFirstMutex = std::shared_mutex;
#endif

}  // namespace state_model

// Only the state's own files include this header: its names are theirs.
using namespace state_model;

// What every namespace shares (docs/design.md "State"): the lock over the set of namespaces, one
// change numbering and sink, one clock, and the table of namespaces. One order of changes across
// namespaces, so that a journal's prefix is a prefix of every namespace's history.
struct MetadataState::Core {
  StateOptions options;
  mutable WriterFirstMutex mutex;  // the set of namespaces; see "Locking" at the top
  // seq and the sink's calls when only the core's shared lock is held (emit()); seq is also written
  // under the core's exclusive lock (replay, import, the clock's record), so a reader holds both.
  mutable std::mutex emit_mutex;
  ChangeSink sink;
  std::uint64_t seq = 0;  // changes applied
  // Fixed at construction from the options.
  bool lifecycle = false;  // any of eviction, leases, TTL on
  bool lru = false;
  std::int64_t lease_ms = 0;
  std::int64_t ttl_ms = 0;
  std::int64_t now = std::numeric_limits<std::int64_t>::min() / 4;  // the latest clock reading
  bool clock_held = false;  // hold_clock(): nothing expires by the clock (under the exclusive lock)
  std::uint64_t stamps = 0;                                         // of timed events, never reused
  // With a TTL: the clock reading the records carry (ChangeKind::clock), so that a replay times what
  // it replays as the original did.
  std::optional<std::int64_t> recorded_now;
  // The namespaces, by id, in id order; 0 is the default one. Ids are never reused, and the table
  // holds only the live ones: not a vector indexed by every id ever given (a damaged image's next id
  // would size it, and create/drop churn would grow it without end).
  std::map<std::uint32_t, std::unique_ptr<Impl>> spaces;
  std::uint32_t next_space_id = 0;
  Impl* default_space = nullptr;
  // The named ones; keyed hash: a tenant may name namespaces (hash/keyed_hash.hpp).
  boost::unordered_flat_map<std::string, Impl*, hash::KeyedHash, std::equal_to<>> by_name;
  std::uint64_t imports = 0;  // import_image()s: an export copying names after its instant starts over

  explicit Core(StateOptions o);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Under the lock. The default namespace costs one branch.
  Impl* find(NamespaceRef ns) const {
    if (ns.name.empty() || ns.name == kDefaultNamespace) return default_space;
    const auto it = by_name.find(ns.name);
    return it == by_name.end() ? nullptr : it->second;
  }
  Impl* space(std::uint32_t id) const {
    const auto it = spaces.find(id);
    return it == spaces.end() ? nullptr : it->second.get();
  }
  std::uint32_t next_id() const { return next_space_id; }
  // A new namespace, empty, registered under `id` (>= every id so far). Nothing recorded.
  Impl& add_space(std::uint32_t id, std::string_view name);
  // A new namespace under the next id, recorded (namespace_created). Under the exclusive lock, once
  // every check of the call that creates it has passed.
  Impl& create_space(std::string_view name);
  // Removes a named namespace, recorded (namespace_dropped); `gone` takes it, to be freed after the lock.
  NamespaceDropOutcome drop_space(Impl& space, std::unique_ptr<Impl>& gone);
  // The image (image.cpp).
  struct ExportedSpace;
  void prepare_export(StateImage& image, std::vector<ExportedSpace>& parts) const;
  std::uint64_t copy_at_instant(StateImage& image, std::vector<ExportedSpace>& parts, bool names_under_lock,
                                const std::function<void(std::uint64_t)>& at_instant) const;
  bool copy_names_after(std::vector<ExportedSpace>& parts, std::uint64_t instant_imports) const;
  StateResult<void> import_namespaces(StateImage& image);
  // A replayed namespace_created, checked (replay.cpp).
  StateResult<void> apply_namespace_created(const Change& change);
  // The same, not recorded (a replayed namespace_dropped).
  void remove_space(Impl& space, std::unique_ptr<Impl>& gone);
  // --max-namespaces for one more.
  StateResult<void> check_new_space(std::string_view name, Rank rank) const;
  // Every namespace's contents, read: the core's lock shared, then each namespace's shared, in id
  // order.
  class SharedAll {
   public:
    explicit SharedAll(const Core& core);
    ~SharedAll();
    SharedAll(const SharedAll&) = delete;
    SharedAll& operator=(const SharedAll&) = delete;

   private:
    const Core& core_;
  };
  // The calls that look at every namespace: with the lifecycle on, what expired in each is processed
  // first, under the exclusive lock (as ReadAccess does for one); else as SharedAll.
  class AllAccess {
   public:
    explicit AllAccess(const Core& core);
    ~AllAccess();
    AllAccess(const AllAccess&) = delete;
    AllAccess& operator=(const AllAccess&) = delete;

   private:
    const Core& core_;
    std::optional<SharedAll> shared_;
  };
  // Server-wide sums for --max-ranks and --max-total-pages.
  std::int64_t rank_total() const;
  std::int64_t page_total() const;
};

// One namespace: its ranks, keys and lifecycle. The shared parts are the core's, under today's names.
struct MetadataState::Impl {
  Core& core;
  const StateOptions& options;
  mutable WriterFirstMutex mutex;  // this namespace's contents; see "Locking" at the top
  ChangeSink& sink;
  std::uint64_t& seq;
  std::int64_t& now;
  std::uint64_t& stamps;
  std::optional<std::int64_t>& recorded_now;
  const bool lifecycle;
  const bool lru;
  const std::int64_t lease_ms;
  const std::int64_t ttl_ms;
  const std::uint32_t id;  // the namespace's (0: the default)
  const std::string name;

  boost::unordered_flat_map<Rank, std::uint32_t> rank_slots;
  std::vector<std::unique_ptr<RankData>> ranks;  // by slot; null once dropped (slots are never reused)
  KeyTable keys;
  std::int64_t total_pages = 0;  // of all its ranks
  Lifecycle life;
  Counters counters;
  std::vector<std::uint32_t> victims;  // evict()'s, under the exclusive lock
  // The export's check that no key id was freed (and so maybe reused) while it copied names outside
  // the lock: bumped whenever a key id is freed or every id is replaced (clear, import).
  std::uint64_t epoch = 0;

  Impl(Core& c, std::uint32_t space_id, std::string_view space_name)
      : core(c),
        options(c.options),
        sink(c.sink),
        seq(c.seq),
        now(c.now),
        stamps(c.stamps),
        recorded_now(c.recorded_now),
        lifecycle(c.lifecycle),
        lru(c.lru),
        lease_ms(c.lease_ms),
        ttl_ms(c.ttl_ms),
        id(space_id),
        name(space_name) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // What clear(), a replayed clear and import_image() replace (not the options, counters, sink or
  // numbering). One list, so that a new member is swapped everywhere or nowhere.
  void swap_contents(Impl& other) noexcept {
    std::swap(rank_slots, other.rank_slots);
    std::swap(ranks, other.ranks);
    std::swap(keys, other.keys);
    std::swap(total_pages, other.total_pages);
    std::swap(life, other.life);
  }

  // Once a call has changed the state, under the namespace's exclusive lock (or the core's).
  void emit(Change& change) {
    if (ttl_ms > 0 && recorded_now != now) emit_clock();  // the lifecycle: under the core's exclusive lock
    change.ns = id;
    std::lock_guard numbering(core.emit_mutex);
    change.seq = ++seq;
    if (sink) sink(change);
  }
  void emit_clock();

  // ---- Lookups. Only under the lock.
  std::uint32_t slot_of(Rank rank) const {
    const auto it = rank_slots.find(rank);
    return it == rank_slots.end() ? kNone : it->second;
  }
  std::uint32_t id_of(const HashedKey& key) const { return keys.find(key); }
  // Starts the cache misses of the keys' lookups together, before the lookups wait for each in turn.
  void prefetch(const std::vector<HashedKey>& hashed) const noexcept {
    for (const HashedKey& key : hashed) keys.prefetch(key);
  }
  void prefetch_records(const std::vector<HashedKey>& hashed) const noexcept;
  // The page a complete key has on this rank: what allocate and get_locations answer.
  std::uint32_t complete_page(const HashedKey& key, std::uint32_t slot) const {
    const std::uint32_t id = id_of(key);
    if (id == kNone) return kNone;
    const KeyRecord& k = keys[id];
    if (!k.complete()) return kNone;
    const RankPage* rp = keys.on(k, slot);
    return rp ? rp->page : kNone;
  }
  PageState page_state(const RankData& r, std::uint32_t page) const {
    switch (const std::uint32_t owner = r.owner[page]) {
      case kFree: return PageState::free;
      case kAllocated: return PageState::allocated;
      case kOrphaned: return PageState::orphaned;
      default: return keys[owner].live ? PageState::mapped : PageState::draining;
    }
  }

  // Readers share the lock, unless the lifecycle is on: then a lookup changes the state (recency,
  // leases) and what expired in the namespace is processed first, so it takes the lock exclusively.
  // space() is null for a namespace that does not exist.
  class ReadAccess {
   public:
    ReadAccess(const Core& core, NamespaceRef ns) : core_(core) {
      if (core_.lifecycle) {
        core_.mutex.lock();
        space_ = core_.find(ns);
        if (space_) space_->advance();
        return;
      }
      core_.mutex.lock_shared();
      space_ = core_.find(ns);
      if (space_) space_->mutex.lock_shared();
    }
    ~ReadAccess() {
      if (core_.lifecycle) {
        core_.mutex.unlock();
        return;
      }
      if (space_) space_->mutex.unlock_shared();
      core_.mutex.unlock_shared();
    }
    ReadAccess(const ReadAccess&) = delete;
    ReadAccess& operator=(const ReadAccess&) = delete;
    Impl* space() const { return space_; }

   private:
    const Core& core_;
    Impl* space_ = nullptr;
  };
  // A change on one rank of a namespace: the exclusive lock, the namespace (what expired in it
  // processed first) and the rank's slot. space() is null when the namespace or the rank is not there.
  // The core's lock shared and the namespace's exclusive (the core's exclusive with the lifecycle on).
  class RankAccess {
   public:
    RankAccess(Core& core, NamespaceRef ns, Rank rank) : core_(core) {
      if (core_.lifecycle) {
        core_.mutex.lock();
      } else {
        core_.mutex.lock_shared();
      }
      space_ = core_.find(ns);
      if (!space_) return;
      if (!core_.lifecycle) {
        locked_ = space_;
        locked_->mutex.lock();
      }
      space_->advance();
      slot_ = space_->slot_of(rank);
      if (slot_ == kNone) space_ = nullptr;
    }
    ~RankAccess() {
      if (locked_) locked_->mutex.unlock();
      if (core_.lifecycle) {
        core_.mutex.unlock();
      } else {
        core_.mutex.unlock_shared();
      }
    }
    RankAccess(const RankAccess&) = delete;
    RankAccess& operator=(const RankAccess&) = delete;
    Impl* space() const { return space_; }
    std::uint32_t slot() const { return slot_; }

   private:
    Core& core_;
    Impl* space_ = nullptr;
    Impl* locked_ = nullptr;  // the namespace whose lock this holds
    std::uint32_t slot_ = kNone;
  };

  // ---- The calls' halves under the lock (metadata_state.cpp).
  // Into results sized by the caller before the lock.
  void batch_exists(const std::vector<HashedKey>& hashed, std::vector<bool>& result);
  StateResult<void> get_locations(Rank rank, const std::vector<HashedKey>& hashed,
                                  std::vector<std::optional<Page>>& result);
  std::vector<bool> delete_keys(const std::vector<HashedKey>& hashed, Scratch& s);
  std::optional<KeyInfo> key_info(std::string_view key) const;  // pages unsorted
  void fill_stats(StateStats& out) const;
  // Empties the namespace into `old` (built on the same core, freed by the caller after the lock) and
  // records `cleared`. Under the exclusive lock.
  void clear_into(Impl& old);
  // The server's --max-* flags, which a new rank must fit (the error's message says why it does
  // not). Checked by initialize and by a replayed rank_created alike (a record naming an absurd rank
  // must not take all the memory). The first check depends on the request alone, the second on the
  // state: --max-ranks and --max-total-pages count every namespace, --namespace-max-total-pages this
  // one (`space` null: a namespace not created yet, which has nothing).
  static StateResult<void> check_max_pages(const StateOptions& options, std::int64_t num_pages);
  StateResult<void> check_max_pages(std::int64_t num_pages) const { return check_max_pages(options, num_pages); }
  StateResult<void> check_room_for(Rank rank, std::int64_t num_pages) const {
    return check_room(core, this, name, rank, num_pages);
  }
  static StateResult<void> check_room(const Core& core, const Impl* space, std::string_view name, Rank rank,
                                      std::int64_t num_pages);
  StateResult<void> validate_confirmations(RankData& r, std::uint32_t slot, std::span<const Confirmation> confirmations,
                                           Scratch& s) const;
  StateResult<void> check_releases(const RankData& r, const Scratch& s, std::span<const Page> pages,
                                   std::span<const ReleaseKey> keyed) const;
  ConfirmOutcome apply_confirmations(RankData& r, std::uint32_t slot, std::span<const Confirmation> confirmations,
                                     Scratch& s);
  void record_confirm(Rank rank, const Scratch& s, const ConfirmOutcome& outcome);

  // ---- Effects, shared by the live calls and replay (effects.cpp).
  void add_rank(std::unique_ptr<RankData> data);
  std::uint32_t create_key(const HashedKey& key, std::uint32_t tp_world_size);
  // Takes the pool's front page for a key whose page_tag() is `hash`: allocated for it, or, `keep`
  // false (a complete key with a page on this rank), handed back to the end of the pool at once, as
  // vLLM does. Returns the page taken.
  std::uint32_t take_page(RankData& r, std::uint32_t slot, std::uint32_t hash, bool keep) {
    const std::uint32_t page = r.pop_front();
    if (!keep) {
      r.push_back(page);
      return page;
    }
    r.mark_allocated(page, hash);
    if (ttl_ms > 0) timed(r, slot, page, kAllocated);
    return page;
  }
  void map_page(RankData& r, std::uint32_t slot, std::uint32_t id, std::uint32_t page);
  std::uint32_t map_confirmation(RankData& r, std::uint32_t slot, std::uint32_t id, const HashedKey& key,
                                 std::uint32_t page, std::uint32_t new_key_tp_world_size);
  void release(RankData& r, std::span<const Page> pages, std::span<const ReleaseKey> keyed, Scratch& s,
               ConfirmOutcome& outcome);
  void reclaim_page(RankData& r, std::uint32_t page);
  void remove_key_as(std::uint32_t id, Removal why, bool drain);
  std::uint32_t drain_orphan(RankData& r, std::uint32_t slot, std::uint32_t page, std::uint32_t leased);
  void release_key_pages(std::uint32_t id, bool draining);
  void free_id(std::uint32_t id);
  DropOutcome drop(std::uint32_t slot, std::unique_ptr<RankData>& gone);

  // ---- Lifecycle: recency, leases, eviction, reclaim, deletion (lifecycle.cpp). Every operation is
  // O(1) per page it touches. Only under the exclusive lock.
  std::int64_t read_clock() const;
  void advance();
  void timed(RankData& r, std::uint32_t slot, std::uint32_t page, std::uint32_t marker);
  void expire_page(const TimedPage& e);
  void expire_key(const TimedKey& e);
  void completeness_changed(std::uint32_t id, bool was_complete);
  void use(std::uint32_t id, bool read);
  void lru_link(std::uint32_t id);
  void lru_unlink(std::uint32_t id);
  void lease_push_back(std::uint32_t id);
  void lease_unlink(std::uint32_t id);
  void end_lease(std::uint32_t id, bool journal = true);
  void remove_key(std::uint32_t id, Removal why, bool journal = true);
  void before_allocate(RankData& r, std::uint32_t slot, const std::vector<HashedKey>& hashed, Scratch& s);
  void evict(RankData& r, std::size_t n, Scratch& s);
  void restart_leases();

  // ---- Replay (replay.cpp): each kind's record, checked, then applied through the effects above.
  StateResult<void> apply_change(const Change& change);
  StateResult<void> apply_rank_created(const Change& change);
  StateResult<void> apply_removal(const Change& change);
  StateResult<void> apply_key_drained(const Change& change);
  StateResult<void> apply_on_rank(const Change& change, std::uint32_t slot);
  StateResult<void> apply_page_reclaimed(const Change& change, RankData& r);
  StateResult<void> apply_page_draining(const Change& change, RankData& r, std::uint32_t slot);
  StateResult<void> apply_allocated(const Change& change, RankData& r, std::uint32_t slot);
  StateResult<void> apply_confirmed(const Change& change, RankData& r, std::uint32_t slot);

  // ---- The image (image.cpp).
  std::uint32_t size_export(std::vector<PreparedRank>& prepared) const;
  static void touch_export(SpaceImage& image, const std::vector<PreparedRank>& prepared, std::uint32_t key_count);
  std::uint64_t copy_at_instant(SpaceImage& image, std::vector<PreparedRank>& prepared,
                                std::vector<std::uint32_t>& slot_of_image, bool names_under_lock) const;
  void copy_names(SpaceImage& image, std::uint32_t begin, std::uint32_t end, const std::vector<bool>* skip) const;
  void export_lifecycle(const std::vector<std::uint32_t>& index_of_slot, SpaceImage& image) const;
  StateResult<void> import_space(SpaceImage& image);
  std::size_t import_keys(SpaceImage& image, const std::vector<bool>& free_id, const std::vector<bool>& draining);
  StateResult<void> import_ranks(SpaceImage& image);
  StateResult<void> import_pages(const SpaceImage& image, const std::vector<bool>& free_id,
                                 const std::vector<bool>& draining);
  StateResult<void> import_pools(SpaceImage& image);
  StateResult<void> enter_keys(const std::vector<bool>& free_id, const std::vector<bool>& draining, std::size_t live);
  StateResult<void> import_timed(const SpaceImage& image, const std::vector<bool>& draining);
  void time_untimed(std::vector<TimedPage>& pages, std::vector<TimedKey>& timed_keys,
                    std::vector<std::vector<bool>>& page_timed, const std::vector<bool>& key_timed);
};

}  // namespace hf3fs_meta
