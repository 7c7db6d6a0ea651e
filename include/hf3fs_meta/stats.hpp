// The service's figures (GET /stats, /metrics): what the state model counts and what the client's
// stats() call answers. A header of its own so that the SDK's headers need nothing of the state model.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

struct RankStats {
  std::int64_t num_pages = 0;
  std::int64_t free = 0;
  std::int64_t allocated = 0;  // taken from the pool, not (yet) confirmed
  std::int64_t mapped = 0;     // a key maps to it on this rank
  std::int64_t orphaned = 0;   // its key moved to another page on this rank: owned by nobody
  std::int64_t draining = 0;   // deleted, or orphaned, under a read lease; free when the lease ends
  std::uint64_t kept_on_release = 0;  // total releases refused because the page was mapped
};

// The whole state in figures (GET /stats, /metrics). The page counts of a rank add up to num_pages.
struct StateStats {
  std::vector<std::pair<Rank, RankStats>> ranks;  // sorted by rank
  std::uint64_t keys_complete = 0;
  std::uint64_t keys_incomplete = 0;
  std::uint64_t keys_leased = 0;       // under a read lease now (deleted ones, and each page orphaned
                                       // under a lease, still draining included)
  std::uint64_t key_records = 0;       // key records held (live, draining and free for reuse): memory
  // Since the state was made (clear() keeps them: they are counters).
  std::uint64_t evicted_keys = 0;
  std::uint64_t deleted_keys = 0;
  std::uint64_t reclaimed_keys = 0;             // incomplete keys dropped
  std::uint64_t reclaimed_allocated_pages = 0;  // allocated, never confirmed
  std::uint64_t reclaimed_orphaned_pages = 0;
};

}  // namespace hf3fs_meta
