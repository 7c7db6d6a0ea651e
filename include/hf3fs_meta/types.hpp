// Vocabulary types shared by the state model, the protocol codec and the client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Namespaces (docs/protocol.md, "Namespaces").
// GET /namespaces: one namespace.
struct NamespaceSummary {
  std::string name;
  std::vector<Rank> ranks;  // sorted
  std::int64_t pages = 0;   // of all its ranks
  std::size_t keys = 0;     // keys that exist (deleted and draining ones not counted)
  friend bool operator==(const NamespaceSummary&, const NamespaceSummary&) = default;
};

// What POST /namespaces/{name}/drop did.
struct NamespaceDropOutcome {
  bool dropped = false;  // false: there was no such namespace
  std::size_t ranks = 0;
  std::int64_t pages = 0;
  std::size_t keys_removed = 0;
  friend bool operator==(const NamespaceDropOutcome&, const NamespaceDropOutcome&) = default;
};

// POST /keys/status: what the server knows of one key of the caller's namespace.
struct KeyStatus {
  std::vector<Rank> ranks;          // the ranks the key has a page on, sorted
  std::int64_t tp_world_size = 0;   // fixed at the key's first confirmation
  bool complete = false;            // ranks.size() == tp_world_size
  friend bool operator==(const KeyStatus&, const KeyStatus&) = default;
};
struct KeyStatusAnswer {
  std::size_t ranks_initialized = 0;          // what a new key's tp_world_size would be
  std::vector<std::optional<KeyStatus>> status;  // per key sent, in order; nullopt: unknown key
  friend bool operator==(const KeyStatusAnswer&, const KeyStatusAnswer&) = default;
};

}  // namespace hf3fs_meta
