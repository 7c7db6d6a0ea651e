// Vocabulary types shared by the state model, the protocol codec and the client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hf3fs_meta {

// Ranks and pages are 64-bit signed in the API: vLLM accepts negative ranks, and -1 marks "no page".
using Rank = std::int64_t;
using Page = std::int64_t;
inline constexpr Page kNoPage = -1;

enum class Role { worker, scheduler };

constexpr std::string_view to_string(Role role) noexcept {
  return role == Role::worker ? "worker" : "scheduler";
}

// A block key as a worker sends it to batch_allocate: the key and its prefix key (vLLM sends "").
struct BlockKey {
  std::string key;
  std::string prefix_key;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
};

// One answer of batch_allocate: the page given to a key, or kNoPage when none was free.
struct Allocation {
  std::string key;
  Page page = kNoPage;
  friend bool operator==(const Allocation&, const Allocation&) = default;
};

// One confirmation of confirm_write: the key was written to this page on the rank.
struct Confirmation {
  std::string key;
  Page page = kNoPage;
  friend bool operator==(const Confirmation&, const Confirmation&) = default;
};

}  // namespace hf3fs_meta
