// Vocabulary types shared by the state model, the protocol codec and the client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hf3fs_meta {

// Ranks and pages are 64-bit signed in the API: vLLM accepts negative ranks, and -1 marks "no page".
using Rank = std::int64_t;
using Page = std::int64_t;
inline constexpr Page kNoPage = -1;

enum class Role { worker, scheduler };

constexpr std::string_view to_string(Role role) noexcept {
  return role == Role::worker ? "worker" : "scheduler";
}

// A block key as a worker sends it to batch_allocate: the key and its prefix key. A key alone has
// the empty prefix key, as vLLM's workers send them, so `client.allocate(3, {"a", "b"})` works.
struct BlockKey {
  BlockKey() = default;
  // Implicit on purpose: a key converts to a BlockKey.
  BlockKey(std::string key_, std::string prefix_key_ = {})
      : key(std::move(key_)), prefix_key(std::move(prefix_key_)) {}
  BlockKey(const char* key_) : key(key_) {}

  std::string key;
  std::string prefix_key;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
};

// One confirmation of confirm_write: the key was written to this page on the rank.
struct Confirmation {
  std::string key;
  Page page = kNoPage;
  friend bool operator==(const Confirmation&, const Confirmation&) = default;
};

// A keyed release (extension): entry `index` of confirm_write's pages_to_release names the key its
// page was allocated for (`[key, page]` on the wire), so that the page is freed only while it is
// still allocated for that key; the other entries are bare pages, as vLLM sends them.
struct ReleaseKey {
  std::size_t index = 0;  // into pages_to_release
  std::string key;
  friend bool operator==(const ReleaseKey&, const ReleaseKey&) = default;
};

// What POST /rank/{rank}/drop did (extension of the reference server).
struct DropOutcome {
  bool dropped = false;          // false: there was no such rank
  std::int64_t pages = 0;        // the rank's num_pages
  std::size_t mappings = 0;      // keys that had a page on the rank
  std::size_t keys_removed = 0;  // of those, keys left with no page on any rank
  friend bool operator==(const DropOutcome&, const DropOutcome&) = default;
};

}  // namespace hf3fs_meta
