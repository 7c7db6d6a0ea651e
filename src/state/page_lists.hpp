// PageList and PageArena: each key's (rank slot, page) list (internal).
//
// A key has one entry per rank it is mapped on. The first entry lives inside the key's record (a
// key on one rank costs no block); a longer list lives in a block of the key table's arena, whose
// capacity is a power of two. Blocks are carved from large regions, not allocated one per key: a
// state whose keys each live on 8 ranks held a million 64-byte heap blocks, a malloc and (on a
// fresh heap) a page fault per few keys while recovering; import_image now reserves one region for
// all of them (docs/performance.md, "Recovery"). A freed block goes on the free list of its
// capacity (the list threaded through the blocks themselves), reused first; regions are kept until
// the table goes.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "internal/populate.hpp"

namespace hf3fs_meta::state_model {

struct RankPage {
  std::uint32_t slot;  // index of the rank in Impl::ranks
  std::uint32_t page;
};

// A key's list: its size, and where its entries are (inline, or a block of the arena).
class PageList {
 public:
  std::uint32_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::uint32_t capacity() const noexcept { return std::uint32_t{1} << cap_log2_; }

 private:
  friend class PageArena;
  RankPage first_{};           // the entry, while the capacity is 1
  std::uint32_t at_ = 0;       // else: the block's first entry in the arena
  std::uint32_t size_ = 0;
  std::uint8_t cap_log2_ = 0;  // capacity 1 << cap_log2_; 0: inline
};

class PageArena {
 public:
  static constexpr std::uint32_t kNoBlock = 0xFFFFFFFFu;

  std::span<RankPage> view(PageList& l) noexcept { return {data(l), l.size_}; }
  std::span<const RankPage> view(const PageList& l) const noexcept {
    return {l.cap_log2_ == 0 ? &l.first_ : entry(l.at_), l.size_};
  }

  void push_back(PageList& l, RankPage rp) {
    if (l.size_ == l.capacity()) grow(l, l.size_ + 1);
    data(l)[l.size_++] = rp;
  }
  // Capacity for n entries (a key's tp_world_size, known before its pages: one block, no doublings).
  void reserve(PageList& l, std::uint32_t n) {
    if (n > l.capacity()) grow(l, n);
  }
  // Removes the entries `drop` says so of, keeping the others' order.
  template <class Drop>
  void remove_if(PageList& l, Drop&& drop) noexcept {
    const std::span<RankPage> all = view(l);
    l.size_ = static_cast<std::uint32_t>(std::remove_if(all.begin(), all.end(), drop) - all.begin());
  }
  // Empties the list; its block stays with it up to `keep` entries, else goes to the free list.
  void clear(PageList& l, std::uint32_t keep) noexcept {
    l.size_ = 0;
    if (l.capacity() > keep) {
      give(l.at_, l.cap_log2_);
      l.cap_log2_ = 0;
    }
  }
  // Room for blocks of `entries` entries in all, carved without another allocation.
  void reserve_entries(std::size_t entries) {
    if (limit_ - end_ < entries) new_region(entries);
  }
  // Entries held in regions (for the tests: what a reserve made room for).
  std::size_t entries_held() const noexcept { return held_; }

 private:
  static constexpr unsigned kShift = 12;  // entries per chunk of the index; a region is whole chunks
  static constexpr std::uint32_t kMask = (std::uint32_t{1} << kShift) - 1;
  // Entries (2 MiB) a growing arena adds at most at once: a region is faulted in whole, under the lock.
  static constexpr std::size_t kMaxGrowth = std::size_t{1} << 18;
  static constexpr std::size_t kIndexLimit = std::size_t{1} << 32;

  RankPage* data(PageList& l) noexcept { return l.cap_log2_ == 0 ? &l.first_ : entry(l.at_); }
  RankPage* entry(std::uint32_t i) const noexcept { return chunks_[i >> kShift] + (i & kMask); }

  void grow(PageList& l, std::uint32_t n) {
    if (n > (std::uint32_t{1} << 31)) throw std::bad_alloc();  // more entries than ranks can exist
    const auto cap_log2 = static_cast<std::uint8_t>(std::bit_width(std::max<std::uint32_t>(n, 2) - 1));
    const std::uint32_t at = take(cap_log2);
    std::copy_n(data(l), l.size_, entry(at));
    if (l.cap_log2_ != 0) give(l.at_, l.cap_log2_);
    l.at_ = at;
    l.cap_log2_ = cap_log2;
  }

  // A block of 1 << cap_log2 entries: a freed one, else carved from the current region.
  std::uint32_t take(std::uint8_t cap_log2) {
    if (const std::uint32_t at = free_[cap_log2]; at != kNoBlock) {
      free_[cap_log2] = entry(at)->slot;
      return at;
    }
    const std::size_t n = std::size_t{1} << cap_log2;
    if (limit_ - end_ < n) new_region(std::max(n, std::min(kMaxGrowth, held_ / 2)));
    const auto at = static_cast<std::uint32_t>(end_);
    end_ += n;
    return at;
  }
  void give(std::uint32_t at, std::uint8_t cap_log2) noexcept {
    entry(at)->slot = free_[cap_log2];
    free_[cap_log2] = at;
  }

  // A region of at least `entries` entries, in one allocation, faulted in at once. What is left of
  // the current one goes to the free lists, as blocks of 2 entries and more.
  void new_region(std::size_t entries) {
    while (limit_ - end_ >= 2) {
      const std::size_t n = std::bit_floor(std::min<std::size_t>(limit_ - end_, std::size_t{1} << 31));
      give(static_cast<std::uint32_t>(end_), static_cast<std::uint8_t>(std::countr_zero(n)));
      end_ += n;
    }
    const std::size_t chunks = (std::max<std::size_t>(entries, 1) + kMask) >> kShift;
    const std::size_t begin = chunks_.size() << kShift;
    if (begin + (chunks << kShift) > kIndexLimit) throw std::bad_alloc();
    auto region = std::make_unique_for_overwrite<RankPage[]>(chunks << kShift);
    internal::populate(region.get(), (chunks << kShift) * sizeof(RankPage));
    chunks_.reserve(chunks_.size() + chunks);
    for (std::size_t c = 0; c < chunks; ++c) chunks_.push_back(region.get() + (c << kShift));
    regions_.push_back(std::move(region));
    end_ = begin;
    limit_ = begin + (chunks << kShift);
    held_ += chunks << kShift;
  }

  std::vector<RankPage*> chunks_;  // entry i is chunks_[i >> kShift][i & kMask]
  std::vector<std::unique_ptr<RankPage[]>> regions_;
  std::size_t end_ = 0;    // the current region's first uncarved entry
  std::size_t limit_ = 0;  // the current region's end
  std::size_t held_ = 0;
  std::array<std::uint32_t, 33> free_ = filled();  // by capacity's log2: the first free block, linked through .slot

  static std::array<std::uint32_t, 33> filled() noexcept {
    std::array<std::uint32_t, 33> a{};
    a.fill(kNoBlock);
    return a;
  }
};

}  // namespace hf3fs_meta::state_model
