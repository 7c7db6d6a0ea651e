// MetadataState: the shared state model of the HF3FS metadata service (docs/protocol.md, "State model").
// No I/O and no JSON: typed inputs and typed outcomes. Every call is atomic; a refused call leaves
// the state exactly as it was (the whole batch is validated before any of it is applied).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/outcome/result.hpp>

#include "hf3fs_meta/stats.hpp"  // StateStats, RankStats (public: the client's GET /stats)
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

enum class StateErrc {
  invalid_argument = 1,    // a malformed item: duplicate key, page out of range (400, names field/index)
  invalid_initialization,  // worker num_pages <= 0 or above the maximum (400)
  not_initialized,         // the rank does not exist
  stale,                   // confirm of a page that is free on that rank (409)
  conflict,                // confirm of a page another key maps to, or was allocated for, on that rank, or a
                           // bare release of a page the TTL reclaimed and allocated again since (409)
};

struct StateError {
  StateErrc kind = StateErrc::invalid_argument;
  // invalid_argument: names the field and index, e.g. `keys[3]: duplicate key 'k' (also keys[1])`.
  // invalid_initialization: the whole detail, `Invalid initialization parameters` or
  //   `Invalid initialization parameters: <reason>` (num_pages above the maximum, too many ranks,
  //   too many pages in all ranks together).
  // not_initialized: `Rank N not initialized`.
  // stale: `page P of key K is not allocated on rank R`.
  // conflict: `page P of key K is mapped to key J on rank R`, or
  //   `page P of key K was allocated for another key on rank R`, or
  //   `page P of key K is draining on rank R` (deleted or orphaned under a read lease), or
  //   `pages_to_release[j]: page P was reclaimed by the allocation TTL and allocated again since on rank R; ...`.
  std::string message;
  Rank rank = 0;
  std::optional<std::size_t> index;  // the offending item's index in its field, where there is one
};

template <class T>
using StateResult = boost::outcome_v2::result<T, StateError, boost::outcome_v2::policy::terminate>;

enum class Eviction { none, lru };

// The cache lifecycle (eviction, read leases, reclaim) is off by default; with all of it off, every
// answer is the one above and no clock is read.
struct StateOptions {
  std::int64_t max_pages = std::int64_t{1} << 24;        // largest worker num_pages accepted
  std::int64_t max_ranks = 1024;                         // ranks that may exist at once
  std::int64_t max_total_pages = std::int64_t{1} << 28;  // pages of all ranks together (12 bytes each)
  // The longest key (and prefix key) a request may name, in bytes; 0: no limit. Checked by the
  // Service on every route that takes keys, not by the state (a replayed record is not refused).
  std::size_t max_key_bytes = 1024;
  // lru: an allocate on a rank short of pages first evicts least recently used complete keys with a
  // page there (never a key of that allocate, never a leased key), each from every rank.
  Eviction eviction = Eviction::none;
  // > 0: a key that batch_exists finds complete, get_locations returns or allocate reuses is not
  // evicted for this long, and a deleted or reclaimed key's pages drain back to their pools only when
  // its lease ends.
  std::chrono::milliseconds read_lease{0};
  // > 0: a page allocated and not confirmed within this, a key still not complete this long after its
  // first confirmation (or after it stopped being complete), and an orphaned page this long after it
  // was orphaned, return to their pools.
  std::chrono::milliseconds allocation_ttl{0};
  // Read at the start of every call while one of the above is on; what expired by then is processed
  // first. A reading below an earlier one counts as the earlier one. Empty: std::chrono::steady_clock.
  std::function<std::chrono::milliseconds()> clock{};
  // Namespaces: how many may exist at once, the default one included, and the pages of all
  // ranks of one namespace together (0: max_total_pages). Checked by a worker's initialize, the only
  // call that creates a namespace, and by a replayed or imported one.
  std::int64_t max_namespaces = 1024;
  std::int64_t namespace_max_total_pages = 0;
  std::int64_t namespace_max_ranks = 0;  // ranks of one namespace at once (0: max_ranks)
};

// A namespace is a state of its own (its ranks, pages, keys, tp_world_size, lifecycle and stats);
// nothing in one is visible from or changed by a call in another. The default namespace always
// exists and is never dropped; an empty name or kDefaultNamespace selects it. A call naming a
// namespace that does not exist answers as a fresh server would and creates nothing; only a worker's
// initialize creates one.
inline constexpr std::string_view kDefaultNamespace = "default";
struct NamespaceRef {
  std::string_view name;  // empty or kDefaultNamespace: the default namespace
};

