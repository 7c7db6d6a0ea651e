// KeyIndex: MetadataState's table from a key to its id (internal).
//
// Why not a library map: evicting a key that nobody touched lately is a cache miss into the table,
// and an allocate on a full rank evicts one key per page. A slot here is 8 bytes (the id and 32 bits
// of the key's hash, which also give its home slot), so the table is a fraction of a map holding
// the key, and a slot's address is known from the hash alone: prefetch() lets a caller start the
// misses of many keys at once (the victims of an eviction, the keys of a call) before it needs any.
// The key bytes live in the caller's records; a lookup compares them only when 32 hash bits match.
//
// Open addressing, linear probing, power-of-two size, at most half full; erase shifts the entries
// after the hole back (no tombstones), so a lookup stops at the first empty slot.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>

#include "internal/populate.hpp"

namespace hf3fs_meta::internal {

// Starts a cache miss without waiting for it: a load whose value nobody uses, so that the CPU
// overlaps many of them. Not __builtin_prefetch: measured here (a VM), prefetches of cold memory
// bought nothing (dropped on a TLB miss, likely), where these loads cut BM_AllocateEvict128 by a
// third.
inline void touch(const void* p) noexcept { (void)*static_cast<const volatile char*>(p); }

class KeyIndex {
 public:
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;  // "no id"; never stored

  std::size_t size() const noexcept { return size_; }

  // The id whose key `same(id)` says is the one looked for, among the ids stored with `tag`; kNone.
  template <class Same>
  std::uint32_t find(std::uint32_t tag, Same&& same) const {
    if (size_ == 0) return kNone;
    for (std::size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.id == kNone) return kNone;
      if (s.tag == tag && same(s.id)) return s.id;
    }
  }

  // Stores an id that is not stored yet.
  void insert(std::uint32_t tag, std::uint32_t id) {
    if (2 * (size_ + 1) > capacity()) grow();
    place(Slot{id, tag});
    ++size_;
  }

  // Sizes the table for `n` ids at once, so that storing them never grows it (each growth re-places
  // every id stored so far).
  void reserve(std::size_t n) {
    std::size_t target = capacity() == 0 ? 16 : capacity();
    while (2 * n > target) target *= 2;
    if (target != capacity()) rehash(target);
  }

  // Removes a stored id, found by its tag and the id itself (its key bytes are never read).
  void erase(std::uint32_t tag, std::uint32_t id) noexcept {
    std::size_t hole = tag & mask_;
    while (slots_[hole].id != id) {
      assert(slots_[hole].id != kNone);  // (tag, id) is stored
      hole = (hole + 1) & mask_;
    }
    // Each entry after the hole, up to the next empty slot, moves into it unless its home slot lies
    // cyclically in (hole, i]: then the hole is not on its probe path.
    for (std::size_t i = (hole + 1) & mask_; slots_[i].id != kNone; i = (i + 1) & mask_) {
      const std::size_t home = slots_[i].tag & mask_;
      const bool stays = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
      if (stays) continue;
      slots_[hole] = slots_[i];
      hole = i;
    }
    slots_[hole].id = kNone;
    --size_;
  }

  // Starts loading the slot where a lookup, insert or erase of `tag` begins.
  void prefetch(std::uint32_t tag) const noexcept {
    if (slots_) touch(&slots_[tag & mask_]);
  }

  void clear() noexcept {
    slots_.reset();
    mask_ = 0;
    size_ = 0;
  }

  // Bytes held (for the memory figures).
  std::size_t bytes() const noexcept { return slots_ ? capacity() * sizeof(Slot) : 0; }

 private:
  struct Slot {
    std::uint32_t id;
    std::uint32_t tag;
  };
  static_assert(sizeof(Slot) == 8);

  std::size_t capacity() const noexcept { return slots_ ? mask_ + 1 : 0; }

  void place(Slot slot) noexcept {
    std::size_t i = slot.tag & mask_;
    while (slots_[i].id != kNone) i = (i + 1) & mask_;
    slots_[i] = slot;
  }

  void grow() { rehash(capacity() == 0 ? 16 : 2 * capacity()); }

  void rehash(std::size_t new_capacity) {
    const std::size_t old_capacity = capacity();
    auto old = std::move(slots_);
    slots_ = std::make_unique_for_overwrite<Slot[]>(new_capacity);
    populate(slots_.get(), new_capacity * sizeof(Slot));  // the memset next touches every page
    std::memset(static_cast<void*>(slots_.get()), 0xFF, new_capacity * sizeof(Slot));  // every id kNone
    mask_ = new_capacity - 1;
    for (std::size_t i = 0; i < old_capacity; ++i) {
      if (old[i].id != kNone) place(old[i]);
    }
  }

  std::unique_ptr<Slot[]> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace hf3fs_meta::internal
