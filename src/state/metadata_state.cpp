// MetadataState: see include/hf3fs_meta/state.hpp and PROTOCOL.md, "State model".
//
// Layout, chosen so that every operation costs O(1) per page and per key and nothing scans a pool:
// - per rank, three uint32 arrays of num_pages entries (12 bytes a page): a ring buffer holding the
//   free pool in order (front out, back in), a page table holding, for each page, either the id of
//   the key that maps it or one of three markers (free, allocated, orphaned), and for an allocated
//   page a 32-bit hash of the key it was allocated for (written at allocation only, so a new rank
//   costs nothing to fill). "Is this page free?"
//   is one load from the page table, which is what lets a release skip a page already in the pool
//   without searching it (vLLM's O(n) membership test).
// - keys: a table from the key's hash to a dense key id (state/key_index.hpp: 8-byte slots, whose
//   cache misses a call can start all at once), and a record per id holding the key's bytes, its
//   hash, tp_world_size and the key's (rank slot, page) list. The page table stores ids, not
//   pointers, so a conflict can name the other key and a page costs 4 bytes. Ids of removed keys
//   are reused, their memory freed.
// - the cache lifecycle (issue 11; all of it off by default): see "Lifecycle" below.
// - one reader-writer lock (a waiting writer goes first): writers (initialize, allocate,
//   confirm_write, clear) exclusive, readers (batch_exists, get_locations, introspection) shared.
//   Every call holds it once, so each call is atomic. What does not need the state is done outside
//   it: hashing the keys, finding duplicates, building a new rank's arrays, freeing what clear()
//   dropped. bench_state's BM_WorkerCycle with 1 and 2 threads shows what the lock costs; critical
//   sections are a few microseconds per batch, so finer locking (per rank) has not been worth its
//   complexity so far.
#include "hf3fs_meta/state.hpp"

#include "internal/field_text.hpp"
#include "state/key_index.hpp"

#if defined(__GLIBC__)
#include <pthread.h>  // WriterFirstMutex
#endif

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/container/small_vector.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

namespace hf3fs_meta {
namespace {

// Page-table markers; every smaller value is a key id. They are the image's (StateImage), so that a
// page table is exported and imported by copying it.
constexpr std::uint32_t kFree = kImageFree;
constexpr std::uint32_t kAllocated = kImageAllocated;
constexpr std::uint32_t kOrphaned = kImageOrphaned;
constexpr std::uint32_t kKeyIdLimit = kOrphaned;  // key ids are below this
constexpr std::uint32_t kNone = 0xFFFFFFFFu;      // "no page" / "no id" in scratch data
// In confirm_write's page overlay (whose values are otherwise local key indexes or kOrphaned): a page
// a leased key left in this call, draining.
constexpr std::uint32_t kOverlayDraining = kAllocated;

// What a removed key's record keeps for the next key given its id.
constexpr std::size_t kKeptNameBytes = 64;
constexpr std::size_t kKeptPageEntries = 8;
// Inside the record, no heap block: vLLM's keys (32 hex digits), and one rank's page.
constexpr std::size_t kInlineNameBytes = 32;
constexpr std::size_t kInlinePages = 1;

// Pages are 32-bit inside; a rank can never hold more than this, whatever the options say.
constexpr std::int64_t kPageLimit = std::numeric_limits<std::uint32_t>::max();

// A key with its hash, computed once per key per call and kept in the table: growing the table then
// rehashes without touching (or re-reading) the key bytes, and a probe compares hashes before bytes.
struct HashedKey {
  std::string_view name;
  std::size_t hash = 0;

  // What an allocated page remembers of its key: a collision (one in 2^32 for a wrong key) lets a
  // wrong confirm through, as before this check existed; it never refuses a right one.
  // It is also the key's tag in the key table.
  static std::uint32_t short_hash_of(std::size_t h) noexcept { return static_cast<std::uint32_t>(h ^ (h >> 32)); }
  std::uint32_t short_hash() const noexcept { return short_hash_of(hash); }

  explicit HashedKey(std::string_view s) : name(s), hash(std::hash<std::string_view>{}(s)) {}
  HashedKey(std::string_view s, std::size_t h) : name(s), hash(h) {}
};

struct HashedKeyHash {
  std::size_t operator()(const HashedKey& k) const noexcept { return k.hash; }
};

struct HashedKeyEqual {
  bool operator()(const HashedKey& a, const HashedKey& b) const noexcept {
    return a.hash == b.hash && a.name == b.name;
  }
};

template <class V>
using KeyMap = boost::unordered_flat_map<HashedKey, V, HashedKeyHash, HashedKeyEqual>;

struct RankPage {
  std::uint32_t slot;  // index of the rank in Impl::ranks
  std::uint32_t page;
};

// Where a key stands in the lifecycle: its pages in their ranks' LRU lists (complete, evictable), in
// the lease list (not evictable until the lease ends), or neither (incomplete, or nothing is on).
enum class Where : std::uint8_t { none, lru, leased };

// A key's bytes, inside the record up to kInlineNameBytes.
class KeyName {
 public:
  std::string_view view() const noexcept { return {bytes_.data(), bytes_.size()}; }
  std::string str() const { return std::string(view()); }
  const char* data() const noexcept { return bytes_.data(); }
  bool empty() const noexcept { return bytes_.empty(); }
  void assign(std::string_view s) { bytes_.assign(s.begin(), s.end()); }
  // A long buffer is freed; a short one stays for the id's next key.
  void forget() {
    if (bytes_.capacity() > kKeptNameBytes) {
      decltype(bytes_)().swap(bytes_);
    } else {
      bytes_.clear();
    }
  }

 private:
  boost::container::small_vector<char, kInlineNameBytes> bytes_;
};

// Two cache lines. The name (up to kInlineNameBytes) and the first page inside the record, not in
// heap blocks of their own: 145 bytes a key instead of 193 (bench_state's BM_BytesPerKey). An
// eviction of a key with one page and a short name reads the first line, and the second only to
// clear the name (or to copy it into the change record with --data-dir); longer names and keys on
// several ranks keep a heap block besides.
struct alignas(64) KeyRecord {
  boost::container::small_vector<RankPage, kInlinePages> pages;  // one entry per rank the key is mapped on
  std::size_t hash = 0;  // of name: removing the key from key_ids needs no rehash
  // Lifecycle: clock times in milliseconds.
  std::int64_t lease_end = 0;
  std::uint32_t tp_world_size = 0;
  // Lifecycle: the lease list's links (key ids).
  std::uint32_t lease_prev = kNone;
  std::uint32_t lease_next = kNone;
  Where where = Where::none;
  bool live = false;  // in key_ids; false for a free id and for a deleted key draining under a lease
  // Second line: read by a lookup only when 32 bits of the hash match, and with a TTL.
  // With a TTL: the event (TimedKey::stamp) of its creation, or of its ceasing to be complete.
  std::uint64_t incomplete_stamp = 0;
  KeyName name;

  bool complete() const noexcept { return pages.size() == tp_world_size; }
  const RankPage* on(std::uint32_t slot) const noexcept {
    for (const auto& rp : pages) {
      if (rp.slot == slot) return &rp;
    }
    return nullptr;
  }
  RankPage* on(std::uint32_t slot) noexcept {
    return const_cast<RankPage*>(static_cast<const KeyRecord*>(this)->on(slot));
  }
};
static_assert(sizeof(KeyRecord) == 128, "two cache lines");

// Key records by id, in fixed-size chunks: indexing is two loads, and growing never moves records
// (a std::vector would move a million of them at once; a std::deque's 512-byte blocks hold four).
class KeyRecords {
 public:
  std::size_t size() const noexcept { return size_; }
  KeyRecord& operator[](std::uint32_t id) noexcept { return chunks_[id >> kShift][id & kMask]; }
  const KeyRecord& operator[](std::uint32_t id) const noexcept { return chunks_[id >> kShift][id & kMask]; }
  // The next id's record, as constructed (records are never moved).
  KeyRecord& emplace_back() {
    if ((size_ & kMask) == 0) chunks_.push_back(std::make_unique<KeyRecord[]>(kMask + 1));
    return chunks_.back()[size_++ & kMask];
  }

 private:
  static constexpr std::size_t kShift = 10;
  static constexpr std::size_t kMask = (std::size_t{1} << kShift) - 1;
  std::vector<std::unique_ptr<KeyRecord[]>> chunks_;
  std::size_t size_ = 0;
};

struct RankData {
  Rank rank = 0;
  std::uint32_t num_pages = 0;
  std::unique_ptr<std::uint32_t[]> ring;   // the free pool: free_count pages from head, wrapping
  // per page: key id, kFree, kAllocated or kOrphaned. A vector, so that an imported image's is moved in.
  std::vector<std::uint32_t> owner;
  std::unique_ptr<std::uint32_t[]> allocated_for;  // per kAllocated page: short_hash() of its key
  std::uint32_t head = 0;
  std::uint32_t free_count = 0;
  std::uint32_t allocated = 0;
  std::uint32_t mapped = 0;
  std::uint32_t orphaned = 0;
  std::uint32_t draining = 0;
  std::uint64_t kept_on_release = 0;
  // Eviction: the pages of complete, unleased keys, least recently used first, as a list threaded
  // through two per-page arrays (8 bytes a page), so that a use or an eviction is O(1) per page.
  std::unique_ptr<std::uint32_t[]> lru_prev;
  std::unique_ptr<std::uint32_t[]> lru_next;
  std::uint32_t lru_head = kNone;
  std::uint32_t lru_tail = kNone;
  std::uint32_t lru_size = 0;
  // TTL: the event (TimedPage::stamp) of each page's becoming allocated or orphaned (8 bytes a page).
  std::unique_ptr<std::uint64_t[]> stamp;
  // TTL: a bit per page, set when the TTL reclaims the page and cleared when a confirm maps it or a
  // release frees it: an allocated page with its bit set was allocated after a reclaim, and a bare
  // release of it may be the late one of the writer whose allocation was reclaimed. Made at the
  // rank's first reclaim, so that a rank without one costs nothing. Replay sets it as the original
  // did (page_reclaimed, confirmed); an image holds the set bits (RankImage::reclaimed).
  std::unique_ptr<std::uint64_t[]> reclaimed;