// NamespaceSummary (GET /namespaces) and NamespaceDropOutcome (drop_namespace): types.hpp, which the
// client's decoders share.

struct InitializeOutcome {
  bool created = false;  // false: the rank existed (left as it was) or role scheduler
  std::int64_t existing_num_pages = 0;  // the rank existed: its num_pages (maybe not the one asked for)
};

struct ConfirmOutcome {
  std::size_t confirmed = 0;    // confirmations applied
  std::size_t released = 0;     // pages returned to the pool
  std::size_t kept_mapped = 0;  // releases refused because a key maps to the page (deviation)
  std::size_t late = 0;         // keyed releases of a page no longer allocated for their key: nothing freed
};

// draining: the page of a deleted (or reclaimed) key still under a read lease, or the page a leased
// key moved away from (orphaned under its lease); free when the lease ends.
// The numbers are on disk (ChangeKind::page_reclaimed).
enum class PageState { free = 0, allocated = 1, mapped = 2, orphaned = 3, draining = 4 };

// What the state knows about one key (introspection).
struct KeyInfo {
  std::int64_t tp_world_size = 0;               // fixed at the key's first confirmation
  std::vector<std::pair<Rank, Page>> pages;     // the key's page on each rank, sorted by rank
  bool complete = false;                        // pages.size() == tp_world_size
  friend bool operator==(const KeyInfo&, const KeyInfo&) = default;
};

// A change record: the effects of one applied call (never its inputs), so that replaying it decides
// nothing. Handed to the change sink under the state's lock, numbered 1, 2, 3... in apply order;
// refused calls make none, nor calls with nothing in them (an allocate of no keys, a confirm_write
// of nothing). A confirm_write that changes nothing still makes one: a durable server answers once
// the record is on disk, and so once everything before it is (a repeated confirm is never answered
// before the original's effect is durable). The views point into the state or the
// call and are valid only during the sink's call. Pages are 32-bit inside.
enum class ChangeKind : std::uint8_t {
  rank_created = 1,  // rank, num_pages
  allocated = 2,     // rank, allocated: per key, the page taken from the pool's front and its answer
  confirmed = 3,     // rank, confirmed (in order), then released (in order), then kept_mapped
  cleared = 4,       // every rank and key forgotten
  rank_dropped = 5,  // rank: the rank, its pages and its keys' mappings on it gone; keys left unmapped gone
  keys_deleted = 6,  // deleted, in order: each key gone, its pages to the ends of their pools (POST /keys/delete)
  // The cache lifecycle's effects, decided by the clock, the LRU order and the leases:
  // recorded as what happened, so that replay decides nothing.
  keys_removed = 7,    // removal, draining, deleted (the names, in order): each key gone; its pages to the
                       // ends of their pools, or, draining, kept until the key's lease ends (key_drained)
  page_reclaimed = 8,  // rank, page, was: an allocated or orphaned page back to the end of its pool
  key_drained = 9,     // key_id: a removed key's lease ended: its pages to the ends of their pools, its id free
  clock = 10,          // clock_ms: the clock reading of the changes that follow (with allocation_ttl only)
  // rank, page, key_id: an orphaned page whose key was under a read lease when it moved: owned by the
  // key id given (no name, in no lookup) until key_drained returns it to the end of its pool.
  page_draining = 11,
  // Namespaces: not lifecycle kinds. Every record carries the namespace it acts in (ns).
  namespace_created = 12,  // ns (the new id, never reused), ns_name
  namespace_dropped = 13,  // ns: the namespace, its ranks and its keys gone
};
// The cache lifecycle's kinds: what the clock, the LRU order and the leases decided, never a request's
// own answer (so their records never carry a request's X-Request-Id).
constexpr bool is_lifecycle(ChangeKind kind) noexcept {
  return kind == ChangeKind::keys_removed || kind == ChangeKind::page_reclaimed || kind == ChangeKind::key_drained ||
         kind == ChangeKind::clock || kind == ChangeKind::page_draining;
}
// Why the lifecycle removed a key (keys_removed).
enum class Removal : std::uint8_t { evicted = 1, reclaimed = 2, deleted = 3 };
inline constexpr std::uint32_t kNoPage32 = 0xFFFFFFFFu;
struct AllocatedItem {
  std::string_view key;
  std::uint32_t taken = kNoPage32;  // popped from the pool's front (kNoPage32: the pool was short)
  std::uint32_t page = kNoPage32;   // the answer: == taken (now allocated), another page (a complete key's
                                    // page; `taken` went back to the pool's end), or kNoPage32
};
struct ConfirmedItem {
  std::string_view key;
  std::uint32_t page = 0;
  std::uint32_t new_key_tp_world_size = 0;  // the key was created by this confirmation: its tp_world_size
};
struct Change {
  ChangeKind kind = ChangeKind::cleared;
  std::uint64_t seq = 0;
  Rank rank = 0;
  std::uint32_t num_pages = 0;  // rank_created
  std::span<const AllocatedItem> allocated;
  std::span<const ConfirmedItem> confirmed;
  std::span<const std::uint32_t> released;  // pages actually returned to the pool
  std::uint32_t kept_mapped = 0;
  std::span<const std::string_view> deleted;  // keys_deleted, keys_removed
  Removal removal = Removal::deleted;         // keys_removed
  bool draining = false;                      // keys_removed
  std::uint32_t page = 0;                     // page_reclaimed, page_draining
  PageState was = PageState::allocated;       // page_reclaimed: allocated or orphaned
  std::uint32_t key_id = 0;                   // key_drained, page_draining (a removed key has no name in any lookup)
  std::int64_t clock_ms = 0;                  // clock
  std::uint32_t ns = 0;                       // the namespace's id; 0: the default (clock records too)
  std::string_view ns_name;                   // namespace_created
};
// Called under the state's exclusive lock: must be quick and must not call back into the state.
using ChangeSink = std::function<void(const Change&)>;

