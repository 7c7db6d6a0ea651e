// KeyIndex (src/state/key_index.hpp), MetadataState's key table: against a std::map model, with tags
// drawn from a small set so that probe runs collide, cross each other and wrap around the table's
// end, which is where a backward-shift erase can go wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "state/key_index.hpp"

namespace hf3fs_meta::internal {
namespace {

// The id stored with `tag` that is `id` itself (the test's key is its id), else KeyIndex::kNone.
std::uint32_t find(const KeyIndex& index, std::uint32_t tag, std::uint32_t id) {
  return index.find(tag, [id](std::uint32_t candidate) { return candidate == id; });
}

void expect_same(const KeyIndex& index, const std::map<std::uint32_t, std::uint32_t>& model, std::uint32_t ids,
                 const std::vector<std::uint32_t>& tags) {
  ASSERT_EQ(index.size(), model.size());
  for (std::uint32_t id = 0; id < ids; ++id) {
    const auto it = model.find(id);
    if (it != model.end()) {
      ASSERT_EQ(find(index, it->second, id), id) << "id " << id << " tag " << it->second;
    } else {
      for (const std::uint32_t tag : tags) ASSERT_EQ(find(index, tag, id), KeyIndex::kNone) << "id " << id;
    }
  }
}

TEST(KeyIndex, MatchesAMapThroughInsertsAndErasesOfCollidingTags) {
  std::mt19937 rng(20261201);
  constexpr std::uint32_t kIds = 200;
  for (const std::uint32_t spread : {1u, 3u, 8u}) {
    // Tags whose home slots are the first and the last few of the table, whatever its size: probe
    // runs collide, and those from the end wrap around to the start.
    std::vector<std::uint32_t> tags;
    for (std::uint32_t t = 0; t < spread; ++t) {
      tags.push_back(t);
      tags.push_back(0xFFFFFFFFu - t);
    }
    KeyIndex index;
    std::map<std::uint32_t, std::uint32_t> model;  // id -> tag
    for (int step = 0; step < 3000; ++step) {
      const std::uint32_t id = rng() % kIds;
      if (const auto it = model.find(id); it != model.end()) {
        index.erase(it->second, id);
        model.erase(it);
      } else {
        const std::uint32_t tag = tags[rng() % tags.size()];
        index.insert(tag, id);
        model.emplace(id, tag);
      }
      if (step % 7 == 0) expect_same(index, model, kIds, tags);
    }
    expect_same(index, model, kIds, tags);
  }
}

TEST(KeyIndex, FindsOnlyWhatTheKeyComparisonAccepts) {
  KeyIndex index;
  EXPECT_EQ(find(index, 5, 1), KeyIndex::kNone);  // empty: no table yet
  index.insert(5, 1);
  index.insert(5, 2);  // the same tag: a lookup tells them apart by the key
  EXPECT_EQ(find(index, 5, 2), 2u);
  EXPECT_EQ(find(index, 5, 1), 1u);
  EXPECT_EQ(find(index, 6, 1), KeyIndex::kNone);  // another tag is another key
  EXPECT_EQ(find(index, 5, 3), KeyIndex::kNone);
  index.erase(5, 1);
  EXPECT_EQ(find(index, 5, 1), KeyIndex::kNone);
  EXPECT_EQ(find(index, 5, 2), 2u);
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.bytes(), 0u);
  EXPECT_EQ(find(index, 5, 2), KeyIndex::kNone);
}

TEST(KeyIndex, StaysAtMostHalfFull) {
  KeyIndex index;
  for (std::uint32_t id = 0; id < 100'000; ++id) index.insert(id * 2654435761u, id);
  EXPECT_EQ(index.size(), 100'000u);
  EXPECT_GE(index.bytes(), 2 * 100'000u * 8);
  EXPECT_LE(index.bytes(), 4 * 100'000u * 8);
  for (std::uint32_t id = 0; id < 100'000; id += 997) EXPECT_EQ(find(index, id * 2654435761u, id), id);
}

TEST(KeyIndex, ReserveSizesTheTableOnceAndKeepsWhatItHolds) {
  KeyIndex index;
  index.insert(7, 1);
  index.insert(7, 2);
  index.reserve(100'000);
  const std::size_t reserved = index.bytes();
  EXPECT_GE(reserved, 2 * 100'000u * 8);
  EXPECT_LE(reserved, 4 * 100'000u * 8);
  EXPECT_EQ(find(index, 7, 1), 1u);  // re-placed, still found
  EXPECT_EQ(find(index, 7, 2), 2u);
  for (std::uint32_t id = 3; id < 100'000; ++id) index.insert(id * 2654435761u, id);
  EXPECT_EQ(index.bytes(), reserved);  // never grew
  for (std::uint32_t id = 3; id < 100'000; id += 997) EXPECT_EQ(find(index, id * 2654435761u, id), id);
  index.reserve(10);  // never shrinks
  EXPECT_EQ(index.bytes(), reserved);
  EXPECT_EQ(index.size(), 99'999u);
}

}  // namespace
}  // namespace hf3fs_meta::internal