  // A new rank: every page free, the pool in page order.
  RankData(Rank r, std::uint32_t n, bool lru = false, bool timed = false)
      : RankData(r, std::vector<std::uint32_t>(n, kFree), lru, timed) {
    std::iota(ring.get(), ring.get() + n, std::uint32_t{0});
  }
  // import_image's: the page table is the image's, moved in, and import_image writes the pool
  // itself. Copying the one or filling the other here first would write (and fault in) every page of
  // both arrays once more, ring pages past the pool's end included, which nothing else touches.
  RankData(Rank r, std::vector<std::uint32_t> page_table, bool lru, bool timed)
      : rank(r),
        num_pages(static_cast<std::uint32_t>(page_table.size())),
        ring(std::make_unique_for_overwrite<std::uint32_t[]>(num_pages)),
        owner(std::move(page_table)),
        allocated_for(std::make_unique_for_overwrite<std::uint32_t[]>(num_pages)),
        free_count(num_pages) {
    if (lru) {
      lru_prev = std::make_unique_for_overwrite<std::uint32_t[]>(num_pages);
      lru_next = std::make_unique_for_overwrite<std::uint32_t[]>(num_pages);
    }
    if (timed) stamp = std::make_unique_for_overwrite<std::uint64_t[]>(num_pages);
  }

  void lru_push_back(std::uint32_t page) noexcept {
    lru_prev[page] = lru_tail;
    lru_next[page] = kNone;
    (lru_tail == kNone ? lru_head : lru_next[lru_tail]) = page;
    lru_tail = page;
    ++lru_size;
  }
  void lru_remove(std::uint32_t page) noexcept {
    const std::uint32_t p = lru_prev[page];
    const std::uint32_t n = lru_next[page];
    (p == kNone ? lru_head : lru_next[p]) = n;
    (n == kNone ? lru_tail : lru_prev[n]) = p;
    --lru_size;
  }
  // A key in the list moved to another page on this rank: the new page takes the old one's place.
  void lru_replace(std::uint32_t old_page, std::uint32_t page) noexcept {
    const std::uint32_t p = lru_prev[old_page];
    const std::uint32_t n = lru_next[old_page];
    lru_prev[page] = p;
    lru_next[page] = n;
    (p == kNone ? lru_head : lru_next[p]) = page;
    (n == kNone ? lru_tail : lru_prev[n]) = page;
  }

  std::uint32_t pop_front() noexcept {
    assert(free_count > 0);
    const std::uint32_t page = ring[head];
    head = head + 1 == num_pages ? 0 : head + 1;
    --free_count;
    return page;
  }
  // Each page is in the pool at most once (its page-table entry says kFree exactly then), so the
  // ring never holds more than num_pages entries.
  void push_back(std::uint32_t page) noexcept {
    assert(free_count < num_pages);
    const std::uint64_t tail = std::uint64_t{head} + free_count;
    ring[tail >= num_pages ? tail - num_pages : tail] = page;
    ++free_count;
  }
  bool in_range(Page page) const noexcept { return page >= 0 && page < Page{num_pages}; }

  std::size_t reclaimed_words() const noexcept { return (std::size_t{num_pages} + 63) / 64; }
  bool after_reclaim(std::uint32_t page) const noexcept {
    return reclaimed && ((reclaimed[page >> 6] >> (page & 63)) & 1) != 0;
  }
  void set_after_reclaim(std::uint32_t page) {
    if (!reclaimed) reclaimed = std::make_unique<std::uint64_t[]>(reclaimed_words());
    reclaimed[page >> 6] |= std::uint64_t{1} << (page & 63);
  }
  void clear_after_reclaim(std::uint32_t page) noexcept {
    if (reclaimed) reclaimed[page >> 6] &= ~(std::uint64_t{1} << (page & 63));
  }
  // The set bits, ascending (an image's RankImage::reclaimed).
  std::vector<std::uint32_t> reclaim_marks() const {
    std::vector<std::uint32_t> pages;
    if (!reclaimed) return pages;
    for (std::size_t w = 0; w < reclaimed_words(); ++w) {
      for (std::uint64_t bits = reclaimed[w]; bits != 0; bits &= bits - 1) {
        pages.push_back(static_cast<std::uint32_t>(w * 64 + static_cast<unsigned>(std::countr_zero(bits))));
      }
    }
    return pages;
  }
  // An allocated or orphaned page (`was`: which) back to the end of the pool (a release, or a reclaim).
  // Inlined: a call per page made bench_state's Release1000Into1M a quarter slower. kMayBeReclaimed
  // false: the caller knows the rank has no reclaim bits (a loop then tests it once, not per page).
  template <bool kMayBeReclaimed = true>
  [[gnu::always_inline]] void to_pool(std::uint32_t page, std::uint32_t was) noexcept {
    if (was == kAllocated) {
      --allocated;
    } else {
      --orphaned;
    }
    owner[page] = kFree;
    if constexpr (kMayBeReclaimed) clear_after_reclaim(page);
    push_back(page);
  }
};

// Per-call scratch, reused by each thread so that a call allocates nothing in the steady state.
struct LocalKey {
  HashedKey key;
  std::uint32_t id = kNone;    // the key's id, kNone while it does not exist yet
  std::uint32_t page = kNone;  // the key's page on this rank as the call has left it so far
};

struct Scratch {
  KeyMap<std::uint32_t> seen;  // key -> first index (allocate) or local key index (confirm_write)
  boost::unordered_flat_map<std::uint32_t, std::uint32_t> page_overlay;  // page -> local key or kOrphaned
  std::vector<HashedKey> hashed;        // the call's keys, hashed before the lock is taken
  std::vector<std::uint32_t> local_of;  // confirmation index -> local key index
  std::vector<LocalKey> locals;
  std::vector<std::uint32_t> pages;  // allocate with the lifecycle on: each key's complete page, or kNone
  // The change record's items, filled only while a change sink is set.
  std::vector<AllocatedItem> allocated;
  std::vector<ConfirmedItem> confirmed;
  std::vector<std::uint32_t> released;
  std::vector<std::string_view> deleted;
  // confirm_write with read leases: the pages leased keys moved away from, which drain (page, the
  // draining record's id).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> drains;
  std::vector<std::uint32_t> release_hashes;  // confirm_write: each keyed release's key, short_hash()

  void reset() {
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
};

// Not reentrant: nothing a call reaches while it uses its scratch (advance(), the change sink, the
// lifecycle's removals) may call scratch(), which would clear the call's buffers under it.
Scratch& scratch() {
  thread_local Scratch s;
  s.reset();
  return s;
}

// Hashing is the costliest part of a lookup that does not need the state: done before locking.
template <class Keys, class Name>
const std::vector<HashedKey>& hash_all(Scratch& s, const Keys& keys, Name name) {
  s.hashed.reserve(keys.size());
  for (const auto& k : keys) s.hashed.emplace_back(name(k));
  return s.hashed;
}

StateError make_error(StateErrc kind, std::string message, Rank rank,
                      std::optional<std::size_t> index = std::nullopt) {
  return StateError{kind, std::move(message), rank, index};
}

StateError not_initialized(Rank rank) {
  return make_error(StateErrc::not_initialized, "Rank " + std::to_string(rank) + " not initialized", rank);
}

std::string out_of_range(std::string_view field, std::size_t index, Page page, const RankData& r) {
  return internal::indexed(field, index) + ": page " + std::to_string(page) +
         " is outside 0.." + std::to_string(Page{r.num_pages} - 1) + " on rank " + std::to_string(r.rank);
}

RankStats stats_of(const RankData& r) {
  return RankStats{r.num_pages, r.free_count, r.allocated, r.mapped, r.orphaned, r.draining, r.kept_on_release};
}

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

// Lifecycle state that clear() forgets with the ranks and keys.
struct Lifecycle {
  std::uint32_t lease_head = kNone;  // leases in the order they began, which is the order they end
  std::uint32_t lease_tail = kNone;
  std::uint64_t leased = 0;
  std::uint64_t complete = 0;          // live complete keys
  std::vector<std::uint32_t> free_ids;  // ids of removed keys, for reuse
  std::deque<TimedPage> timed_pages;
  std::deque<TimedKey> timed_keys;
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

}  // namespace

struct MetadataState::Impl {
  StateOptions options;
  mutable WriterFirstMutex mutex;

  boost::unordered_flat_map<Rank, std::uint32_t> rank_slots;
  std::vector<std::unique_ptr<RankData>> ranks;  // by slot; null once dropped (slots are never reused)
  internal::KeyIndex key_ids;  // tag: HashedKey::short_hash()
  KeyRecords keys;
  std::int64_t total_pages = 0;  // of all ranks
  Lifecycle life;
  Counters counters;
  std::vector<std::uint32_t> victims;  // before_allocate's, under the exclusive lock
  // Durability: the change records' sink and number, and the export's check that no key id was
  // freed (and so maybe reused) while it copied names outside the lock.
  ChangeSink sink;
  std::uint64_t seq = 0;    // changes applied
  std::uint64_t epoch = 0;  // bumped whenever a key id is freed or every id is replaced (clear, import)
  // Fixed at construction from the options.
  bool lifecycle = false;  // any of eviction, leases, TTL on
  bool lru = false;
  std::int64_t lease_ms = 0;
  std::int64_t ttl_ms = 0;
  std::int64_t now = std::numeric_limits<std::int64_t>::min() / 4;  // the latest clock reading
  std::uint64_t stamps = 0;                                         // of timed events, never reused
  // With a TTL: the clock reading the records carry (ChangeKind::clock), so that a replay times what
  // it replays as the original did.
  std::optional<std::int64_t> recorded_now;