// A full image of the state, exact: ranks in creation order with their free pool front first and
// their page table, keys in id order. Page-table entries are key ids or the markers below.
inline constexpr std::uint32_t kImageFree = 0xFFFFFFFFu;
inline constexpr std::uint32_t kImageAllocated = 0xFFFFFFFEu;
inline constexpr std::uint32_t kImageOrphaned = 0xFFFFFFFDu;
struct RankImage {
  Rank rank = 0;
  std::vector<std::uint32_t> free_pool;  // front first
  std::vector<std::uint32_t> owner;      // one entry per page: num_pages = owner.size()
  std::vector<std::uint32_t> allocated_for;  // per kImageAllocated page, in page order: its key's hash
  std::uint64_t kept_on_release = 0;
  // Pages whose TTL reclaim mark is set (ascending): reclaimed, and not mapped or freed by a release
  // since. A bare release of such a page while it is allocated again is refused.
  std::vector<std::uint32_t> reclaimed;
  friend bool operator==(const RankImage&, const RankImage&) = default;
};
struct KeyImage {
  std::string name;  // empty for an id in free_ids
  std::uint32_t tp_world_size = 0;
  friend bool operator==(const KeyImage&, const KeyImage&) = default;
};
// The cache lifecycle's reclaim times (clock readings, wall-clock on a durable server).
struct TimedPageImage {
  std::int64_t at = 0;  // when the page became allocated or orphaned
  std::uint32_t rank_index = 0;  // in its SpaceImage::ranks
  std::uint32_t page = 0;
  friend bool operator==(const TimedPageImage&, const TimedPageImage&) = default;
};
struct TimedKeyImage {
  std::int64_t at = 0;  // when the key was created or stopped being complete
  std::uint32_t id = 0;
  friend bool operator==(const TimedKeyImage&, const TimedKeyImage&) = default;
};
// One namespace's state, exact, and of the cache lifecycle what a restart must keep: keys removed but
// still draining, reclaim times. Recency and leases are left out: after a restart every key counts as
// leased for one lease period (MetadataState::restarted).
struct SpaceImage {
  std::vector<RankImage> ranks;
  std::vector<KeyImage> keys;
  std::vector<std::uint32_t> free_ids;  // ids of removed keys, the last one reused first
  // Empty without the lifecycle.
  std::vector<std::uint32_t> draining_ids;  // removed keys whose pages wait for their lease's end, by id
  std::vector<TimedPageImage> timed_pages;  // allocated and orphaned pages, in the order they were timed
  std::vector<TimedKeyImage> timed_keys;    // incomplete keys, in the order they were timed
  friend bool operator==(const SpaceImage&, const SpaceImage&) = default;

