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
// - keys: a flat hash map from the key (bytes and hash) to a dense key id, the bytes themselves in
//   an append-only arena (so the map's string_views stay valid), and a record per id holding
//   tp_world_size and the key's (rank slot, page) list. The page table stores ids, not pointers, so
//   a conflict can name the other key and a page costs 4 bytes.
// - one shared_mutex: writers (initialize, allocate, confirm_write, clear) exclusive, readers
//   (batch_exists, get_locations, introspection) shared. Every call holds it once, so each call is
//   atomic. What does not need the state is done outside it: hashing the keys, finding duplicates,
//   building a new rank's arrays, freeing what clear() dropped. bench_state's BM_WorkerCycle with 1
//   and 2 threads shows what the lock costs; critical sections are a few microseconds per batch, so
//   finer locking (per rank) has not been worth its complexity so far.
#include "hf3fs_meta/state.hpp"

#include "internal/field_text.hpp"

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <string_view>
#include <utility>

#include <boost/unordered/unordered_flat_map.hpp>

namespace hf3fs_meta {
namespace {

// Page-table markers; every smaller value is a key id.
constexpr std::uint32_t kFree = 0xFFFFFFFFu;
constexpr std::uint32_t kAllocated = 0xFFFFFFFEu;
constexpr std::uint32_t kOrphaned = 0xFFFFFFFDu;
constexpr std::uint32_t kKeyIdLimit = kOrphaned;  // key ids are below this
constexpr std::uint32_t kNone = 0xFFFFFFFFu;      // "no page" / "no id" in scratch data

// Pages are 32-bit inside; a rank can never hold more than this, whatever the options say.
constexpr std::int64_t kPageLimit = std::numeric_limits<std::uint32_t>::max();

// A key with its hash, computed once per key per call and kept in the table: growing the table then
// rehashes without touching (or re-reading) the key bytes, and a probe compares hashes before bytes.
struct HashedKey {
  std::string_view name;
  std::size_t hash = 0;

  // What an allocated page remembers of its key: a collision (one in 2^32 for a wrong key) lets a
  // wrong confirm through, as before this check existed; it never refuses a right one.
  std::uint32_t short_hash() const noexcept { return static_cast<std::uint32_t>(hash ^ (hash >> 32)); }

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

// Append-only storage for key bytes: the map's string_views point here and never move.
class StringArena {
 public:
  std::string_view store(std::string_view s) {
    if (s.size() > kChunk / 8) {
      auto& block = large_.emplace_back(std::make_unique_for_overwrite<char[]>(s.size()));
      std::copy(s.begin(), s.end(), block.get());
      return {block.get(), s.size()};
    }
    if (chunks_.empty() || kChunk - used_ < s.size()) {
      chunks_.emplace_back(std::make_unique_for_overwrite<char[]>(kChunk));
      used_ = 0;
    }
    char* out = chunks_.back().get() + used_;
    std::copy(s.begin(), s.end(), out);
    used_ += s.size();
    return {out, s.size()};
  }

