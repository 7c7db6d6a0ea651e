// A session recorded against vLLM's own metadata server, replayed against MetadataState: every answer
// must be the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/state_snapshot.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::ElementsAre;
using testing::block_keys;

std::vector<Page> allocate(MetadataState& s, Rank rank, const std::vector<std::string>& keys) {
  auto result = s.allocate(rank, block_keys(keys));
  EXPECT_TRUE(result.has_value());
  return result.has_value() ? result.value() : std::vector<Page>{};
}

void confirm(MetadataState& s, Rank rank, const std::vector<Confirmation>& confirmations,
             const std::vector<Page>& release = {}) {
  auto result = s.confirm_write(rank, confirmations, release);
  ASSERT_TRUE(result.has_value()) << result.error().message;
}

TEST(StateTranscript, MatchesVllm) {
  MetadataState s;
  ASSERT_TRUE(s.initialize(0, 8).has_value());
  ASSERT_TRUE(s.initialize(1, 8).has_value());

  EXPECT_THAT(allocate(s, 0, {"k7", "k8"}), ElementsAre(0, 1));
  EXPECT_THAT(allocate(s, 1, {"k7", "k8"}), ElementsAre(0, 1));

  confirm(s, 0, {{"k7", 0}, {"k8", 1}});
  EXPECT_THAT(s.batch_exists(std::vector<std::string>{"k7", "k8"}), ElementsAre(false, false));
  EXPECT_EQ(s.key_info("k7")->tp_world_size, 2);

  confirm(s, 1, {{"k7", 0}}, {1});
  EXPECT_THAT(s.batch_exists(std::vector<std::string>{"k7", "k8"}), ElementsAre(true, false));

  auto locations = s.get_locations(1, std::vector<std::string>{"k7", "k8"});
  ASSERT_TRUE(locations.has_value());
  EXPECT_THAT(locations.value(), ElementsAre(std::optional<Page>{0}, std::nullopt));

  EXPECT_THAT(allocate(s, 1, {"k7", "k10"}), ElementsAre(0, 3));
  EXPECT_THAT(allocate(s, 0, {"k11"}), ElementsAre(2));

  ASSERT_TRUE(s.initialize(2, 2).has_value());
  confirm(s, 0, {{"k11", 2}});
  EXPECT_THAT(s.batch_exists(std::vector<std::string>{"k7", "k11"}), ElementsAre(true, false));
  EXPECT_EQ(s.key_info("k11")->tp_world_size, 3);

  EXPECT_THAT(allocate(s, 1, {"k16", "k17", "k18", "k19", "k25", "k26", "k27"}),
              ElementsAre(-1, -1, -1, -1, -1, -1, -1));
  EXPECT_EQ(s.rank_stats(1)->free, 6);

  EXPECT_THAT(allocate(s, 1, {"k7", "k28"}), ElementsAre(0, 5));
}

}  // namespace
}  // namespace hf3fs_meta