  bool has_lifecycle() const noexcept {
    return !draining_ids.empty() || !timed_pages.empty() || !timed_keys.empty() || has_reclaim_marks();
  }
  bool has_reclaim_marks() const noexcept {
    for (const RankImage& r : ranks) {
      if (!r.reclaimed.empty()) return true;
    }
    return false;
  }
};
struct NamespaceImage {
  std::uint32_t id = 0;  // 1, 2, ... in creation order, never reused
  std::string name;
  SpaceImage space;
  friend bool operator==(const NamespaceImage&, const NamespaceImage&) = default;
};
// The whole state: the default namespace's space (the base, as before namespaces) and the named ones.
struct StateImage : SpaceImage {
  std::uint64_t seq = 0;                  // the last change included
  std::optional<std::int64_t> clock_ms;   // the clock of the last change recorded (allocation_ttl only)
  std::vector<NamespaceImage> namespaces;  // the named ones, by id
  std::uint32_t next_namespace_id = 1;     // the id the next namespace created gets
  friend bool operator==(const StateImage&, const StateImage&) = default;

  bool has_lifecycle() const noexcept {
    if (SpaceImage::has_lifecycle() || clock_ms.has_value()) return true;
    for (const NamespaceImage& n : namespaces) {
      if (n.space.has_lifecycle()) return true;
    }
    return false;
  }
  bool has_reclaim_marks() const noexcept {
    if (SpaceImage::has_reclaim_marks()) return true;
    for (const NamespaceImage& n : namespaces) {
      if (n.space.has_reclaim_marks()) return true;
    }
    return false;
  }
};

// Every call that acts in a namespace takes a NamespaceRef first; the overloads without one act in the
// default namespace (and cost no lookup).
class MetadataState {
 public:
  explicit MetadataState(StateOptions options = {});
  ~MetadataState();
  MetadataState(const MetadataState&) = delete;
  MetadataState& operator=(const MetadataState&) = delete;

  // Worker with num_pages > 0: creates the rank (and the namespace, if it does not exist), or leaves
  // an existing one as it is. Scheduler: changes nothing, num_pages ignored.
  StateResult<InitializeOutcome> initialize(NamespaceRef ns, Rank rank, std::int64_t num_pages,
                                            Role role = Role::worker);
  StateResult<InitializeOutcome> initialize(Rank rank, std::int64_t num_pages, Role role = Role::worker) {
    return initialize(NamespaceRef{}, rank, num_pages, role);
  }

  // One page per key, in order; kNoPage for every key when the pool is short (nothing taken), except
  // that a complete key with a page on this rank always gets that page back.
  StateResult<std::vector<Page>> allocate(NamespaceRef ns, Rank rank, std::span<const BlockKey> keys);
  StateResult<std::vector<Page>> allocate(Rank rank, std::span<const BlockKey> keys) {
    return allocate(NamespaceRef{}, rank, keys);
  }

  // Records rank -> page for each key (in order), then returns pages_to_release to the pool.
  // An allocated page remembers (a 32-bit hash of) the key it was allocated for: confirming it for
  // another key is a conflict, so a stale confirm from before a restart cannot take a page that was
  // handed to another key since.
  // A bare release of a page the allocation TTL reclaimed and that was allocated again since is a
  // conflict (nothing applied): it cannot be told from the late release of the writer whose
  // allocation was reclaimed. A keyed release (release_keys, sorted by index) frees its page only
  // while it is allocated for that key, and is otherwise late (counted, nothing freed, no error),
  // except that a mapped or draining page is kept (kept_mapped), as a bare release of it is.
  // A key under a read lease that moves to another page leaves its old page draining until the
  // lease ends (a reader told the old page may still be reading it).
  StateResult<ConfirmOutcome> confirm_write(NamespaceRef ns, Rank rank, std::span<const Confirmation> confirmations,
                                            std::span<const Page> pages_to_release,
                                            std::span<const ReleaseKey> release_keys = {});
  StateResult<ConfirmOutcome> confirm_write(Rank rank, std::span<const Confirmation> confirmations,
                                            std::span<const Page> pages_to_release,
                                            std::span<const ReleaseKey> release_keys = {}) {
    return confirm_write(NamespaceRef{}, rank, confirmations, pages_to_release, release_keys);
  }