 private:
  static constexpr std::size_t kChunk = 64 * 1024;
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::vector<std::unique_ptr<char[]>> large_;
  std::size_t used_ = 0;
};

struct RankPage {
  std::uint32_t slot;  // index of the rank in Impl::ranks
  std::uint32_t page;
};

struct KeyRecord {
  std::string_view name;
  std::uint32_t tp_world_size = 0;
  std::vector<RankPage> pages;  // one entry per rank the key is mapped on; short (one per TP rank)

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

// Key records by id, in fixed-size chunks: indexing is two loads, and growing never moves records
// (a std::vector would move a million of them at once; a std::deque's 512-byte blocks hold only ten).
class KeyRecords {
 public:
  std::size_t size() const noexcept { return size_; }
  KeyRecord& operator[](std::uint32_t id) noexcept { return chunks_[id >> kShift][id & kMask]; }
  const KeyRecord& operator[](std::uint32_t id) const noexcept { return chunks_[id >> kShift][id & kMask]; }
  void push_back(KeyRecord record) {
    if ((size_ & kMask) == 0) chunks_.push_back(std::make_unique<KeyRecord[]>(kMask + 1));
    chunks_.back()[size_ & kMask] = std::move(record);
    ++size_;
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
  std::unique_ptr<std::uint32_t[]> owner;  // per page: key id, kFree, kAllocated or kOrphaned
  std::unique_ptr<std::uint32_t[]> allocated_for;  // per kAllocated page: short_hash() of its key
  std::uint32_t head = 0;
  std::uint32_t free_count = 0;
  std::uint32_t allocated = 0;
  std::uint32_t mapped = 0;
  std::uint32_t orphaned = 0;
  std::uint64_t kept_on_release = 0;

  RankData(Rank r, std::uint32_t n)
      : rank(r),
        num_pages(n),
        ring(std::make_unique_for_overwrite<std::uint32_t[]>(n)),
        owner(std::make_unique_for_overwrite<std::uint32_t[]>(n)),
        allocated_for(std::make_unique_for_overwrite<std::uint32_t[]>(n)),
        free_count(n) {
    std::iota(ring.get(), ring.get() + n, std::uint32_t{0});
    std::fill(owner.get(), owner.get() + n, kFree);
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

  void reset() {
    // A huge batch must not leave a huge table behind for every later call to clear.
    constexpr std::size_t kKeep = 4096;
    if (seen.size() > kKeep) decltype(seen){}.swap(seen);
    if (page_overlay.size() > kKeep) decltype(page_overlay){}.swap(page_overlay);
    if (hashed.capacity() > kKeep) std::vector<HashedKey>{}.swap(hashed);
    if (local_of.capacity() > kKeep) std::vector<std::uint32_t>{}.swap(local_of);
    if (locals.capacity() > kKeep) std::vector<LocalKey>{}.swap(locals);
    seen.clear();
    page_overlay.clear();
    hashed.clear();
    local_of.clear();
    locals.clear();
  }
};

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
  return RankStats{r.num_pages, r.free_count, r.allocated, r.mapped, r.orphaned, r.kept_on_release};
}

PageState state_of(std::uint32_t owner) {
  switch (owner) {
    case kFree: return PageState::free;
    case kAllocated: return PageState::allocated;
    case kOrphaned: return PageState::orphaned;
    default: return PageState::mapped;
  }
}

}  // namespace

struct MetadataState::Impl {
  StateOptions options;
  mutable std::shared_mutex mutex;

  boost::unordered_flat_map<Rank, std::uint32_t> rank_slots;
  std::vector<std::unique_ptr<RankData>> ranks;  // by slot
  KeyMap<std::uint32_t> key_ids;
  KeyRecords keys;
  StringArena names;
  std::int64_t total_pages = 0;  // of all ranks

  // Only under the lock.
  std::uint32_t slot_of(Rank rank) const {
    const auto it = rank_slots.find(rank);
    return it == rank_slots.end() ? kNone : it->second;
  }
  std::uint32_t id_of(const HashedKey& key) const {
    const auto it = key_ids.find(key);
    return it == key_ids.end() ? kNone : it->second;
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

  // The lookups behind both overloads of batch_exists and get_locations (std::string keys and
  // views), on the call's keys hashed before the lock is taken.
  std::vector<bool> batch_exists(const std::vector<HashedKey>& hashed) const {
    std::vector<bool> result(hashed.size(), false);
    std::shared_lock lock(mutex);
    for (std::size_t i = 0; i < hashed.size(); ++i) {
      const std::uint32_t id = id_of(hashed[i]);
      result[i] = id != kNone && keys[id].complete();
    }
    return result;
  }
  StateResult<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<HashedKey>& hashed) const {
    std::vector<std::optional<Page>> result(hashed.size());
    std::shared_lock lock(mutex);
    const std::uint32_t slot = slot_of(rank);
    if (slot == kNone) return not_initialized(rank);
    for (std::size_t i = 0; i < hashed.size(); ++i) {
      const std::uint32_t page = complete_page(hashed[i], slot);
      if (page != kNone) result[i] = page;
    }
    return result;
  }

  std::uint32_t create_key(const HashedKey& key) {
    const auto id = static_cast<std::uint32_t>(keys.size());
    const std::string_view name = names.store(key.name);
    // Ranks initialized now; a scheduler never creates one, so this counts workers only.
    keys.push_back(KeyRecord{name, static_cast<std::uint32_t>(ranks.size()), {}});
    key_ids.emplace(HashedKey{name, key.hash}, id);
    return id;
  }

