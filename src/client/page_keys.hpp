// The key each page was allocated for, per rank, as this client's own allocate answers said: what
// a release names to a server that takes keyed releases (X-Hf3fs-Keyed-Release), so that a late
// release frees the page only while it is still allocated for that key. A page is forgotten when
// this client confirms or releases it, and replaced when it is allocated again, so a rank holds at
// most one entry per page of the rank; `max_per_rank` bounds even a server that hands out pages
// beyond any rank's size (a page not remembered is released bare, as to any other server).
#pragma once

#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta::internal {

class PageKeys {
 public:
  static constexpr std::size_t kDefaultMaxPerRank = std::size_t{1} << 22;
  explicit PageKeys(std::size_t max_per_rank = kDefaultMaxPerRank) : max_per_rank_(max_per_rank) {}

  // An allocate's answer: pages[i] was given to keys[i] (kNoPage: nothing to remember).
  void remember(Rank rank, std::span<const BlockKey> keys, std::span<const Page> pages);
  // The key each page was allocated for, where it is known: {i, key of pages[i]}, by ascending i
  // (protocol::encode_confirm_write_request's release_keys).
  std::vector<ReleaseKey> release_keys(Rank rank, std::span<const Page> pages) const;
  // A confirm_write that succeeded: its confirmed and released pages are no longer allocated.
  void forget(Rank rank, std::span<const Confirmation> confirmed, std::span<const Page> released);
  void forget_rank(Rank rank);  // the server dropped the rank
  void clear();                 // the server forgot every rank
  std::size_t size(Rank rank) const;

 private:
  const std::size_t max_per_rank_;
  mutable std::mutex mutex_;
  std::unordered_map<Rank, std::unordered_map<Page, std::string>> ranks_;
};

}  // namespace hf3fs_meta::internal
