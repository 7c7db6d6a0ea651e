// Metrics::render over a state with namespaces: the state's families have one sample set
// per namespace, labelled with it first; hf3fs_meta_namespaces counts them; the request counters
// have no namespace label. (The families' shapes for a default-only durable server are pinned by
// server_durable_test against tests/server/metrics_families.txt.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "dedup_cache.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/state.hpp"
#include "metrics.hpp"

namespace hf3fs_meta::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_with(const std::string& text, std::string_view prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) out.push_back(line);
  }
  return out;
}

TEST(MetricsRender, ADefaultOnlyServerLabelsItsSamplesWithTheDefaultNamespace) {
  MetadataState state;
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  const std::vector<BlockKey> keys{{"a", ""}};
  ASSERT_TRUE(state.allocate(0, keys).has_value());
  const auto text = Metrics(1).render(state, DedupCache::Stats{});
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_namespaces 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_ranks{namespace=\"default\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"allocated\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"free\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_releases_kept_mapped_total{namespace=\"default\",rank=\"0\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_keys{namespace=\"default\"} 0\n"));  // allocated, not confirmed
}

TEST(MetricsRender, TheStatesFamiliesHaveOneSampleSetPerNamespace) {
  MetadataState state;
  const std::vector<BlockKey> a{{"a", ""}};
  const std::vector<BlockKey> ab{{"a", ""}, {"b", ""}};
  const std::vector<Confirmation> a0{{"a", 0}};
  const std::vector<Confirmation> b1{{"b", 1}};
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(state.allocate(0, a).has_value());
  ASSERT_TRUE(state.initialize(NamespaceRef{"m1"}, 2, 8).has_value());
  ASSERT_TRUE(state.allocate(NamespaceRef{"m1"}, 2, ab).has_value());
  ASSERT_TRUE(state.confirm_write(NamespaceRef{"m1"}, 2, a0, {}).has_value());
  ASSERT_TRUE(state.confirm_write(NamespaceRef{"m1"}, 2, b1, {}).has_value());
  const std::vector<std::string> deleted{"b"};
  ASSERT_EQ(state.delete_keys(NamespaceRef{"m1"}, deleted), std::vector<bool>{true});
  ASSERT_TRUE(state.initialize(NamespaceRef{"b2"}, 0, 1).has_value());
  ASSERT_TRUE(state.initialize(NamespaceRef{"b2"}, 1, 1).has_value());
  Metrics metrics(1);
  metrics.record(0, Route::batch_allocate, 200, std::chrono::microseconds(10));
  const auto text = metrics.render(state, DedupCache::Stats{});

  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_namespaces 3\n"));
  // By name, as all_stats gives them.
  EXPECT_EQ(lines_with(text, "hf3fs_meta_ranks{"),
            (std::vector<std::string>{R"(hf3fs_meta_ranks{namespace="b2"} 2)",
                                      R"(hf3fs_meta_ranks{namespace="default"} 1)",
                                      R"(hf3fs_meta_ranks{namespace="m1"} 1)"}));
  EXPECT_EQ(lines_with(text, "hf3fs_meta_keys{"),
            (std::vector<std::string>{R"(hf3fs_meta_keys{namespace="b2"} 0)",
                                      R"(hf3fs_meta_keys{namespace="default"} 0)",
                                      R"(hf3fs_meta_keys{namespace="m1"} 1)"}));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"m1\",rank=\"2\",state=\"mapped\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"m1\",rank=\"2\",state=\"free\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"allocated\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_rank_pages{namespace=\"b2\",rank=\"1\",state=\"free\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("namespace=\"default\",rank=\"2\"")));  // m1's rank is m1's only
  EXPECT_EQ(lines_with(text, "hf3fs_meta_releases_kept_mapped_total{").size(), 4u);  // a sample per rank
  // Every lifecycle family: one sample per namespace, m1's deletion counted in m1 alone.
  for (const auto& field : protocol::kStateStatsFields) {
    const std::string name = "hf3fs_meta_" + std::string(field.name) + (field.counter ? "_total" : "");
    EXPECT_EQ(lines_with(text, name + "{namespace=").size(), 3u) << name;
    EXPECT_TRUE(lines_with(text, name + " ").empty()) << name << ": an unlabelled sample";
  }
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_deleted_keys_total{namespace=\"m1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("\nhf3fs_meta_deleted_keys_total{namespace=\"default\"} 0\n"));
  // The request counters: by route and status only.
  EXPECT_EQ(lines_with(text, "hf3fs_meta_requests_total{"),
            std::vector<std::string>{R"(hf3fs_meta_requests_total{route="/keys/batch_allocate",status="200"} 1)"});

  // A dropped namespace leaves every family.
  ASSERT_TRUE(state.drop_namespace("m1").value().dropped);
  const auto after = metrics.render(state, DedupCache::Stats{});
  EXPECT_THAT(after, HasSubstr("\nhf3fs_meta_namespaces 2\n"));
  EXPECT_THAT(after, Not(HasSubstr("namespace=\"m1\"")));
  EXPECT_THAT(after, HasSubstr("\nhf3fs_meta_deleted_keys_total{namespace=\"b2\"} 0\n"));
}

}  // namespace
}  // namespace hf3fs_meta::server
