// RankData: one rank's pages (internal): its free pool, its page table, the LRU order of its mapped
// pages and the lifecycle's per-page marks.
//
// Per rank, three uint32 arrays of num_pages entries (12 bytes a page): a ring buffer holding the
// free pool in order (front out, back in), a page table holding, for each page, either the id of the
// key that maps it or one of three markers (free, allocated, orphaned), and for an allocated page a
// 32-bit hash of the key it was allocated for (written at allocation only, so a new rank costs
// nothing to fill). "Is this page free?" is one load from the page table, which is what lets a
// release skip a page already in the pool without searching it (vLLM's O(n) membership test).
//
// Every page that goes back to the pool (a release, a reclaim, a removed key's pages, a drained
// one, live or replayed) goes through to_pool().
#pragma once

#include <bit>
#include <cassert>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/index_list.hpp"

namespace hf3fs_meta::state_model {

// Page-table markers; every smaller value is a key id. They are the image's (StateImage), so that a
// page table is exported and imported by copying it.
inline constexpr std::uint32_t kFree = kImageFree;
inline constexpr std::uint32_t kAllocated = kImageAllocated;
inline constexpr std::uint32_t kOrphaned = kImageOrphaned;
inline constexpr std::uint32_t kKeyIdLimit = kOrphaned;  // key ids are below this

// Pages are 32-bit inside; a rank can never hold more than this, whatever the options say.
inline constexpr std::int64_t kPageLimit = std::numeric_limits<std::uint32_t>::max();

// The LRU list's links: two per-page arrays.
struct PageLinks {
  std::uint32_t* prev_;
  std::uint32_t* next_;
  std::uint32_t& prev(std::uint32_t page) const noexcept { return prev_[page]; }
  std::uint32_t& next(std::uint32_t page) const noexcept { return next_[page]; }
};

struct RankData {
  Rank rank = 0;
  std::uint32_t num_pages = 0;
  std::unique_ptr<std::uint32_t[]> ring;   // the free pool: free_count pages from head, wrapping
  // per page: key id, kFree, kAllocated or kOrphaned. A vector, so that an imported image's is moved in.
  std::vector<std::uint32_t> owner;
  std::unique_ptr<std::uint32_t[]> allocated_for;  // per kAllocated page: page_tag() of its key
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
  IndexList lru;
  // TTL: the event (TimedPage::stamp) of each page's becoming allocated or orphaned (8 bytes a page).
  std::unique_ptr<std::uint64_t[]> stamp;
  // TTL: a bit per page, set when the TTL reclaims the page and cleared when a confirm maps it or a
  // release frees it: an allocated page with its bit set was allocated after a reclaim, and a bare
  // release of it may be the late one of the writer whose allocation was reclaimed. Made at the
  // rank's first reclaim, so that a rank without one costs nothing. Replay sets it as the original
  // did (page_reclaimed, confirmed); an image holds the set bits (RankImage::reclaimed).
  std::unique_ptr<std::uint64_t[]> reclaimed;

  // A new rank: every page free, the pool in page order.
  RankData(Rank r, std::uint32_t n, bool lru_on = false, bool timed = false)
      : RankData(r, std::vector<std::uint32_t>(n, kFree), lru_on, timed) {
    std::iota(ring.get(), ring.get() + n, std::uint32_t{0});
  }
  // import_image's: the page table is the image's, moved in, and import_image writes the pool
  // itself. Copying the one or filling the other here first would write (and fault in) every page of
  // both arrays once more, ring pages past the pool's end included, which nothing else touches.
  RankData(Rank r, std::vector<std::uint32_t> page_table, bool lru_on, bool timed)
      : rank(r),
        num_pages(static_cast<std::uint32_t>(page_table.size())),
        ring(std::make_unique_for_overwrite<std::uint32_t[]>(num_pages)),
        owner(std::move(page_table)),
        allocated_for(std::make_unique_for_overwrite<std::uint32_t[]>(num_pages)),
        free_count(num_pages) {
    if (lru_on) {
      lru_prev = std::make_unique_for_overwrite<std::uint32_t[]>(num_pages);
      lru_next = std::make_unique_for_overwrite<std::uint32_t[]>(num_pages);
    }
    if (timed) stamp = std::make_unique_for_overwrite<std::uint64_t[]>(num_pages);
  }

  PageLinks lru_links() const noexcept { return PageLinks{lru_prev.get(), lru_next.get()}; }

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
  // The pool's i-th page from the front.
  std::uint32_t pool_at(std::uint64_t i) const noexcept {
    const std::uint64_t at = head + i;
    return ring[at >= num_pages ? at - num_pages : at];
  }
  bool in_range(Page page) const noexcept { return page >= 0 && page < Page{num_pages}; }

  // Taken from the pool's front for a key whose page_tag() is `hash`.
  void mark_allocated(std::uint32_t page, std::uint32_t hash) noexcept {
    owner[page] = kAllocated;
    allocated_for[page] = hash;
    ++allocated;
  }

  std::uint32_t& count(PageState state) noexcept {
    switch (state) {
      case PageState::allocated: return allocated;
      case PageState::orphaned: return orphaned;
      case PageState::mapped: return mapped;
      case PageState::draining: return draining;
      case PageState::free: break;
    }
    assert(false);
    return free_count;
  }
  // An allocated or orphaned page-table marker as the state the page leaves.
  static PageState of_marker(std::uint32_t marker) noexcept {
    return marker == kAllocated ? PageState::allocated : PageState::orphaned;
  }

  // A page back to the end of the pool; `was`: what it was (allocated, orphaned, mapped, draining).
  // Inlined: a call per page made bench_state's Release1000Into1M a quarter slower. kMayBeReclaimed
  // false: the caller knows the rank has no reclaim bits (a loop then tests it once, not per page).
  template <bool kMayBeReclaimed = true>
  [[gnu::always_inline]] void to_pool(std::uint32_t page, PageState was) noexcept {
    --count(was);
    owner[page] = kFree;
    if constexpr (kMayBeReclaimed) clear_after_reclaim(page);
    push_back(page);
  }

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

  RankStats stats() const {
    return RankStats{num_pages, free_count, allocated, mapped, orphaned, draining, kept_on_release};
  }
};

}  // namespace hf3fs_meta::state_model
