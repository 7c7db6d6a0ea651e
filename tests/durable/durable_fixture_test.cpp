// A data dir written by bad7982's server (tests/fixtures/data_dir_bad7982, made by the script beside
// it; its transcript.txt holds the requests and their answers) is recovered exactly: the snapshot
// (version 2, request-id answers as whole tagged records) and the journal after it (tagged records,
// a deletion under a read lease, its drain, a reclaim, clock readings), and a server of today
// continues it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/data_dir.hpp"
#include "durable/record.hpp"
#include "durable/store.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/state.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::durable {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const fs::path kFixture = fs::path(HF3FS_META_FIXTURES_DIR) / "data_dir_bad7982";
const std::string kSnapshot = "snapshot-00000000000000000018.snap";
const std::string kJournal = "journal-00000000000000000019.log";
// The clock reading of the last change (record 32, before alloc-7): h's page was allocated then.
constexpr std::int64_t kLastClockMs = 1'796'173'247'243;

// The server's flags when it wrote the fixture (--eviction lru --read-lease-ms 2000
// --allocation-ttl-ms 3000); recovery reads no clock.
StateOptions server_options() {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(2000);
  options.allocation_ttl = std::chrono::milliseconds(3000);
  options.clock = [] { return std::chrono::milliseconds(kLastClockMs); };
  return options;
}

void copy_fixture(const fs::path& to) {
  for (const std::string& name : {kSnapshot, kJournal}) fs::copy_file(kFixture / name, to / name);
}

// A request-id answer as the server kept it: the route, the id, and the hash and size of the body
// (its DedupCache::body_hash, std::hash of the body), then the answer.
DedupEntry answer(std::uint64_t seq, Route route, std::string id, std::string_view body,
                  std::vector<std::uint32_t> pages) {
  const std::uint32_t status = route == Route::batch_allocate ? 200 : 204;
  return DedupEntry{seq, DedupTag{route, std::move(id), std::hash<std::string_view>{}(body), body.size()}, status,
                    std::move(pages), 0};
}

// The request ids of transcript.txt, with the records that answered them: the snapshot's (as whole
// tagged records: no time kept) and the journal's (no time recorded).
std::vector<DedupEntry> expected_answers() {
  return {
      answer(6, Route::batch_allocate, "alloc-1", R"({"rank": 0, "keys": [["a", ""], ["b", ""]]})", {0, 1}),
      answer(8, Route::batch_allocate, "alloc-2", R"({"rank": 1, "keys": [["a", ""], ["b", ""]]})", {0, 1}),
      answer(10, Route::confirm_write, "confirm-1",
             R"({"rank": 0, "confirmations": [["a", 0], ["b", 1]], "pages_to_release": []})", {}),
      answer(14, Route::batch_allocate, "alloc-3", R"({"rank": 0, "keys": [["c", ""]]})", {2}),
      answer(18, Route::batch_allocate, "alloc-4", R"({"rank": 0, "keys": [["d", ""], ["e", ""], ["f", ""]]})",
             {3, 2, 0}),
      answer(20, Route::confirm_write, "confirm-2",
             R"({"rank": 0, "confirmations": [["d", 3], ["e", 2], ["f", 0]], "pages_to_release": []})", {}),
      answer(22, Route::batch_allocate, "alloc-5", R"({"rank": 1, "keys": [["d", ""], ["e", ""], ["f", ""]]})",
             {2, 3, 4}),
      answer(26, Route::batch_allocate, "alloc-6", R"({"rank": 1, "keys": [["g", ""]]})", {5}),
      answer(33, Route::batch_allocate, "alloc-7", R"({"rank": 0, "keys": [["h", ""]]})", {1}),
  };
}

