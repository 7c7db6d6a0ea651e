// Per-call scratch of MetadataState, and the small helpers every state file uses (internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "hf3fs_meta/state.hpp"
#include "state/key_table.hpp"
#include "state/page_pool.hpp"

namespace hf3fs_meta::state_model {

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
  std::vector<std::uint32_t> release_hashes;  // confirm_write: each keyed release's key, page_tag()

  void reset();
};

// Not reentrant: nothing a call reaches while it uses its scratch (advance(), the change sink, the
// lifecycle's removals) may call scratch(), which would clear the call's buffers under it.
Scratch& scratch();

// Hashing is the costliest part of a lookup that does not need the state: done before locking.
template <class Keys, class Name>
const std::vector<HashedKey>& hash_all(Scratch& s, const Keys& keys, Name name) {
  s.hashed.reserve(keys.size());
  for (const auto& k : keys) s.hashed.emplace_back(name(k));
  return s.hashed;
}

inline StateError make_error(StateErrc kind, std::string message, Rank rank,
                             std::optional<std::size_t> index = std::nullopt) {
  return StateError{kind, std::move(message), rank, index};
}

StateError not_initialized(Rank rank);
std::string out_of_range(std::string_view field, std::size_t index, Page page, const RankData& r);

}  // namespace hf3fs_meta::state_model