  explicit Impl(StateOptions o = {}) : options(std::move(o)) {
    options.max_pages = std::min(options.max_pages, kPageLimit);
    lru = options.eviction == Eviction::lru;
    lease_ms = std::max<std::int64_t>(0, options.read_lease.count());
    ttl_ms = std::max<std::int64_t>(0, options.allocation_ttl.count());
    lifecycle = lru || lease_ms > 0 || ttl_ms > 0;
  }

  // What clear(), a replayed clear and import_image() replace (not the options, counters, sink or
  // numbering). One list, so that a new member is swapped everywhere or nowhere.
  void swap_contents(Impl& other) noexcept {
    std::swap(rank_slots, other.rank_slots);
    std::swap(ranks, other.ranks);
    std::swap(key_ids, other.key_ids);
    std::swap(keys, other.keys);
    std::swap(total_pages, other.total_pages);
    std::swap(life, other.life);
  }

  // Under the exclusive lock, once a call has changed the state.
  void emit(Change& change) {
    if (ttl_ms > 0 && recorded_now != now) {
      recorded_now = now;
      Change tick;
      tick.kind = ChangeKind::clock;
      tick.clock_ms = now;
      tick.seq = ++seq;
      if (sink) sink(tick);
    }
    change.seq = ++seq;
    if (sink) sink(change);
  }