// The state transcript.txt leads to: keys, pages, pools (front first) and the lifecycle's state.
void expect_fixture_state(const MetadataState& state) {
  EXPECT_EQ(state.seq(), 33u);
  EXPECT_EQ(state.key_count(), 3u);
  EXPECT_EQ(state.key_info("d"), (KeyInfo{2, {{0, 3}, {1, 2}}, true}));
  EXPECT_EQ(state.key_info("e"), (KeyInfo{2, {{0, 2}, {1, 3}}, true}));
  EXPECT_EQ(state.key_info("f"), (KeyInfo{2, {{0, 0}, {1, 4}}, true}));
  // a evicted, b deleted (drained since), c and g reclaimed, h allocated and not confirmed.
  for (const char* gone : {"a", "b", "c", "g", "h"}) EXPECT_EQ(state.key_info(gone), std::nullopt) << gone;

  // Rank 0: f, h (allocated), e, d; nothing free.
  EXPECT_EQ(state.free_pages(0), (std::vector<Page>{}));
  EXPECT_EQ(state.page_state(0, 0), PageState::mapped);
  EXPECT_EQ(state.page_state(0, 1), PageState::allocated);
  EXPECT_EQ(state.page_state(0, 2), PageState::mapped);
  EXPECT_EQ(state.page_state(0, 3), PageState::mapped);
  const std::vector<Page> h_page{1};
  EXPECT_TRUE(state.holds(0, h_page, std::vector<BlockKey>{{"h", ""}}));
  EXPECT_FALSE(state.holds(0, h_page, std::vector<BlockKey>{{"c", ""}}));
  // Rank 1: the pool after a's eviction (0), b's drain (1) and g's reclaim (5), in that order.
  EXPECT_EQ(state.free_pages(1), (std::vector<Page>{6, 7, 0, 1, 5}));
  EXPECT_EQ(state.page_state(1, 5), PageState::free);

  const StateImage image = state.export_image();
  ASSERT_EQ(image.ranks.size(), 2u);
  EXPECT_EQ(image.ranks[0].rank, 0);
  EXPECT_EQ(image.ranks[1].rank, 1);
  for (const RankImage& r : image.ranks) EXPECT_EQ(r.kept_on_release, 0u);
  // The lifecycle: h's page timed since the last clock reading; b's drain done; g's page (reclaimed
  // in the journal) marked, c's (reclaimed before the snapshot, which kept no marks, and mapped to e
  // since) not.
  EXPECT_EQ(image.clock_ms, kLastClockMs);
  EXPECT_EQ(image.timed_pages, (std::vector<TimedPageImage>{{kLastClockMs, 0, 1}}));
  EXPECT_TRUE(image.timed_keys.empty());
  EXPECT_TRUE(image.draining_ids.empty());
  EXPECT_TRUE(image.ranks[0].reclaimed.empty());
  EXPECT_EQ(image.ranks[1].reclaimed, (std::vector<std::uint32_t>{5}));
  EXPECT_EQ(image.free_ids.size(), 1u);  // b's id, free once it drained (a's was reused by d)
}

TEST(DurableFixture, ADataDirWrittenByBad7982IsRecoveredExactly) {
  TempDir dir;
  copy_fixture(dir.path());
  MetadataState state(server_options());
  auto recovered = recover(dir.path(), state);
  ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
  const Recovered& r = recovered.value();
  EXPECT_EQ(r.snapshot_seq, 18u);
  EXPECT_EQ(r.seq, 33u);
  EXPECT_EQ(r.records, 15u);
  EXPECT_EQ(r.journal, dir.path() / kJournal);
  EXPECT_EQ(r.journal_first_seq, 19u);
  EXPECT_EQ(r.journal_valid_bytes, fs::file_size(kFixture / kJournal));
  EXPECT_EQ(r.cut, std::nullopt);
  EXPECT_EQ(r.dedup, expected_answers());
  expect_fixture_state(state);
}

// Today's server continues the fixture's journal and writes today's snapshot of it, from which
// the same state and answers come back.
TEST(DurableFixture, ADataDirWrittenByBad7982IsContinuedAndSnapshottedInTodaysFormat) {
  TempDir dir;
  copy_fixture(dir.path());
  StateImage before;
  {
    MetadataState state(server_options());
    auto store = Store::open(Store::Options{dir.path(), FsyncMode::no, 0, std::size_t{1} << 20}, state);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    expect_fixture_state(state);
    before = state.export_image();
    auto written = store.value()->shutdown();
    ASSERT_TRUE(written.has_value()) << written.error().message;
  }
  // restarted() recorded nothing (no draining pages): the snapshot is at the fixture's last change.
  EXPECT_TRUE(fs::exists(dir.path() / "snapshot-00000000000000000033.snap"));
  EXPECT_FALSE(fs::exists(dir.path() / kSnapshot));
  MetadataState state(server_options());
  auto recovered = recover(dir.path(), state);
  ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
  EXPECT_EQ(recovered.value().snapshot_seq, 33u);
  EXPECT_EQ(recovered.value().records, 0u);
  EXPECT_EQ(state.export_image(), before);
  expect_fixture_state(state);
  // The answers' windows started at the restart that read them: their times are kept from then on.
  std::vector<DedupEntry> answers = recovered.value().dedup;
  for (DedupEntry& e : answers) {
    EXPECT_GT(e.at_ms, 0) << e.tag.id;
    e.at_ms = 0;
  }
  EXPECT_EQ(answers, expected_answers());
}

}  // namespace
}  // namespace hf3fs_meta::durable