  // True for complete keys only.
  std::vector<bool> batch_exists(NamespaceRef ns, std::span<const std::string> keys) const;
  std::vector<bool> batch_exists(std::span<const std::string> keys) const { return batch_exists(NamespaceRef{}, keys); }
  // The same, for keys held elsewhere (the server's decoder yields views into the request body).
  std::vector<bool> batch_exists(NamespaceRef ns, std::span<const std::string_view> keys) const;
  std::vector<bool> batch_exists(std::span<const std::string_view> keys) const {
    return batch_exists(NamespaceRef{}, keys);
  }

  // The rank's page of each complete key, otherwise nullopt.
  StateResult<std::vector<std::optional<Page>>> get_locations(NamespaceRef ns, Rank rank,
                                                              std::span<const std::string> keys) const;
  StateResult<std::vector<std::optional<Page>>> get_locations(NamespaceRef ns, Rank rank,
                                                              std::span<const std::string_view> keys) const;
  StateResult<std::vector<std::optional<Page>>> get_locations(Rank rank, std::span<const std::string> keys) const {
    return get_locations(NamespaceRef{}, rank, keys);
  }
  StateResult<std::vector<std::optional<Page>>> get_locations(Rank rank,
                                                              std::span<const std::string_view> keys) const {
    return get_locations(NamespaceRef{}, rank, keys);
  }

  // Removes each key from every lookup at once (an extension, like SGLang's delete_keys): true for a
  // key that existed. Its pages return to their pools, or drain back when its read lease ends.
  std::vector<bool> delete_keys(NamespaceRef ns, std::span<const std::string> keys);
  std::vector<bool> delete_keys(NamespaceRef ns, std::span<const std::string_view> keys);
  std::vector<bool> delete_keys(std::span<const std::string> keys) { return delete_keys(NamespaceRef{}, keys); }
  std::vector<bool> delete_keys(std::span<const std::string_view> keys) { return delete_keys(NamespaceRef{}, keys); }

  // Forgets every rank and key of the namespace, as a restart does (a namespace that does not exist:
  // nothing changes, nothing is recorded).
  void clear(NamespaceRef ns);
  void clear() { clear(NamespaceRef{}); }
  // Forgets everything: every named namespace dropped, the default one cleared.
  void clear_all();

  // Extension (POST /rank/{rank}/drop): forgets one rank, its pages and its keys' mappings on it;
  // keys left with no mapping go. Later keys count one rank fewer in their tp_world_size.
  DropOutcome drop_rank(NamespaceRef ns, Rank rank);
  DropOutcome drop_rank(Rank rank) { return drop_rank(NamespaceRef{}, rank); }

  // Extension (POST /namespaces/{name}/drop): removes a named namespace and everything in it
  // (dropped false for one that does not exist). The default one is refused (invalid_argument).
  StateResult<NamespaceDropOutcome> drop_namespace(std::string_view name);

  // Durability (docs/design.md, "Durable formats"): the state does no I/O; a journal subscribes to its changes and replays them.
  // Set before any call that changes the state; an empty sink stops the records.
  void set_change_sink(ChangeSink sink);
  // Applies a recorded change, checking that it fits (the page taken is the pool's front, a confirmed
  // page is allocated or orphaned...): an error means the record does not belong after this state.
  // The change's seq must follow the state's. Not handed to the sink, unless `to_sink` (an HA
  // standby applying the replicated log keeps a journal of it, as the leader did).
  StateResult<void> apply(const Change& change, bool to_sink = false);
  // The image at one instant. `at_instant` runs under the exclusive lock at that instant (a journal
  // switches files there); the key names are copied afterwards in chunks, so writers wait only for
  // the page tables to be copied.
  StateImage export_image(const std::function<void(std::uint64_t seq)>& at_instant = {}) const;
  // Replaces the whole state with an image, after checking it is consistent.
  StateResult<void> import_image(StateImage image);
  // After recovery (images and records), with the change sink set: leases and recency were not
  // recorded, so every complete key counts as leased for one lease period from now, and draining
  // pages drain one lease period from now (at once without leases, recorded), so that a reader the
  // restart caught between a lookup and its read stays safe. Reclaim times were kept.
  void restarted();
  // An HA standby's state moves only by its leader's log: while held, nothing expires by this
  // process's clock (no lease ends, no reclaim, no key's TTL), so that reading it (/metrics) records
  // nothing the log does not have. A new leader lets go before restarted(). Not held by default.
  void hold_clock(bool held);
  std::uint64_t seq() const;  // the last change applied