  // Under the exclusive lock. See drop_rank. `gone` takes the rank's data, to be freed by the caller.
  DropOutcome drop(std::uint32_t slot, std::unique_ptr<RankData>& gone) {
    RankData& r = *ranks[slot];
    DropOutcome outcome{true, r.num_pages, 0, 0};
    for (std::uint32_t page = 0; page < r.num_pages; ++page) {
      const std::uint32_t id = r.owner[page];
      if (id >= kKeyIdLimit) continue;
      ++outcome.mappings;
      KeyRecord& k = keys[id];
      const bool was_complete = k.complete();
      if (k.live && k.where == Where::lru) lru_unlink(id);  // while its page on this rank is still listed
      const auto on_slot = [&](const RankPage& rp) { return rp.slot == slot; };
      k.pages.erase(std::remove_if(k.pages.begin(), k.pages.end(), on_slot), k.pages.end());
      if (!k.live) continue;  // deleted, draining under a lease: its page goes with the rank
      if (k.pages.empty()) {
        ++outcome.keys_removed;
        if (was_complete) --life.complete;
        if (k.where == Where::leased) lease_unlink(id);
        key_ids.erase(HashedKey::short_hash_of(k.hash), id);
        k.live = false;
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

  // The lifecycle's part of an image (StateImage): what is current of the timed events, in their
  // order, and the draining keys. Under the lock.
  void export_lifecycle(const std::vector<std::uint32_t>& index_of_slot, StateImage& image) const {
    for (std::uint32_t id = life.lease_head; id != kNone; id = keys[id].lease_next) {
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
    if (ttl_ms > 0) image.clock_ms = recorded_now;
  }

  // Import: the image's reclaim times, checked, in the order they were timed; with a TTL, an
  // allocated or orphaned page or an incomplete key the image has no time for is timed now.
  std::optional<std::string> import_timed(const StateImage& image, const std::vector<bool>& draining) {
    std::vector<TimedPage> pages;
    std::vector<std::vector<bool>> page_timed(ranks.size());
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    for (const TimedPageImage& e : image.timed_pages) {
      if (e.rank_index >= ranks.size() || e.page >= ranks[e.rank_index]->num_pages) return "timed page out of range";
      RankData& r = *ranks[e.rank_index];
      const std::uint32_t marker = r.owner[e.page];
      std::vector<bool>& seen = page_timed[e.rank_index];
      seen.resize(r.num_pages, false);
      if ((marker != kAllocated && marker != kOrphaned) || seen[e.page] || e.at < last) {
        return "timed page " + std::to_string(e.page) + " of rank " + std::to_string(r.rank);
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
        return "timed key id " + std::to_string(e.id);
      }
      key_timed[e.id] = true;
      last = e.at;
      timed_keys.push_back(TimedKey{e.at, 0, e.id});
    }
    if (ttl_ms == 0) return std::nullopt;
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
    std::stable_sort(timed_keys.begin(), timed_keys.end(), [](const TimedKey& a, const TimedKey& b) { return a.at < b.at; });
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
    return std::nullopt;
  }

  // Only under the lock.
  std::uint32_t slot_of(Rank rank) const {
    const auto it = rank_slots.find(rank);
    return it == rank_slots.end() ? kNone : it->second;
  }
  std::uint32_t id_of(const HashedKey& key) const {
    static_assert(internal::KeyIndex::kNone == kNone);
    return key_ids.find(key.short_hash(), [&](std::uint32_t id) {
      const KeyRecord& k = keys[id];
      return k.hash == key.hash && k.name.view() == key.name;
    });
  }
  // Starts the cache misses of the keys' lookups together, before the lookups wait for each in turn.
  void prefetch(const std::vector<HashedKey>& hashed) const noexcept {
    for (const HashedKey& key : hashed) key_ids.prefetch(key.short_hash());
  }
  // For a replayed batch: each lookup waits on three misses in turn (the key's slot, its record, its
  // name and page list). Each level's misses are started for every key of the batch before the next
  // level needs them, so that they overlap. Only loads: which id a tag leads to is checked later.
  void prefetch_records(const std::vector<HashedKey>& hashed) const noexcept {
    prefetch(hashed);
    auto first_with_tag = [&](const HashedKey& key) {
      return key_ids.find(key.short_hash(), [](std::uint32_t) { return true; });
    };
    for (const HashedKey& key : hashed) {
      if (const std::uint32_t id = first_with_tag(key); id != kNone) internal::touch(&keys[id].hash);
    }
    for (const HashedKey& key : hashed) {
      const std::uint32_t id = first_with_tag(key);
      if (id == kNone) continue;
      const KeyRecord& k = keys[id];
      internal::touch(k.name.data());
      if (!k.pages.empty()) internal::touch(k.pages.data());
    }
  }
  // The page a complete key has on this rank: what allocate and get_locations answer.
  std::uint32_t complete_page(const HashedKey& key, std::uint32_t slot) const {
    const std::uint32_t id = id_of(key);
    if (id == kNone) return kNone;
    const KeyRecord& k = keys[id];
    if (!k.complete()) return kNone;
    const RankPage* rp = k.on(slot);
    return rp ? rp->page : kNone;
  }

  // Readers share the lock, unless the lifecycle is on: then a lookup changes the state (recency,
  // leases) and what expired is processed first, so it takes the lock exclusively.
  class ReadAccess {
   public:
    explicit ReadAccess(Impl& impl) : impl_(impl) {
      if (impl_.lifecycle) {
        impl_.mutex.lock();
        impl_.advance();
      } else {
        impl_.mutex.lock_shared();
      }
    }
    ~ReadAccess() {
      if (impl_.lifecycle) {
        impl_.mutex.unlock();
      } else {
        impl_.mutex.unlock_shared();
      }
    }
    ReadAccess(const ReadAccess&) = delete;
    ReadAccess& operator=(const ReadAccess&) = delete;

   private:
    Impl& impl_;
  };

  // The lookups behind both overloads of batch_exists and get_locations (std::string keys and
  // views), on the call's keys hashed before the lock is taken.
  std::vector<bool> batch_exists(const std::vector<HashedKey>& hashed) {
    std::vector<bool> result(hashed.size(), false);
    ReadAccess access(*this);
    prefetch(hashed);
    for (std::size_t i = 0; i < hashed.size(); ++i) {
      const std::uint32_t id = id_of(hashed[i]);
      result[i] = id != kNone && keys[id].complete();
      if (lifecycle && result[i]) use(id, true);
    }
    return result;
  }
  StateResult<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<HashedKey>& hashed) {
    std::vector<std::optional<Page>> result(hashed.size());
    ReadAccess access(*this);
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
      if (const RankPage* rp = keys[id].on(slot)) {
        result[i] = rp->page;
        use(id, true);
      }
    }
    return result;
  }

  // tp_world_size: the ranks initialized now (a scheduler never creates one, so workers only).
  std::uint32_t create_key(const HashedKey& key, std::uint32_t tp_world_size) {
    const std::uint32_t id = take_id();
    KeyRecord& k = keys[id];
    k.name.assign(key.name);
    k.hash = key.hash;
    k.tp_world_size = tp_world_size;
    k.live = true;
    key_ids.insert(key.short_hash(), id);
    if (ttl_ms > 0) {
      k.incomplete_stamp = ++stamps;
      life.timed_keys.push_back(TimedKey{now, stamps, id});
    }
    return id;
  }
  std::size_t ids_in_use() const noexcept { return keys.size() - life.free_ids.size(); }
  // The id the next key record gets: the last one freed, else a new one.
  std::uint32_t next_id() const noexcept {
    return life.free_ids.empty() ? static_cast<std::uint32_t>(keys.size()) : life.free_ids.back();
  }
  std::uint32_t take_id() {
    const std::uint32_t id = next_id();
    if (life.free_ids.empty()) {
      keys.emplace_back();
    } else {
      life.free_ids.pop_back();
    }
    return id;
  }

  // The server's --max-* flags, which a new rank must fit: why it does not, else nullopt. Checked by
  // initialize and by a replayed rank_created alike (a record naming an absurd rank must not take
  // all the memory). The first check depends on the request alone, the second on the state.
  std::optional<std::string> above_max_pages(std::int64_t num_pages) const {
    if (num_pages <= options.max_pages) return std::nullopt;
    return "num_pages " + std::to_string(num_pages) + " is above the maximum " + std::to_string(options.max_pages);
  }
  std::optional<std::string> no_room_for(Rank rank, std::int64_t num_pages) const {
    if (static_cast<std::int64_t>(rank_slots.size()) >= options.max_ranks) {
      return "rank " + std::to_string(rank) + " would exceed the maximum of " + std::to_string(options.max_ranks) +
             " ranks";
    }
    if (num_pages > options.max_total_pages - total_pages) {
      return "num_pages " + std::to_string(num_pages) + " would bring the pages of all ranks to " +
             std::to_string(total_pages + num_pages) + ", above the maximum " + std::to_string(options.max_total_pages);
    }
    return std::nullopt;
  }

  // Preconditions (checked by validation): page is allocated, orphaned, or already this key's.
  void map_page(RankData& r, std::uint32_t slot, std::uint32_t id, std::uint32_t page) {
    KeyRecord& k = keys[id];
    if (RankPage* rp = k.on(slot)) {
      if (rp->page == page) return;
      // vLLM overwrites the key's page and never frees the old one: it stays owned by nobody.
      if (k.where == Where::lru) r.lru_replace(rp->page, page);
      r.owner[rp->page] = kOrphaned;
      --r.mapped;
      ++r.orphaned;
      if (ttl_ms > 0) timed(r, slot, rp->page, kOrphaned);
      rp->page = page;
    } else {
      const bool was_complete = k.complete();
      if (k.where == Where::lru) lru_unlink(id);  // the key stops being complete
      k.pages.push_back(RankPage{slot, page});
      completeness_changed(id, was_complete);
    }
    const std::uint32_t before = r.owner[page];
    assert(before == kAllocated || before == kOrphaned);
    if (before == kAllocated) {
      --r.allocated;
    } else {
      --r.orphaned;
    }
    r.owner[page] = id;
    r.clear_after_reclaim(page);
    ++r.mapped;
  }

  // ---- Lifecycle: recency, leases, eviction, reclaim, deletion. Every operation is O(1) per page
  // it touches. Only under the exclusive lock.

  std::int64_t read_clock() const {
    const auto t = options.clock ? options.clock()
                                 : std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch());
    return t.count();
  }

  // Processes what expired by now, in the order it happened; at one instant, leases first, then
  // pages, then keys.
  void advance() {
    if (!lifecycle) return;
    now = std::max(now, read_clock());
    constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
    for (;;) {
      const std::int64_t lease = life.lease_head != kNone ? keys[life.lease_head].lease_end : kNever;
      const std::int64_t page = life.timed_pages.empty() ? kNever : life.timed_pages.front().at + ttl_ms;
      const std::int64_t key = life.timed_keys.empty() ? kNever : life.timed_keys.front().at + ttl_ms;
      const std::int64_t first = std::min({lease, page, key});
      if (first > now) return;
      if (lease == first) {
        end_lease(life.lease_head);
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

  void timed(RankData& r, std::uint32_t slot, std::uint32_t page, std::uint32_t marker) {
    r.stamp[page] = ++stamps;
    life.timed_pages.push_back(TimedPage{now, stamps, slot, page, marker});
  }
  // A page allocate took for a key (not handed back).
  void allocated(RankData& r, std::uint32_t slot, std::uint32_t page) {
    if (ttl_ms > 0) timed(r, slot, page, kAllocated);
  }

  void expire_page(const TimedPage& e) {
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
  // An allocated or orphaned page back to its pool.
  void reclaim_page(RankData& r, std::uint32_t page) {
    ++(r.owner[page] == kAllocated ? counters.reclaimed_allocated : counters.reclaimed_orphaned);
    r.to_pool(page, r.owner[page]);
    r.set_after_reclaim(page);
  }

  void expire_key(const TimedKey& e) {
    const KeyRecord& k = keys[e.id];
    if (!k.live || k.complete() || k.incomplete_stamp != e.stamp) return;
    remove_key(e.id, Removal::reclaimed);
  }

  void completeness_changed(std::uint32_t id, bool was_complete) {
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
  void use(std::uint32_t id, bool read) {
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

  void lru_link(std::uint32_t id) {
    KeyRecord& k = keys[id];
    for (const RankPage& rp : k.pages) ranks[rp.slot]->lru_push_back(rp.page);
    k.where = Where::lru;
  }
  void lru_unlink(std::uint32_t id) {
    KeyRecord& k = keys[id];
    for (const RankPage& rp : k.pages) ranks[rp.slot]->lru_remove(rp.page);
    k.where = Where::none;
  }

  void lease_push_back(std::uint32_t id) {
    KeyRecord& k = keys[id];
    k.lease_prev = life.lease_tail;
    k.lease_next = kNone;
    (life.lease_tail == kNone ? life.lease_head : keys[life.lease_tail].lease_next) = id;
    life.lease_tail = id;
    k.where = Where::leased;
    ++life.leased;
  }
  void lease_unlink(std::uint32_t id) {
    KeyRecord& k = keys[id];
    (k.lease_prev == kNone ? life.lease_head : keys[k.lease_prev].lease_next) = k.lease_next;
    (k.lease_next == kNone ? life.lease_tail : keys[k.lease_next].lease_prev) = k.lease_prev;
    k.where = Where::none;
    --life.leased;
  }

  // `journal`: false when replaying the record that says so.
  void end_lease(std::uint32_t id, bool journal = true) {
    lease_unlink(id);
    KeyRecord& k = keys[id];
    if (!k.live) {
      if (journal) {
        Change change;
        change.kind = ChangeKind::key_drained;
        change.key_id = id;
        emit(change);
      }
      free_pages(id, true);
      free_id(id);
    } else if (lru && k.complete()) {
      lru_link(id);
    }
  }

  // Removes a key from every lookup (eviction, deletion, reclaim). Its pages return to the back of
  // their pools now, or, under a read lease, drain back when the lease ends. `journal`: false for a
  // deletion journaled with its batch (keys_deleted), and when replaying.
  void remove_key(std::uint32_t id, Removal why, bool journal = true) {
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
  // `drain`: the pages wait for the key's lease to end (a replay, which has no leases, makes one).
  void remove_key_as(std::uint32_t id, Removal why, bool drain) {
    ++(why == Removal::evicted ? counters.evicted : why == Removal::deleted ? counters.deleted : counters.reclaimed_keys);
    KeyRecord& k = keys[id];
    key_ids.erase(HashedKey::short_hash_of(k.hash), id);
    k.live = false;
    if (k.complete()) --life.complete;
    if (k.where == Where::lru) lru_unlink(id);
    if (drain) {
      for (const RankPage& rp : k.pages) {
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
    free_pages(id, false);
    free_id(id);
  }
  // An orphaned page that a reader may still be reading (its key moved while under a read lease):
  // drains as a removed key's pages do, owned by a key record of its own (no name, in no lookup,
  // never live) whose lease ends with the key's (`leased`, placed beside it in the lease list,
  // which stays in end order), or, replaying (kNone), one lease period from now, as a replayed
  // removal's does (its key_drained record ends it). Returns the record's id.
  std::uint32_t drain_orphan(RankData& r, std::uint32_t slot, std::uint32_t page, std::uint32_t leased) {
    assert(r.owner[page] == kOrphaned);
    const std::uint32_t id = take_id();
    KeyRecord& k = keys[id];
    k.hash = HashedKey(std::string_view()).hash;  // as import_image computes it for a nameless record
    k.tp_world_size = 0;
    k.live = false;
    k.pages.push_back(RankPage{slot, page});
    r.owner[page] = id;
    --r.orphaned;
    ++r.draining;
    if (leased == kNone) {
      k.lease_end = now + lease_ms;
      lease_push_back(id);
      return id;
    }
    KeyRecord& neighbour = keys[leased];
    k.lease_end = neighbour.lease_end;
    k.lease_prev = leased;
    k.lease_next = neighbour.lease_next;
    (k.lease_next == kNone ? life.lease_tail : keys[k.lease_next].lease_prev) = id;
    neighbour.lease_next = id;
    k.where = Where::leased;
    ++life.leased;
    return id;
  }
  void free_pages(std::uint32_t id, bool draining) {
    for (const RankPage& rp : keys[id].pages) {
      RankData& r = *ranks[rp.slot];
      --(draining ? r.draining : r.mapped);
      r.owner[rp.page] = kFree;
      r.push_back(rp.page);
    }
  }
  void free_id(std::uint32_t id) {
    KeyRecord& k = keys[id];
    // Short buffers stay with the id for its next key (a cache that turns over then mallocs nothing
    // per key); long ones are freed. Either way memory is bounded by the ids ever in use at once.
    k.name.forget();
    if (k.pages.capacity() > kKeptPageEntries) {
      decltype(k.pages)().swap(k.pages);
    } else {
      k.pages.clear();
    }
    k.tp_world_size = 0;
    k.where = Where::none;
    life.free_ids.push_back(id);
    ++epoch;
  }

  // Before an allocate of keys on rank r is answered: the keys it reuses (complete, with a page on
  // r) are used in request order, then, with eviction, least recently used keys with a page on r are
  // evicted until the pool holds one page per key. The reused keys are leased, or at the most recent
  // end of r's list: the first lru_size - (reused keys in the list) entries are never this call's.
  // `pages` gets each key's page on r if it is reused, else kNone: the allocate's answer, found with
  // one lookup per key (no victim is a key of the call, so eviction changes none of them).
  void before_allocate(RankData& r, std::uint32_t slot, const std::vector<HashedKey>& hashed, Scratch& s) {
    std::vector<std::uint32_t>& pages = s.pages;
    std::uint32_t reused_in_list = 0;
    pages.resize(hashed.size(), kNone);
    for (std::size_t i = 0; i < hashed.size(); ++i) {
      const std::uint32_t id = id_of(hashed[i]);
      if (id == kNone || !keys[id].complete()) continue;
      const RankPage* rp = keys[id].on(slot);
      if (rp == nullptr) continue;
      pages[i] = rp->page;
      use(id, true);
      if (keys[id].where == Where::lru) ++reused_in_list;
    }
    if (!lru || r.free_count >= hashed.size()) return;
    // Each eviction frees one page of r (a key has one page per rank), so the victims are the first
    // entries of r's list. Nobody touched them lately: what removing them reads and writes (their
    // records, key-table slots, the page lists of keys on several ranks, and names when there is a
    // record to write) are cache misses, started here all together rather than met one after another.
    const std::size_t n = std::min<std::size_t>(hashed.size() - r.free_count, r.lru_size - reused_in_list);
    victims.clear();
    for (std::uint32_t page = r.lru_head; victims.size() < n; page = r.lru_next[page]) {
      victims.push_back(r.owner[page]);
      internal::touch(&keys[victims.back()]);
    }
    if (victims.empty()) return;
    const bool record = static_cast<bool>(sink);
    for (const std::uint32_t id : victims) {
      const KeyRecord& k = keys[id];
      key_ids.prefetch(HashedKey::short_hash_of(k.hash));
      internal::touch(k.pages.data());
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
    for (const std::uint32_t id : victims) {
      assert(keys[id].where == Where::lru);
      remove_key_as(id, Removal::evicted, false);
    }
  }

  PageState page_state(const RankData& r, std::uint32_t page) const {
    switch (const std::uint32_t owner = r.owner[page]) {
      case kFree: return PageState::free;
      case kAllocated: return PageState::allocated;
      case kOrphaned: return PageState::orphaned;
      default: return keys[owner].live ? PageState::mapped : PageState::draining;
    }
  }

  // confirm_write's releases, judged after its confirmations (the scratch's overlay holds the pages
  // they touch). A bare release of a page allocated again after a reclaim is refused: it may be the
  // late release of the writer whose allocation was reclaimed, and would free the new holder's page.
  std::optional<StateError> check_releases(const RankData& r, const Scratch& s, std::span<const Page> pages,
                                           std::span<const ReleaseKey> keyed) const {
    for (std::size_t j = 0; j < pages.size(); ++j) {
      if (!r.in_range(pages[j])) {
        return make_error(StateErrc::invalid_argument, out_of_range("pages_to_release", j, pages[j], r), r.rank, j);
      }
    }
    if (!r.reclaimed && keyed.empty()) return std::nullopt;  // vLLM's releases, no reclaim on the rank yet
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
    return std::nullopt;
  }
  // Applies them: a mapped (or draining) page is kept, whichever the release; a bare release frees
  // an allocated or orphaned page (a free one is skipped); a keyed one frees only a page still
  // allocated for its key (else it is late).
  void release(RankData& r, std::span<const Page> pages, std::span<const ReleaseKey> keyed, Scratch& s,
               ConfirmOutcome& outcome) {
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
        r.template to_pool<decltype(may_be_reclaimed)::value>(page, owner);
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
      return;
    }
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
      r.to_pool(page, owner);
      if (record) s.released.push_back(page);
      ++outcome.released;
    }
  }

  template <class Keys>
  std::vector<bool> delete_keys(const Keys& keys_to_delete) {
    Scratch& s = scratch();
    const auto& hashed = hash_all(s, keys_to_delete, [](std::string_view k) { return k; });
    std::vector<bool> result(hashed.size(), false);
    std::unique_lock lock(mutex);
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
};

MetadataState::MetadataState(StateOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

MetadataState::~MetadataState() = default;

const StateOptions& MetadataState::options() const noexcept { return impl_->options; }

StateResult<InitializeOutcome> MetadataState::initialize(Rank rank, std::int64_t num_pages, Role role) {
  if (role == Role::scheduler) return InitializeOutcome{false};
  // Checked before looking the rank up: an oversized request is refused even for an existing rank.
  if (num_pages <= 0) {
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters", rank);
  }
  const auto refuse = [&](const std::string& reason) {
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters: " + reason, rank);
  };
  if (auto reason = impl_->above_max_pages(num_pages)) return refuse(*reason);
  {
    Impl::ReadAccess access(*impl_);
    if (const std::uint32_t slot = impl_->slot_of(rank); slot != kNone) {
      return InitializeOutcome{false, impl_->ranks[slot]->num_pages};
    }
    // Checked before building the rank (so a refused request costs no memory) and again under the
    // exclusive lock (another rank may have been added meanwhile).
    if (auto reason = impl_->no_room_for(rank, num_pages)) return refuse(*reason);
  }
  // Filling megabytes of page arrays must not stall the other ranks: build first, then insert.
  auto data = std::make_unique<RankData>(rank, static_cast<std::uint32_t>(num_pages), impl_->lru,
                                         impl_->ttl_ms > 0);
  std::unique_lock lock(impl_->mutex);
  impl_->advance();
  if (const std::uint32_t slot = impl_->slot_of(rank); slot != kNone) {
    return InitializeOutcome{false, impl_->ranks[slot]->num_pages};  // another thread won the race
  }
  if (auto reason = impl_->no_room_for(rank, num_pages)) return refuse(*reason);
  impl_->total_pages += num_pages;
  impl_->ranks.reserve(impl_->ranks.size() + 1);
  impl_->rank_slots.emplace(rank, static_cast<std::uint32_t>(impl_->ranks.size()));
  impl_->ranks.push_back(std::move(data));
  Change change;
  change.kind = ChangeKind::rank_created;
  change.rank = rank;
  change.num_pages = static_cast<std::uint32_t>(num_pages);
  impl_->emit(change);
  return InitializeOutcome{true};
}

StateResult<std::vector<Page>> MetadataState::allocate(Rank rank, std::span<const BlockKey> keys) {
  // Hashes and duplicates depend on the batch alone: found before taking the lock; a duplicate is
  // reported after the rank check, which comes first as in vLLM.
  Scratch& s = scratch();
  const auto& hashed = hash_all(s, keys, [](const BlockKey& k) { return std::string_view(k.key); });
  std::optional<StateError> duplicate;
  if (keys.size() > 1) {
    s.seen.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto [it, inserted] = s.seen.try_emplace(hashed[i], static_cast<std::uint32_t>(i));
      if (!inserted) {
        duplicate = make_error(StateErrc::invalid_argument,
                               internal::indexed("keys", i) + ": duplicate key " + internal::quoted(keys[i].key) +
                                   " (also " + internal::indexed("keys", it->second) + ")",
                               rank, i);
        break;
      }
    }
  }
  std::vector<Page> result(keys.size(), kNoPage);

  std::unique_lock lock(impl_->mutex);
  impl_->advance();
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return not_initialized(rank);
  if (duplicate) return std::move(*duplicate);
  RankData& r = *impl_->ranks[slot];
  const bool looked_up = impl_->lifecycle;
  impl_->prefetch(hashed);
  if (looked_up) impl_->before_allocate(r, slot, hashed, s);
  // The page a complete key has on this rank, else kNone.
  const auto existing_page = [&](std::size_t i) {
    return looked_up ? s.pages[i] : impl_->complete_page(hashed[i], slot);
  };

  if (r.free_count < keys.size()) {
    // Nothing is taken; only complete keys already on this rank get an answer.
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::uint32_t existing = existing_page(i);
      if (existing != kNone) result[i] = existing;
    }
    return result;
  }
  const bool record = static_cast<bool>(impl_->sink);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::uint32_t page = r.pop_front();
    const std::uint32_t existing = existing_page(i);
    if (existing != kNone) {
      // As vLLM: the page was taken for the key, then handed back to the end of the pool.
      r.push_back(page);
      result[i] = existing;
    } else {
      r.owner[page] = kAllocated;
      r.allocated_for[page] = hashed[i].short_hash();
      ++r.allocated;
      impl_->allocated(r, slot, page);
      result[i] = page;
    }
    if (record) s.allocated.push_back(AllocatedItem{keys[i].key, page, static_cast<std::uint32_t>(result[i])});
  }
  if (!keys.empty()) {
    Change change;
    change.kind = ChangeKind::allocated;
    change.rank = rank;
    change.allocated = s.allocated;
    impl_->emit(change);
  }
  return result;
}

StateResult<ConfirmOutcome> MetadataState::confirm_write(Rank rank, std::span<const Confirmation> confirmations,
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
  for (const ReleaseKey& keyed : release_keys) s.release_hashes.push_back(HashedKey(keyed.key).short_hash());

  std::unique_lock lock(impl_->mutex);
  impl_->advance();
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return not_initialized(rank);
  RankData& r = *impl_->ranks[slot];

  // Validation: replays the confirmations on an overlay (page -> local key or kOrphaned, and each
  // local key's current page) so that each one is judged against the state the earlier ones leave.
  std::size_t new_keys = 0;
  for (LocalKey& local : s.locals) {
    local.id = impl_->id_of(local.key);
    if (local.id == kNone) {
      ++new_keys;
    } else if (const RankPage* rp = impl_->keys[local.id].on(slot)) {
      local.page = rp->page;
    }
  }
  if (new_keys > kKeyIdLimit - impl_->ids_in_use()) {
    return make_error(StateErrc::invalid_argument, "confirmations: too many keys", rank);
  }
  s.page_overlay.reserve(2 * confirmations.size());
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    const Confirmation& c = confirmations[i];
    // Deleted, or orphaned, under a read lease: a reader may still be reading it.
    const auto draining = [&](std::uint32_t page) {
      return make_error(StateErrc::conflict,
                        "page " + std::to_string(page) + " of key " + c.key + " is draining on rank " +
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
      if (it->second == kOverlayDraining) return draining(page);
      if (it->second != kOrphaned && it->second != l) other = s.locals[it->second].key.name;
    } else {
      const std::uint32_t owner = r.owner[page];
      if (owner == kFree) {
        return make_error(StateErrc::stale,
                          "page " + std::to_string(page) + " of key " + c.key + " is not allocated on rank " +
                              std::to_string(rank),
                          rank, i);
      }
      // An orphaned page is owned by nobody, so confirming it takes nothing from any key: allowed,
      // as vLLM allows it. Refusing it would not protect any data and would break a worker that
      // re-confirms a page its key moved away from.
      if (owner < kKeyIdLimit && owner != local.id && !impl_->keys[owner].live) return draining(page);
      if (owner < kKeyIdLimit && owner != local.id) other = impl_->keys[owner].name.view();
      if (owner == kAllocated && r.allocated_for[page] != local.key.short_hash()) {
        return make_error(StateErrc::conflict,
                          "page " + std::to_string(page) + " of key " + c.key +
                              " was allocated for another key on rank " + std::to_string(rank),
                          rank, i);
      }
    }
    if (other) {
      return make_error(StateErrc::conflict,
                        "page " + std::to_string(page) + " of key " + c.key + " is mapped to key " +
                            std::string(*other) + " on rank " + std::to_string(rank),
                        rank, i);
    }
    if (local.page != kNone && local.page != page) {
      // A reader that looked a leased key up may be reading the page it leaves: that page drains.
      const bool leased = local.id != kNone && impl_->keys[local.id].where == Where::leased;
      s.page_overlay.insert_or_assign(local.page, leased ? kOverlayDraining : kOrphaned);
    }
    s.page_overlay.insert_or_assign(page, l);
    local.page = page;
  }
  if (auto refused = impl_->check_releases(r, s, pages_to_release, release_keys)) return std::move(*refused);

  // Apply. Only an allocation failure (bad_alloc) can interrupt this part.
  ConfirmOutcome outcome;
  const bool record = static_cast<bool>(impl_->sink);
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    LocalKey& local = s.locals[s.local_of[i]];
    std::uint32_t created_tp = 0;
    if (local.id == kNone) {
      created_tp = static_cast<std::uint32_t>(impl_->rank_slots.size());
      local.id = impl_->create_key(local.key, created_tp);
    }
    const auto page = static_cast<std::uint32_t>(confirmations[i].page);
    std::uint32_t left = kNone;  // the page a leased key leaves, which drains
    if (impl_->lease_ms > 0 && created_tp == 0 && impl_->keys[local.id].where == Where::leased) {
      const RankPage* rp = impl_->keys[local.id].on(slot);
      if (rp != nullptr && rp->page != page) left = rp->page;
    }
    impl_->map_page(r, slot, local.id, page);
    if (left != kNone) s.drains.emplace_back(left, impl_->drain_orphan(r, slot, left, local.id));
    if (record) s.confirmed.push_back(ConfirmedItem{confirmations[i].key, page, created_tp});
    ++outcome.confirmed;
  }
  impl_->release(r, pages_to_release, release_keys, s, outcome);
  r.kept_on_release += outcome.kept_mapped;
  Change change;
  change.kind = ChangeKind::confirmed;
  change.rank = rank;
  change.confirmed = s.confirmed;
  change.released = s.released;
  change.kept_mapped = static_cast<std::uint32_t>(outcome.kept_mapped);
  impl_->emit(change);
  for (const auto& [page, id] : s.drains) {
    Change drain;
    drain.kind = ChangeKind::page_draining;
    drain.rank = rank;
    drain.page = page;
    drain.key_id = id;
    impl_->emit(drain);
  }
  return outcome;
}

std::vector<bool> MetadataState::batch_exists(std::span<const std::string> keys) const {
  return impl_->batch_exists(hash_all(scratch(), keys, [](std::string_view k) { return k; }));
}

std::vector<bool> MetadataState::batch_exists(std::span<const std::string_view> keys) const {
  return impl_->batch_exists(hash_all(scratch(), keys, [](std::string_view k) { return k; }));
}

StateResult<std::vector<std::optional<Page>>> MetadataState::get_locations(
    Rank rank, std::span<const std::string> keys) const {
  return impl_->get_locations(rank, hash_all(scratch(), keys, [](std::string_view k) { return k; }));
}

StateResult<std::vector<std::optional<Page>>> MetadataState::get_locations(
    Rank rank, std::span<const std::string_view> keys) const {
  return impl_->get_locations(rank, hash_all(scratch(), keys, [](std::string_view k) { return k; }));
}

std::vector<bool> MetadataState::delete_keys(std::span<const std::string> keys) {
  return impl_->delete_keys(keys);
}

std::vector<bool> MetadataState::delete_keys(std::span<const std::string_view> keys) {
  return impl_->delete_keys(keys);
}

void MetadataState::clear() {
  // Swapped out under the lock, freed after it: releasing gigabytes must not stall other callers.
  Impl old;
  {
    std::unique_lock lock(impl_->mutex);
    impl_->advance();  // what expired before the clear is counted
    impl_->swap_contents(old);
    ++impl_->epoch;
    Change change;
    change.kind = ChangeKind::cleared;
    impl_->emit(change);
  }
}

void MetadataState::restarted() {
  std::unique_lock lock(impl_->mutex);
  Impl& s = *impl_;
  if (s.lifecycle) s.now = std::max(s.now, s.read_clock());
  std::vector<std::uint32_t> draining;
  for (std::uint32_t id = s.life.lease_head; id != kNone; id = s.keys[id].lease_next) {
    if (!s.keys[id].live) draining.push_back(id);
  }
  if (s.lease_ms == 0) {
    for (const std::uint32_t id : draining) s.end_lease(id);  // recorded: the sink is set
    return;
  }
  const std::int64_t end = s.now + s.lease_ms;
  for (const std::uint32_t id : draining) s.keys[id].lease_end = end;
  for (std::uint32_t id = 0; id < s.keys.size(); ++id) {
    KeyRecord& k = s.keys[id];
    if (!k.live || !k.complete()) continue;
    if (k.where == Where::lru) s.lru_unlink(id);
    if (k.where == Where::leased) s.lease_unlink(id);
    k.lease_end = end;
    s.lease_push_back(id);
  }
}

void MetadataState::set_change_sink(ChangeSink sink) {
  std::unique_lock lock(impl_->mutex);
  impl_->sink = std::move(sink);
}

std::uint64_t MetadataState::seq() const {
  std::shared_lock lock(impl_->mutex);
  return impl_->seq;
}

namespace {

StateError unfit(const Change& change, const std::string& why) {
  return make_error(StateErrc::invalid_argument,
                    "change " + std::to_string(change.seq) + " does not fit the state: " + why, change.rank);
}

}  // namespace

StateResult<void> MetadataState::apply(const Change& change) {
  std::unique_lock lock(impl_->mutex);
  Impl& s = *impl_;
  if (change.seq != s.seq + 1) {
    return unfit(change, "expected change " + std::to_string(s.seq + 1));
  }
  if (change.kind == ChangeKind::cleared) {
    Impl empty;
    s.swap_contents(empty);
    ++s.epoch;
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  const std::uint32_t slot = s.slot_of(change.rank);
  const std::string rank_text = "rank " + std::to_string(change.rank);
  if (change.kind == ChangeKind::rank_created) {
    if (slot != kNone) return unfit(change, rank_text + " exists");
    if (change.num_pages == 0) return unfit(change, "num_pages 0");
    if (auto reason = s.above_max_pages(change.num_pages)) return unfit(change, *reason);
    if (auto reason = s.no_room_for(change.rank, change.num_pages)) return unfit(change, *reason);
    s.rank_slots.emplace(change.rank, static_cast<std::uint32_t>(s.ranks.size()));
    s.ranks.push_back(std::make_unique<RankData>(change.rank, change.num_pages, s.lru, s.ttl_ms > 0));
    s.total_pages += change.num_pages;
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  if (change.kind == ChangeKind::clock) {
    s.now = change.clock_ms;  // a replay's clock may go back: it is the original's
    s.recorded_now = change.clock_ms;
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  // Records written without the clock (no TTL then) time what they create as now.
  if (s.ttl_ms > 0 && !s.recorded_now) s.now = std::max(s.now, s.read_clock());
  if (change.kind == ChangeKind::keys_deleted || change.kind == ChangeKind::keys_removed) {
    // keys_deleted: as the record was made, nothing drains (no read lease then).
    const bool deleted = change.kind == ChangeKind::keys_deleted;
    if (!deleted && change.removal != Removal::evicted && change.removal != Removal::reclaimed &&
        change.removal != Removal::deleted) {
      return unfit(change, "unknown removal " + std::to_string(static_cast<int>(change.removal)));
    }
    std::vector<std::uint32_t> ids;
    ids.reserve(change.deleted.size());
    for (const std::string_view key : change.deleted) {
      const std::uint32_t id = s.id_of(HashedKey{key});
      if (id == kNone) return unfit(change, "key " + std::string(key) + " does not exist");
      ids.push_back(id);
    }
    // A key named twice would be removed twice: sorted, so that a batch of a million keys is not
    // checked pairwise.
    std::vector<std::uint32_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
      return unfit(change, "key " + s.keys[*twice].name.str() + " is named twice");
    }
    for (const std::uint32_t id : ids) {
      s.remove_key_as(id, deleted ? Removal::deleted : change.removal, !deleted && change.draining);
    }
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  if (change.kind == ChangeKind::key_drained) {
    const std::uint32_t id = change.key_id;
    if (id >= s.keys.size() || s.keys[id].live || s.keys[id].where != Where::leased) {
      return unfit(change, "key id " + std::to_string(id) + " is not draining");
    }
    s.end_lease(id, false);
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  if (slot == kNone) return unfit(change, rank_text + " does not exist");
  if (change.kind == ChangeKind::rank_dropped) {
    std::unique_ptr<RankData> gone;
    s.drop(slot, gone);
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  RankData& r = *s.ranks[slot];
  if (change.kind == ChangeKind::page_reclaimed) {
    const std::uint32_t marker = change.was == PageState::allocated ? kAllocated
                                 : change.was == PageState::orphaned ? kOrphaned
                                                                     : kFree;
    if (change.page >= r.num_pages || marker == kFree || r.owner[change.page] != marker) {
      return unfit(change, "page " + std::to_string(change.page) + " of " + rank_text + " cannot be reclaimed");
    }
    s.reclaim_page(r, change.page);
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  if (change.kind == ChangeKind::page_draining) {
    if (change.page >= r.num_pages || r.owner[change.page] != kOrphaned) {
      return unfit(change, "page " + std::to_string(change.page) + " of " + rank_text + " is not orphaned");
    }
    if (change.key_id != s.next_id()) {
      return unfit(change, "key id " + std::to_string(change.key_id) + " is not the next one (" +
                               std::to_string(s.next_id()) + ")");
    }
    s.drain_orphan(r, slot, change.page, kNone);
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  // Checked before anything is applied, so that a record that does not fit changes nothing.
  if (change.kind == ChangeKind::allocated) {
    if (change.allocated.size() > r.free_count) return unfit(change, "more pages taken than " + rank_text + " has free");
    for (std::size_t i = 0; i < change.allocated.size(); ++i) {
      const AllocatedItem& item = change.allocated[i];
      const std::uint64_t at = std::uint64_t{r.head} + i;
      if (r.ring[at % r.num_pages] != item.taken) {
        return unfit(change, "page " + std::to_string(item.taken) + " is not next in the pool of " + rank_text);
      }
      if (item.page != item.taken && s.complete_page(HashedKey{item.key}, slot) != item.page) {
        return unfit(change, "key " + std::string(item.key) + " has no page " + std::to_string(item.page));
      }
    }
    for (const AllocatedItem& item : change.allocated) {
      const std::uint32_t page = r.pop_front();
      if (item.page == page) {
        r.owner[page] = kAllocated;
        r.allocated_for[page] = HashedKey{item.key}.short_hash();
        ++r.allocated;
        s.allocated(r, slot, page);
      } else {
        r.push_back(page);
      }
    }
    s.seq = change.seq;
    return boost::outcome_v2::success();
  }
  if (change.kind != ChangeKind::confirmed) return unfit(change, "unknown kind");
  // Confirmations may depend on each other (a key moving twice), so they are judged as applied; the
  // only state they can leave half-done is a state the journal no longer describes, which stops
  // recovery anyway.
  std::vector<HashedKey>& hashed = scratch().hashed;
  for (const ConfirmedItem& item : change.confirmed) hashed.emplace_back(item.key);
  s.prefetch_records(hashed);
  for (std::size_t i = 0; i < change.confirmed.size(); ++i) {
    const ConfirmedItem& item = change.confirmed[i];
    if (item.page >= r.num_pages) return unfit(change, "page " + std::to_string(item.page) + " out of range");
    const HashedKey& key = hashed[i];
    std::uint32_t id = s.id_of(key);
    if ((id == kNone) != (item.new_key_tp_world_size != 0)) {
      return unfit(change, "key " + std::string(item.key) + (id == kNone ? " does not exist" : " exists"));
    }
    if (id == kNone && s.ids_in_use() >= kKeyIdLimit) return unfit(change, "too many keys");
    const std::uint32_t owner = r.owner[item.page];
    if (owner != kAllocated && owner != kOrphaned && (id == kNone || owner != id)) {
      return unfit(change, "page " + std::to_string(item.page) + " of " + rank_text + " cannot be confirmed");
    }
    if (id == kNone) id = s.create_key(key, item.new_key_tp_world_size);
    s.map_page(r, slot, id, item.page);
  }
  for (const std::uint32_t page : change.released) {
    if (page >= r.num_pages || (r.owner[page] != kAllocated && r.owner[page] != kOrphaned)) {
      return unfit(change, "page " + std::to_string(page) + " of " + rank_text + " cannot be released");
    }
    r.to_pool(page, r.owner[page]);
  }
  r.kept_on_release += change.kept_mapped;
  s.seq = change.seq;
  return boost::outcome_v2::success();
}

StateImage MetadataState::export_image(const std::function<void(std::uint64_t seq)>& at_instant) const {
  constexpr std::uint32_t kKeysPerChunk = 4096;  // a writer waits for one chunk at most
  // Writers wait only while the page tables are copied, into memory sized and touched before the
  // instant (a fresh page's first touch is a fault, costly in a VM); the pages' key hashes are picked
  // out of their copy afterwards. The names are copied after the instant, a chunk at a time, unless a
  // key id was freed meanwhile (its name may be another key's by then): then the export starts over;
  // the third attempt copies the names under the lock too, so that a state freeing ids all the time
  // cannot starve it.
  struct Prepared {
    std::uint32_t num_pages = 0;
    std::vector<std::uint32_t> hashes;  // every page's allocated_for entry, if the rank has allocated pages
  };
  for (int attempt = 1;; ++attempt) {
    const bool names_under_lock = attempt >= 3;
    StateImage image;
    std::vector<Prepared> prepared;  // by slot
    std::uint64_t epoch = 0;
    std::uint32_t key_count = 0;
    {
      std::shared_lock lock(impl_->mutex);
      prepared.resize(impl_->ranks.size());
      for (std::size_t slot = 0; slot < impl_->ranks.size(); ++slot) {
        if (!impl_->ranks[slot]) continue;
        prepared[slot].num_pages = impl_->ranks[slot]->num_pages;
        if (impl_->ranks[slot]->allocated != 0) prepared[slot].hashes.resize(prepared[slot].num_pages);
      }
      image.ranks.reserve(impl_->rank_slots.size());
      key_count = static_cast<std::uint32_t>(impl_->keys.size());
    }
    image.keys.reserve(key_count + key_count / 8 + 1024);  // room for the keys created until the instant
    image.keys.resize(key_count);
    for (const Prepared& p : prepared) {
      if (p.num_pages == 0) continue;
      RankImage& ri = image.ranks.emplace_back();
      ri.owner.resize(p.num_pages);
      ri.free_pool.resize(p.num_pages);  // shrunk to the pool's size at the instant (no reallocation)
    }
    std::vector<std::uint32_t> slot_of_image;  // the slot each image rank was copied from
    slot_of_image.reserve(prepared.size());
    const auto copy_names = [&](std::uint32_t begin, std::uint32_t end) {
      for (std::uint32_t id = begin; id < end; ++id) {
        const KeyRecord& k = impl_->keys[id];
        image.keys[id] = KeyImage{k.name.str(), k.tp_world_size};
      }
    };
    {
      std::unique_lock lock(impl_->mutex);
      image.seq = impl_->seq;
      std::size_t next = 0;  // the image rank to fill
      std::vector<std::uint32_t> index_of_slot(impl_->ranks.size(), kNone);  // for the lifecycle's part
      for (std::size_t slot = 0; slot < impl_->ranks.size(); ++slot) {
        const RankData* r = impl_->ranks[slot].get();
        if (!r) continue;
        // A rank created or dropped since the sizing (rare) is sized here, under the lock.
        if (slot >= prepared.size()) prepared.resize(slot + 1);
        Prepared& p = prepared[slot];
        p.num_pages = r->num_pages;
        if (r->allocated != 0) p.hashes.resize(r->num_pages);
        if (next == image.ranks.size()) image.ranks.emplace_back();
        slot_of_image.push_back(static_cast<std::uint32_t>(slot));
        index_of_slot[slot] = static_cast<std::uint32_t>(next);
        RankImage& ri = image.ranks[next++];
        ri.rank = r->rank;
        ri.kept_on_release = r->kept_on_release;
        ri.reclaimed = r->reclaim_marks();
        ri.owner.resize(r->num_pages);
        std::copy_n(r->owner.data(), r->num_pages, ri.owner.begin());
        if (r->allocated != 0) std::memcpy(p.hashes.data(), r->allocated_for.get(), std::size_t{r->num_pages} * 4);
        ri.allocated_for.resize(r->allocated);  // filled from p.hashes after the instant
        ri.free_pool.resize(r->free_count);
        const std::uint32_t first = std::min(r->free_count, r->num_pages - r->head);
        std::copy_n(r->ring.get() + r->head, first, ri.free_pool.begin());
        std::copy_n(r->ring.get(), r->free_count - first, ri.free_pool.begin() + first);
      }
      image.ranks.resize(next);
      key_count = static_cast<std::uint32_t>(impl_->keys.size());
      image.free_ids = impl_->life.free_ids;
      impl_->export_lifecycle(index_of_slot, image);
      epoch = impl_->epoch;
      image.keys.resize(key_count);
      if (names_under_lock) copy_names(0, key_count);
      if (at_instant) at_instant(image.seq);
    }
    // The allocated pages' key hashes, in page order, out of the copies.
    for (std::size_t i = 0; i < image.ranks.size(); ++i) {
      RankImage& ri = image.ranks[i];
      const std::vector<std::uint32_t>& hashes = prepared[slot_of_image[i]].hashes;
      std::size_t filled = 0;
      for (std::uint32_t page = 0; page < ri.owner.size() && filled < ri.allocated_for.size(); ++page) {
        if (ri.owner[page] == kAllocated) ri.allocated_for[filled++] = hashes[page];
      }
    }
    if (names_under_lock) return image;
    bool freed = false;
    for (std::uint32_t begin = 0; begin < key_count && !freed; begin += kKeysPerChunk) {
      std::shared_lock lock(impl_->mutex);
      freed = impl_->epoch != epoch;
      if (!freed) copy_names(begin, std::min(key_count, begin + kKeysPerChunk));
    }
    if (!freed) return image;
  }
}

StateResult<void> MetadataState::import_image(StateImage image) {
  auto bad = [](const std::string& why) {
    return make_error(StateErrc::invalid_argument, "inconsistent image: " + why, 0);
  };
  Impl next(impl_->options);
  const auto key_count = image.keys.size();
  if (key_count > kKeyIdLimit) return bad("too many keys");
  std::vector<bool> free_id(key_count, false);
  for (const std::uint32_t id : image.free_ids) {
    if (id >= key_count || free_id[id]) return bad("free key id " + std::to_string(id));
    free_id[id] = true;
  }
  std::vector<bool> draining(key_count, false);
  for (const std::uint32_t id : image.draining_ids) {
    if (id >= key_count || free_id[id] || draining[id]) return bad("draining key id " + std::to_string(id));
    draining[id] = true;
  }
  const std::size_t rank_count = image.ranks.size();
  constexpr std::size_t kReservedPagesLimit = 64;  // a TP group larger than this is not expected
  std::size_t live = 0;  // keys to enter in the key table
  for (std::uint32_t id = 0; id < key_count; ++id) {
    KeyImage& k = image.keys[id];
    KeyRecord& record = next.keys.emplace_back();
    record.name.assign(k.name);
    std::string().swap(k.name);  // held twice otherwise
    record.tp_world_size = k.tp_world_size;
    if (!free_id[id]) {
      record.hash = HashedKey(record.name.view()).hash;  // removing the key erases it by this hash
      if (!draining[id]) ++live;
    }
    // A key has at most one page per rank and needs tp_world_size: one allocation, not one per doubling.
    // Bounded besides: the image is not checked yet, and a damaged one must not reserve gigabytes.
    record.pages.reserve(std::min<std::size_t>({record.tp_world_size, rank_count, kReservedPagesLimit}));
  }
  for (auto& ri : image.ranks) {
    const std::string rank_text = "rank " + std::to_string(ri.rank);
    if (next.slot_of(ri.rank) != kNone) return bad(rank_text + " twice");
    if (ri.owner.empty() || ri.owner.size() > static_cast<std::size_t>(kPageLimit)) return bad(rank_text + " size");
    const auto n = static_cast<std::uint32_t>(ri.owner.size());
    // The --max-* limits hold for a restored state as for a replayed one (apply's rank_created): a
    // state saved under larger limits is refused, not taken in beyond them.
    auto reason = next.above_max_pages(n);
    if (!reason) reason = next.no_room_for(ri.rank, n);
    if (reason) {
      return make_error(StateErrc::invalid_argument,
                        "the image is beyond this state's limits: " + rank_text + ": " + *reason, ri.rank);
    }
    const auto slot = static_cast<std::uint32_t>(next.ranks.size());
    auto r = std::make_unique<RankData>(ri.rank, std::move(ri.owner), next.lru, next.ttl_ms > 0);
    r->kept_on_release = ri.kept_on_release;
    r->free_count = 0;  // counted below
    next.total_pages += r->num_pages;
    next.rank_slots.emplace(r->rank, slot);
    next.ranks.push_back(std::move(r));
  }
  // Each mapped page joins its key's page list, page number by page number across the ranks (each
  // rank's pages still in order): ranks that served the same keys in the same order, a TP group's
  // workers, hold a key at the same page number, so its record is read once for all of them, not in
  // one pass over every record per rank (measured in the commit). With the ranks sorted largest
  // first, those that have a page number are a prefix.
  std::vector<std::uint32_t> by_size(next.ranks.size());
  std::iota(by_size.begin(), by_size.end(), std::uint32_t{0});
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::uint32_t a, std::uint32_t b) {
    return next.ranks[a]->num_pages > next.ranks[b]->num_pages;
  });
  std::size_t having = by_size.size();
  for (std::uint32_t page = 0; having > 0; ++page) {
    while (having > 0 && next.ranks[by_size[having - 1]]->num_pages <= page) --having;
    for (std::size_t i = 0; i < having; ++i) {
      const std::uint32_t slot = by_size[i];
      RankData& r = *next.ranks[slot];
      const std::vector<std::uint32_t>& allocated_for = image.ranks[slot].allocated_for;
      const std::uint32_t owner = r.owner[page];
      if (owner == kFree) {
        ++r.free_count;
      } else if (owner == kAllocated) {
        if (r.allocated >= allocated_for.size()) return bad("rank " + std::to_string(r.rank) + " allocated pages");
        r.allocated_for[page] = allocated_for[r.allocated];
        ++r.allocated;
      } else if (owner == kOrphaned) {
        ++r.orphaned;
      } else if (owner < key_count && !free_id[owner]) {
        KeyRecord& k = next.keys[owner];
        if (k.on(slot)) return bad("key " + k.name.str() + " has two pages on rank " + std::to_string(r.rank));
        k.pages.push_back(RankPage{slot, page});
        ++(draining[owner] ? r.draining : r.mapped);
      } else {
        return bad("rank " + std::to_string(r.rank) + " page " + std::to_string(page) + " names no key");
      }
    }
  }
  for (std::uint32_t slot = 0; slot < next.ranks.size(); ++slot) {
    RankData& r = *next.ranks[slot];
    RankImage& ri = image.ranks[slot];
    const std::string rank_text = "rank " + std::to_string(r.rank);
    if (r.free_count != ri.free_pool.size()) return bad(rank_text + " pool size");
    if (r.allocated != ri.allocated_for.size()) return bad(rank_text + " allocated pages");
    std::vector<bool> pooled(r.num_pages, false);
    for (std::uint32_t i = 0; i < r.free_count; ++i) {
      const std::uint32_t page = ri.free_pool[i];
      if (page >= r.num_pages || r.owner[page] != kFree || pooled[page]) {
        return bad(rank_text + " pool entry " + std::to_string(i));
      }
      pooled[page] = true;
      r.ring[i] = page;
    }
    r.head = 0;
    for (std::size_t i = 0; i < ri.reclaimed.size(); ++i) {
      const std::uint32_t page = ri.reclaimed[i];
      if (page >= r.num_pages || (i > 0 && page <= ri.reclaimed[i - 1])) {
        return bad(rank_text + " reclaim mark " + std::to_string(i));
      }
      r.set_after_reclaim(page);
    }
    ri = RankImage{};  // gigabytes may be held twice otherwise
  }
  // The clock: the one the image's last change was recorded at, or, without one, now.
  if (image.clock_ms) {
    next.now = *image.clock_ms;
    next.recorded_now = image.clock_ms;
  } else if (next.lifecycle) {
    next.now = next.read_clock();
  }
  // Every id is either a live key with a page (a key with none is removed at once), a draining one
  // (its pages wait for its lease to end; restarted() says when) or a free one.
  // The table is sized once, and the keys are entered kBatch at a time, the slots of a batch loaded
  // first, all together: each is a cache miss (ids come in no hash order), and misses started
  // together overlap where one lookup after another waits for each (measured in the commit).
  next.key_ids.reserve(live);
  constexpr std::uint32_t kBatch = 64;
  for (std::uint32_t begin = 0; begin < key_count; begin += kBatch) {
    const std::uint32_t end = static_cast<std::uint32_t>(std::min<std::size_t>(key_count, begin + kBatch));
    for (std::uint32_t id = begin; id < end; ++id) next.key_ids.prefetch(HashedKey::short_hash_of(next.keys[id].hash));
    for (std::uint32_t id = begin; id < end; ++id) {
      KeyRecord& k = next.keys[id];
      if (free_id[id]) {
        if (!k.name.empty() || k.tp_world_size != 0) return bad("free key id " + std::to_string(id) + " has a key");
        continue;
      }
      if (draining[id]) {
        k.lease_end = next.now + next.lease_ms;
        next.lease_push_back(id);
        continue;
      }
      if (k.pages.empty()) return bad("key " + k.name.str() + " has no page");
      if (k.tp_world_size == 0) return bad("key " + k.name.str() + " has tp_world_size 0");
      const HashedKey key{k.name.view(), k.hash};
      if (next.id_of(key) != kNone) return bad("key " + k.name.str() + " twice");
      next.key_ids.insert(key.short_hash(), id);
      k.live = true;
      if (k.complete()) {
        ++next.life.complete;
        // The recency order is not in the image: complete keys enter it in id order.
        if (next.lru) next.lru_link(id);
      }
    }
  }
  next.life.free_ids = std::move(image.free_ids);
  if (auto refused = next.import_timed(image, draining)) return bad(*refused);
  {
    std::unique_lock lock(impl_->mutex);
    impl_->swap_contents(next);  // `next` takes the old contents, freed after the lock
    impl_->now = next.now;
    impl_->recorded_now = next.recorded_now;
    impl_->stamps = std::max(impl_->stamps, next.stamps);  // stamps stay unique
    ++impl_->epoch;
    impl_->seq = image.seq;
  }
  return boost::outcome_v2::success();
}

DropOutcome MetadataState::drop_rank(Rank rank) {
  std::unique_ptr<RankData> gone;  // freed after the lock: megabytes of page arrays
  DropOutcome outcome;
  {
    std::unique_lock lock(impl_->mutex);
    impl_->advance();
    const std::uint32_t slot = impl_->slot_of(rank);
    if (slot == kNone) return outcome;
    outcome = impl_->drop(slot, gone);
    Change change;
    change.kind = ChangeKind::rank_dropped;
    change.rank = rank;
    impl_->emit(change);
  }
  return outcome;
}


std::optional<RankStats> MetadataState::rank_stats(Rank rank) const {
  Impl::ReadAccess access(*impl_);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return std::nullopt;
  return stats_of(*impl_->ranks[slot]);
}

std::vector<std::pair<Rank, RankStats>> MetadataState::all_rank_stats() const {
  std::vector<std::pair<Rank, RankStats>> result;
  {
    Impl::ReadAccess access(*impl_);
    result.reserve(impl_->rank_slots.size());
    for (const auto& r : impl_->ranks) {
      if (r) result.emplace_back(r->rank, stats_of(*r));
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
  for (std::uint64_t i = 0; i < r.free_count; ++i) {
    const std::uint64_t at = r.head + i;
    result.push_back(r.ring[at >= r.num_pages ? at - r.num_pages : at]);
  }
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
    for (const RankPage& rp : k.pages) info.pages.emplace_back(impl_->ranks[rp.slot]->rank, Page{rp.page});
  }
  std::sort(info.pages.begin(), info.pages.end());
  return info;
}

std::size_t MetadataState::key_count() const {
  Impl::ReadAccess access(*impl_);
  return impl_->key_ids.size();
}

StateStats MetadataState::stats() const {
  StateStats out;
  {
    Impl::ReadAccess access(*impl_);
    out.ranks.reserve(impl_->rank_slots.size());
    for (const auto& r : impl_->ranks) {
      if (r) out.ranks.emplace_back(r->rank, stats_of(*r));
    }
    out.keys_complete = impl_->life.complete;
    out.keys_incomplete = impl_->key_ids.size() - impl_->life.complete;
    out.keys_leased = impl_->life.leased;
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
