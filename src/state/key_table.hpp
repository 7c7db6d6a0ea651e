// KeyTable: the state's keys (internal): ids, records and the index from a key to its id.
//
// A table from the key's hash to a dense key id (state/key_index.hpp: 8-byte slots, whose cache
// misses a call can start all at once), and a record per id holding the key's bytes, its hash,
// tp_world_size and the key's (rank slot, page) list. The page table stores ids, not pointers, so a
// conflict can name the other key and a page costs 4 bytes. Ids of removed keys are reused, their
// memory freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include "hash/keyed_hash.hpp"
#include "state/index_list.hpp"
#include "state/key_index.hpp"
#include "state/page_lists.hpp"
#include "internal/populate.hpp"

namespace hf3fs_meta::state_model {

// What a removed key's record keeps for the next key given its id.
inline constexpr std::size_t kKeptNameBytes = 64;
inline constexpr std::uint32_t kKeptPageEntries = 8;
// Inside the record, no heap block: vLLM's keys (32 hex digits), and one rank's page (PageList).
inline constexpr std::size_t kInlineNameBytes = 32;

// A key with its hash, computed once per key per call and kept in the table: growing the table then
// rehashes without touching (or re-reading) the key bytes, and a probe compares hashes before bytes.
// The hash is keyed (hash/keyed_hash.hpp), so no client can choose keys that share a probe run; it
// is this process's own and is never written anywhere.
struct HashedKey {
  std::string_view name;
  std::size_t hash = 0;

  static std::uint32_t short_hash_of(std::size_t h) noexcept { return static_cast<std::uint32_t>(h ^ (h >> 32)); }
  // The key's tag in the key table.
  std::uint32_t short_hash() const noexcept { return short_hash_of(hash); }

  explicit HashedKey(std::string_view s) : name(s), hash(hash::KeyedHash{}(s)) {}
  HashedKey(std::string_view s, std::size_t h) : name(s), hash(h) {}
};

// What an allocated page remembers of the key it was allocated for (PagePool::allocated_for): a
// collision (one in 2^32 for a wrong key) lets a wrong confirm through, as before this check
// existed; it never refuses a right one. Snapshots hold it and members of one cluster compare it, so
// it is the same in every process and every version: std::hash (libstdc++'s), unkeyed. It indexes
// nothing, so a client that makes two keys share it gains nothing but a confirm of its own page.
inline std::uint32_t page_tag(std::string_view key) noexcept {
  return HashedKey::short_hash_of(std::hash<std::string_view>{}(key));
}

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
// clear the name (or to copy it into the change record with --data-dir); longer names keep a heap
// block besides, and keys on several ranks a block of the table's PageArena.
struct alignas(64) KeyRecord {
  PageList pages;  // one entry per rank the key is mapped on; its entries through KeyTable::pages()
  std::size_t hash = 0;  // of name: removing the key from the index needs no rehash
  // Lifecycle: clock times in milliseconds.
  std::int64_t lease_end = 0;
  std::uint32_t tp_world_size = 0;
  // Lifecycle: the lease list's links (key ids).
  std::uint32_t lease_prev = kNone;
  std::uint32_t lease_next = kNone;
  Where where = Where::none;
  bool live = false;  // in the index; false for a free id and for a deleted key draining under a lease
  // Second line: read by a lookup only when 32 bits of the hash match, and with a TTL.
  // With a TTL: the event (TimedKey::stamp) of its creation, or of its ceasing to be complete.
  std::uint64_t incomplete_stamp = 0;
  KeyName name;

  bool complete() const noexcept { return pages.size() == tp_world_size; }
  std::uint32_t tag() const noexcept { return HashedKey::short_hash_of(hash); }
};
static_assert(sizeof(KeyRecord) == 128, "two cache lines");

// Key records by id, in fixed-size chunks: indexing is two loads, and growing never moves records
// (a std::vector would move a million of them at once; a std::deque's 512-byte blocks hold four).
// reserve() makes the chunks for many records as one block (import_image: one allocation for the
// whole array, not one per chunk).
class KeyRecords {
 public:
  std::size_t size() const noexcept { return size_; }
  KeyRecord& operator[](std::uint32_t id) noexcept { return chunks_[id >> kShift][id & kMask]; }
  const KeyRecord& operator[](std::uint32_t id) const noexcept { return chunks_[id >> kShift][id & kMask]; }
  // The next id's record, as constructed (records are never moved).
  KeyRecord& emplace_back() {
    if ((size_ & kMask) == 0 && (size_ >> kShift) == chunks_.size()) add_block(1);
    const std::size_t at = size_++;
    return chunks_[at >> kShift][at & kMask];
  }
  // Room for n records in all, without another allocation.
  void reserve(std::size_t n) {
    const std::size_t chunks = (n + kMask) >> kShift;
    if (chunks > chunks_.size()) add_block(chunks - chunks_.size());
  }