  // Introspection, for tests, metrics and the server. A namespace that does not exist has nothing.
  std::optional<RankStats> rank_stats(NamespaceRef ns, Rank rank) const;
  std::optional<RankStats> rank_stats(Rank rank) const { return rank_stats(NamespaceRef{}, rank); }
  std::vector<std::pair<Rank, RankStats>> all_rank_stats(NamespaceRef ns) const;  // sorted by rank
  std::vector<std::pair<Rank, RankStats>> all_rank_stats() const { return all_rank_stats(NamespaceRef{}); }
  std::optional<PageState> page_state(NamespaceRef ns, Rank rank, Page page) const;
  std::optional<PageState> page_state(Rank rank, Page page) const { return page_state(NamespaceRef{}, rank, page); }
  // The key mapping it, if any.
  std::optional<std::string> page_owner(NamespaceRef ns, Rank rank, Page page) const;
  std::optional<std::string> page_owner(Rank rank, Page page) const { return page_owner(NamespaceRef{}, rank, page); }
  // Whether each page (kNoPage aside) is still held on `rank` for the key beside it: allocated for it
  // (the page remembers its key's hash) or mapped to it. One lock for the whole batch. The server
  // gives a repeated request id's allocate answer again only while this holds.
  bool holds(NamespaceRef ns, Rank rank, std::span<const Page> pages, std::span<const BlockKey> keys) const;
  bool holds(Rank rank, std::span<const Page> pages, std::span<const BlockKey> keys) const {
    return holds(NamespaceRef{}, rank, pages, keys);
  }
  // The pool, front first; O(num_pages): tests, debugging.
  std::vector<Page> free_pages(NamespaceRef ns, Rank rank) const;
  std::vector<Page> free_pages(Rank rank) const { return free_pages(NamespaceRef{}, rank); }
  std::optional<KeyInfo> key_info(NamespaceRef ns, std::string_view key) const;
  std::optional<KeyInfo> key_info(std::string_view key) const { return key_info(NamespaceRef{}, key); }
  // POST /keys/status: key_info of each key (nullopt: unknown), under one lock; a read that takes no
  // lease and moves no recency.
  // `ranks_initialized`, when given, gets ranks_initialized(ns) at the same instant.
  std::vector<std::optional<KeyInfo>> key_status(NamespaceRef ns, std::span<const std::string_view> keys,
                                                 std::size_t* ranks_initialized = nullptr) const;
  std::size_t ranks_initialized(NamespaceRef ns) const;  // what a new key's tp_world_size would be
  StateStats stats(NamespaceRef ns) const;
  StateStats stats() const { return stats(NamespaceRef{}); }
  // Every namespace's stats (the default one included), sorted by name, under one lock.
  std::vector<std::pair<std::string, StateStats>> all_stats() const;
  // Every namespace (the default one included), sorted by name.
  std::vector<NamespaceSummary> namespaces() const;
  std::optional<std::string> namespace_name(std::uint32_t id) const;  // the default's is kDefaultNamespace
  std::size_t key_count() const;   // keys that exist in all namespaces (deleted and draining ones not counted)
  std::size_t rank_count() const;  // ranks of all namespaces
  const StateOptions& options() const noexcept;

 private:
  struct Core;
  struct Impl;
  // The one body of each call taking keys as std::string or std::string_view (metadata_state.cpp).
  template <class Key>
  std::vector<bool> exists_of(NamespaceRef ns, std::span<const Key> keys) const;
  template <class Key>
  StateResult<std::vector<std::optional<Page>>> locations_of(NamespaceRef ns, Rank rank,
                                                             std::span<const Key> keys) const;
  template <class Key>
  std::vector<bool> delete_of(NamespaceRef ns, std::span<const Key> keys);
  std::unique_ptr<Core> core_;
};

}  // namespace hf3fs_meta
