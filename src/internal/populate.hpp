// populate(): faults in a large block at once (internal).
//
// A fresh page's first touch is a fault, and on a virtual machine a fault costs microseconds (the
// host maps the page as well): recovering 8 ranks x 1,000,000 pages with 1,000,000 keys in a new
// process spent a third of its time in them (docs/performance.md, "Recovery"). One
// madvise(MADV_POPULATE_WRITE) maps a block's pages in one call instead, and a block of 2 MiB and
// more is advised huge pages first, so that its pages are 2 MiB ones: populating alone still left
// a fault per 4 KiB page on its first write on this kind of machine; with huge pages, one per 2 MiB.
// The block stays the allocator's (it is counted, and freed, as any other); its contents are kept.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace hf3fs_meta::internal {

// Smaller blocks are left to fault page by page: a system call costs about what a few faults do.
inline constexpr std::size_t kPopulateMinBytes = std::size_t{64} << 10;
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Best effort: without MADV_POPULATE_WRITE (Linux before 5.14, or another system) nothing happens,
// and the pages fault in as they are first written, as they would have anyway. Only the whole pages
// inside the block are advised.
inline void populate(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  if (bytes < kPopulateMinBytes) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(page - 1);
  if (end <= begin) return;
  if (bytes >= kHugePageBytes) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace hf3fs_meta::internal