 private:
  static constexpr std::size_t kShift = 10;
  static constexpr std::size_t kMask = (std::size_t{1} << kShift) - 1;
  struct BlockDeleter {
    std::size_t count = 0;
    void operator()(KeyRecord* first) const noexcept {
      std::destroy_n(first, count);
      ::operator delete(first, std::align_val_t{alignof(KeyRecord)});
    }
  };
  using Block = std::unique_ptr<KeyRecord, BlockDeleter>;

  void add_block(std::size_t chunks) {
    const std::size_t count = chunks << kShift;
    void* raw = ::operator new(count * sizeof(KeyRecord), std::align_val_t{alignof(KeyRecord)});
    internal::populate(raw, count * sizeof(KeyRecord));  // constructing them touches every page next
    auto* first = static_cast<KeyRecord*>(raw);
    std::uninitialized_value_construct_n(first, count);  // noexcept in practice: no allocation
    blocks_.emplace_back(first, BlockDeleter{count});
    for (std::size_t c = 0; c < chunks; ++c) chunks_.push_back(first + (c << kShift));
  }

  std::vector<KeyRecord*> chunks_;
  std::vector<Block> blocks_;
  std::size_t size_ = 0;
};

// The lease list's links: two fields of each key record.
struct LeaseLinks {
  KeyRecords* records;
  std::uint32_t& prev(std::uint32_t id) const noexcept { return (*records)[id].lease_prev; }
  std::uint32_t& next(std::uint32_t id) const noexcept { return (*records)[id].lease_next; }
};

struct KeyTable {
  internal::KeyIndex index;  // live keys; tag: HashedKey::short_hash()
  KeyRecords records;
  PageArena page_blocks;  // the page lists longer than one entry
  std::vector<std::uint32_t> free_ids;  // ids of removed keys, the last one reused first

  KeyRecord& operator[](std::uint32_t id) noexcept { return records[id]; }
  const KeyRecord& operator[](std::uint32_t id) const noexcept { return records[id]; }
  std::size_t size() const noexcept { return records.size(); }  // records held: live, draining and free
  std::size_t live() const noexcept { return index.size(); }
  std::size_t ids_in_use() const noexcept { return records.size() - free_ids.size(); }
  LeaseLinks lease_links() noexcept { return LeaseLinks{&records}; }

  std::uint32_t find(const HashedKey& key) const {
    static_assert(internal::KeyIndex::kNone == kNone);
    return index.find(key.short_hash(), [&](std::uint32_t id) {
      const KeyRecord& k = records[id];
      return k.hash == key.hash && k.name.view() == key.name;
    });
  }
  void prefetch(const HashedKey& key) const noexcept { index.prefetch(key.short_hash()); }

  // A key's pages.
  std::span<const RankPage> pages(const KeyRecord& k) const noexcept { return page_blocks.view(k.pages); }
  std::span<RankPage> pages(KeyRecord& k) noexcept { return page_blocks.view(k.pages); }
  const RankPage* on(const KeyRecord& k, std::uint32_t slot) const noexcept {
    for (const RankPage& rp : pages(k)) {
      if (rp.slot == slot) return &rp;
    }
    return nullptr;
  }
  RankPage* on(KeyRecord& k, std::uint32_t slot) noexcept {
    return const_cast<RankPage*>(static_cast<const KeyTable*>(this)->on(k, slot));
  }
  void add_page(KeyRecord& k, RankPage rp) { page_blocks.push_back(k.pages, rp); }
  void remove_page_on(KeyRecord& k, std::uint32_t slot) noexcept {
    page_blocks.remove_if(k.pages, [slot](const RankPage& rp) { return rp.slot == slot; });
  }

  // The id the next key record gets: the last one freed, else a new one.
  std::uint32_t next_id() const noexcept {
    return free_ids.empty() ? static_cast<std::uint32_t>(records.size()) : free_ids.back();
  }
  std::uint32_t take_id() {
    const std::uint32_t id = next_id();
    if (free_ids.empty()) {
      records.emplace_back();
    } else {
      free_ids.pop_back();
    }
    return id;
  }
  void free_id(std::uint32_t id) {
    KeyRecord& k = records[id];
    // Short buffers stay with the id for its next key (a cache that turns over then mallocs nothing
    // per key); long ones are freed. Either way memory is bounded by the ids ever in use at once.
    k.name.forget();
    page_blocks.clear(k.pages, kKeptPageEntries);
    k.tp_world_size = 0;
    k.where = Where::none;
    free_ids.push_back(id);
  }

  // Into and out of the index (the record's name and hash are set).
  void enter(std::uint32_t id) {
    index.insert(records[id].tag(), id);
    records[id].live = true;
  }
  void leave(std::uint32_t id) noexcept {
    index.erase(records[id].tag(), id);
    records[id].live = false;
  }
};

}  // namespace hf3fs_meta::state_model