  // Preconditions (checked by validation): page is allocated, orphaned, or already this key's.
  void map_page(RankData& r, std::uint32_t slot, std::uint32_t id, std::uint32_t page) {
    KeyRecord& k = keys[id];
    if (RankPage* rp = k.on(slot)) {
      if (rp->page == page) return;
      // vLLM overwrites the key's page and never frees the old one: it stays owned by nobody.
      r.owner[rp->page] = kOrphaned;
      --r.mapped;
      ++r.orphaned;
      rp->page = page;
    } else {
      k.pages.push_back(RankPage{slot, page});
    }
    const std::uint32_t before = r.owner[page];
    assert(before == kAllocated || before == kOrphaned);
    if (before == kAllocated) {
      --r.allocated;
    } else {
      --r.orphaned;
    }
    r.owner[page] = id;
    ++r.mapped;
  }
};

MetadataState::MetadataState(StateOptions options) : impl_(std::make_unique<Impl>()) {
  options.max_pages = std::min(options.max_pages, kPageLimit);
  impl_->options = options;
}

MetadataState::~MetadataState() = default;

const StateOptions& MetadataState::options() const noexcept { return impl_->options; }

StateResult<InitializeOutcome> MetadataState::initialize(Rank rank, std::int64_t num_pages, Role role) {
  if (role == Role::scheduler) return InitializeOutcome{false};
  // Checked before looking the rank up: an oversized request is refused even for an existing rank.
  if (num_pages <= 0) {
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters", rank);
  }
  if (num_pages > impl_->options.max_pages) {
    return make_error(StateErrc::invalid_initialization,
                      "Invalid initialization parameters: num_pages " + std::to_string(num_pages) +
                          " is above the maximum " + std::to_string(impl_->options.max_pages),
                      rank);
  }
  // Checked before building the rank (so a refused request costs no memory) and again under the
  // exclusive lock (another rank may have been added meanwhile).
  const auto over_limits = [&]() -> std::optional<StateError> {
    const Impl& impl = *impl_;
    std::string reason;
    if (static_cast<std::int64_t>(impl.ranks.size()) >= impl.options.max_ranks) {
      reason = "rank " + std::to_string(rank) + " would exceed the maximum of " +
               std::to_string(impl.options.max_ranks) + " ranks";
    } else if (num_pages > impl.options.max_total_pages - impl.total_pages) {
      reason = "num_pages " + std::to_string(num_pages) + " would bring the pages of all ranks to " +
               std::to_string(impl.total_pages + num_pages) + ", above the maximum " +
               std::to_string(impl.options.max_total_pages);
    } else {
      return std::nullopt;
    }
    return make_error(StateErrc::invalid_initialization, "Invalid initialization parameters: " + reason, rank);
  };
  {
    std::shared_lock lock(impl_->mutex);
    if (impl_->slot_of(rank) != kNone) return InitializeOutcome{false};
    if (auto refused = over_limits()) return std::move(*refused);
  }
  // Filling megabytes of page arrays must not stall the other ranks: build first, then insert.
  auto data = std::make_unique<RankData>(rank, static_cast<std::uint32_t>(num_pages));
  std::unique_lock lock(impl_->mutex);
  if (impl_->slot_of(rank) != kNone) return InitializeOutcome{false};  // another thread won the race
  if (auto refused = over_limits()) return std::move(*refused);
  impl_->total_pages += num_pages;
  impl_->ranks.reserve(impl_->ranks.size() + 1);
  impl_->rank_slots.emplace(rank, static_cast<std::uint32_t>(impl_->ranks.size()));
  impl_->ranks.push_back(std::move(data));
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
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return not_initialized(rank);
  if (duplicate) return std::move(*duplicate);
  RankData& r = *impl_->ranks[slot];

  if (r.free_count < keys.size()) {
    // Nothing is taken; only complete keys already on this rank get an answer.
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::uint32_t existing = impl_->complete_page(hashed[i], slot);
      if (existing != kNone) result[i] = existing;
    }
    return result;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::uint32_t page = r.pop_front();
    const std::uint32_t existing = impl_->complete_page(hashed[i], slot);
    if (existing != kNone) {
      // As vLLM: the page was taken for the key, then handed back to the end of the pool.
      r.push_back(page);
      result[i] = existing;
    } else {
      r.owner[page] = kAllocated;
      r.allocated_for[page] = hashed[i].short_hash();
      ++r.allocated;
      result[i] = page;
    }
  }
  return result;
}

StateResult<ConfirmOutcome> MetadataState::confirm_write(Rank rank, std::span<const Confirmation> confirmations,
                                                         std::span<const Page> pages_to_release) {
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

  std::unique_lock lock(impl_->mutex);
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
  if (new_keys > kKeyIdLimit - impl_->keys.size()) {
    return make_error(StateErrc::invalid_argument, "confirmations: too many keys", rank);
  }
  s.page_overlay.reserve(2 * confirmations.size());
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    const Confirmation& c = confirmations[i];
    if (!r.in_range(c.page)) {
      return make_error(StateErrc::invalid_argument, out_of_range("confirmations", i, c.page, r), rank, i);
    }
    const auto page = static_cast<std::uint32_t>(c.page);
    const std::uint32_t l = s.local_of[i];
    LocalKey& local = s.locals[l];
    std::optional<std::string_view> other;  // the key mapping the page, when it is another key
    if (const auto it = s.page_overlay.find(page); it != s.page_overlay.end()) {
      // Touched earlier in this call: orphaned (fine) or mapped by a key of this call.
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
      if (owner < kKeyIdLimit && owner != local.id) other = impl_->keys[owner].name;
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
    if (local.page != kNone && local.page != page) s.page_overlay.insert_or_assign(local.page, kOrphaned);
    s.page_overlay.insert_or_assign(page, l);
    local.page = page;
  }
  for (std::size_t j = 0; j < pages_to_release.size(); ++j) {
    if (!r.in_range(pages_to_release[j])) {
      return make_error(StateErrc::invalid_argument,
                        out_of_range("pages_to_release", j, pages_to_release[j], r), rank, j);
    }
  }

  // Apply. Only an allocation failure (bad_alloc) can interrupt this part.
  ConfirmOutcome outcome;
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    LocalKey& local = s.locals[s.local_of[i]];
    if (local.id == kNone) local.id = impl_->create_key(local.key);
    impl_->map_page(r, slot, local.id, static_cast<std::uint32_t>(confirmations[i].page));
    ++outcome.confirmed;
  }
  for (const Page p : pages_to_release) {
    const auto page = static_cast<std::uint32_t>(p);
    const std::uint32_t owner = r.owner[page];
    if (owner == kFree) continue;  // already in the pool (or released earlier in this list)
    if (owner < kKeyIdLimit) {
      // Freeing a mapped page would let another key overwrite this key's data: kept (deviation).
      ++outcome.kept_mapped;
      continue;
    }
    if (owner == kAllocated) {
      --r.allocated;
    } else {
      --r.orphaned;
    }
    r.owner[page] = kFree;
    r.push_back(page);
    ++outcome.released;
  }
  r.kept_on_release += outcome.kept_mapped;
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

void MetadataState::clear() {
  // Swapped out under the lock, freed after it: releasing gigabytes must not stall other callers.
  Impl old;
  {
    std::unique_lock lock(impl_->mutex);
    std::swap(old.rank_slots, impl_->rank_slots);
    std::swap(old.ranks, impl_->ranks);
    std::swap(old.key_ids, impl_->key_ids);
    std::swap(old.keys, impl_->keys);
    std::swap(old.names, impl_->names);
    std::swap(old.total_pages, impl_->total_pages);
  }
}

std::optional<RankStats> MetadataState::rank_stats(Rank rank) const {
  std::shared_lock lock(impl_->mutex);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone) return std::nullopt;
  return stats_of(*impl_->ranks[slot]);
}

std::vector<std::pair<Rank, RankStats>> MetadataState::all_rank_stats() const {
  std::vector<std::pair<Rank, RankStats>> result;
  {
    std::shared_lock lock(impl_->mutex);
    result.reserve(impl_->ranks.size());
    for (const auto& r : impl_->ranks) result.emplace_back(r->rank, stats_of(*r));
  }
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}

std::optional<PageState> MetadataState::page_state(Rank rank, Page page) const {
  std::shared_lock lock(impl_->mutex);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone || !impl_->ranks[slot]->in_range(page)) return std::nullopt;
  return state_of(impl_->ranks[slot]->owner[static_cast<std::uint32_t>(page)]);
}

std::optional<std::string> MetadataState::page_owner(Rank rank, Page page) const {
  std::shared_lock lock(impl_->mutex);
  const std::uint32_t slot = impl_->slot_of(rank);
  if (slot == kNone || !impl_->ranks[slot]->in_range(page)) return std::nullopt;
  const std::uint32_t owner = impl_->ranks[slot]->owner[static_cast<std::uint32_t>(page)];
  if (owner >= kKeyIdLimit) return std::nullopt;
  return std::string(impl_->keys[owner].name);
}

std::vector<Page> MetadataState::free_pages(Rank rank) const {
  std::vector<Page> result;
  std::shared_lock lock(impl_->mutex);
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
    std::shared_lock lock(impl_->mutex);
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
  std::shared_lock lock(impl_->mutex);
  return impl_->keys.size();
}

std::size_t MetadataState::rank_count() const {
  std::shared_lock lock(impl_->mutex);
  return impl_->ranks.size();
}

}  // namespace hf3fs_meta
