// IndexList: a doubly linked list threaded through arrays of 32-bit indexes (internal), as
// CacheLib's DList is threaded through its items. The list owns only its ends and its size; the
// links live where the caller keeps them (per-page arrays for a rank's LRU order, fields of the key
// records for the leases), so that a member costs 8 bytes and no allocation, and a link, an unlink or
// a move to the end is O(1).
//
// A Links type gives the two links of an index: `std::uint32_t& prev(std::uint32_t)` and
// `std::uint32_t& next(std::uint32_t)`. Both lists of the state are this one type: the LRU order of a
// rank's pages and the lease list of keys.
#pragma once

#include <cstdint>

namespace hf3fs_meta::state_model {

// "No page" / "no id" / the end of a list.
inline constexpr std::uint32_t kNone = 0xFFFFFFFFu;

struct IndexList {
  std::uint32_t head = kNone;
  std::uint32_t tail = kNone;
  std::uint32_t size = 0;

  template <class Links>
  void push_back(Links links, std::uint32_t i) noexcept {
    links.prev(i) = tail;
    links.next(i) = kNone;
    (tail == kNone ? head : links.next(tail)) = i;
    tail = i;
    ++size;
  }

  template <class Links>
  void remove(Links links, std::uint32_t i) noexcept {
    const std::uint32_t p = links.prev(i);
    const std::uint32_t n = links.next(i);
    (p == kNone ? head : links.next(p)) = n;
    (n == kNone ? tail : links.prev(n)) = p;
    --size;
  }

  // `i` (not in the list) takes the place of `old` (in it), which leaves it.
  template <class Links>
  void replace(Links links, std::uint32_t old, std::uint32_t i) noexcept {
    const std::uint32_t p = links.prev(old);
    const std::uint32_t n = links.next(old);
    links.prev(i) = p;
    links.next(i) = n;
    (p == kNone ? head : links.next(p)) = i;
    (n == kNone ? tail : links.prev(n)) = i;
  }

  // `i` (not in the list) right after `at` (in it).
  template <class Links>
  void insert_after(Links links, std::uint32_t at, std::uint32_t i) noexcept {
    const std::uint32_t n = links.next(at);
    links.prev(i) = at;
    links.next(i) = n;
    (n == kNone ? tail : links.prev(n)) = i;
    links.next(at) = i;
    ++size;
  }

  // Unlinks the first `n` members at once (n <= size): one write at the cut instead of two per
  // member. Their own links are left as they were; `last` is the n-th member.
  template <class Links>
  void pop_front(Links links, std::uint32_t n, std::uint32_t last) noexcept {
    const std::uint32_t rest = links.next(last);
    head = rest;
    (rest == kNone ? tail : links.prev(rest)) = kNone;
    size -= n;
  }
};

}  // namespace hf3fs_meta::state_model
