// The data dir's side of an HA member (ha/member.hpp): a replicated store trusts its data
// dir only up to its newest snapshot (cut_journal_after_snapshot), a leader serves its newest
// snapshot (map_newest_snapshot) and a member behind the compacted log installs them
// (install_snapshot) before its store opens, or while it runs (Store::install_snapshot).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "durable/data_dir.hpp"
#include "durable/store.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::durable {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

Store::Options options_for(const std::filesystem::path& dir) {
  Store::Options options;
  options.dir = dir;
  options.mode = FsyncMode::no;
  options.snapshot_after_bytes = 0;
  return options;
}

// Rank 0 with `pages` pages, then one allocate per key of `keys`; a snapshot after the first
// `snapshot_after` of them (none if negative). Returns the seq of the snapshot (0: none).
std::uint64_t build(const std::filesystem::path& dir, int keys, int snapshot_after) {
  MetadataState state;
  auto store = Store::open(options_for(dir), state);
  EXPECT_TRUE(store) << store.error().message;
  if (!store) return 0;
  EXPECT_TRUE(state.initialize(0, 64));
  std::uint64_t snapshot_seq = 0;
  for (int i = 0; i < keys; ++i) {
    if (i == snapshot_after) {
      EXPECT_TRUE(store.value()->snapshot());
      snapshot_seq = state.seq();
    }
    const std::vector<BlockKey> key = {BlockKey("k" + std::to_string(i))};
    EXPECT_TRUE(state.allocate(0, key));
    EXPECT_TRUE(store.value()->journal().write_through(state.seq()));
  }
  return snapshot_seq;  // the store goes without a shutdown snapshot
}

// The newest snapshot's bytes, as a leader sends them; an error's message when they cannot be read.
Result<std::string> newest_snapshot_bytes(const std::filesystem::path& dir) {
  auto mapped = map_newest_snapshot(dir);
  if (!mapped) return std::move(mapped).error();
  return std::string(mapped.value().bytes());
}

std::uint64_t recovered_seq(const std::filesystem::path& dir, MetadataState& state) {
  auto recovered = recover(dir, state);
  EXPECT_TRUE(recovered) << recovered.error().message;
  return recovered ? recovered.value().seq : 0;
}

TEST(DurableHaFilesTest, TheJournalAfterTheNewestSnapshotIsCutAway) {
  TempDir dir;
  const std::uint64_t snapshot_seq = build(dir.path(), 6, 3);
  ASSERT_EQ(snapshot_seq, 4u);  // the initialize and three allocates
  {
    MetadataState whole;
    EXPECT_EQ(recovered_seq(dir.path(), whole), 7u);
  }
  auto cut = cut_journal_after_snapshot(dir.path());
  ASSERT_TRUE(cut) << cut.error().message;
  EXPECT_EQ(cut.value(), snapshot_seq);
  MetadataState state;
  EXPECT_EQ(recovered_seq(dir.path(), state), snapshot_seq);
  ASSERT_TRUE(state.rank_stats(0));
  EXPECT_EQ(state.rank_stats(0)->allocated, 3);  // the allocates before the snapshot
}

TEST(DurableHaFilesTest, WithoutASnapshotEveryJournalIsCut) {
  TempDir dir;
  ASSERT_EQ(build(dir.path(), 4, -1), 0u);
  auto cut = cut_journal_after_snapshot(dir.path());
  ASSERT_TRUE(cut) << cut.error().message;
  EXPECT_EQ(cut.value(), 0u);
  MetadataState state;
  EXPECT_EQ(recovered_seq(dir.path(), state), 0u);
  EXPECT_EQ(state.rank_count(), 0u);
}

TEST(DurableHaFilesTest, AnInstalledSnapshotIsWhatANewMemberRecovers) {
  TempDir leader;
  const std::uint64_t snapshot_seq = build(leader.path(), 5, 4);
  auto bytes = newest_snapshot_bytes(leader.path());
  ASSERT_TRUE(bytes) << bytes.error().message;
  ASSERT_FALSE(bytes.value().empty());
  EXPECT_EQ(newest_snapshot_seq(leader.path()), snapshot_seq);

  TempDir root;
  const auto member = root.path() / "new-member";  // a first start: no directory yet
  EXPECT_EQ(newest_snapshot_seq(member), 0u);
  auto installed = install_snapshot(member, bytes.value());
  ASSERT_TRUE(installed) << installed.error().message;
  EXPECT_EQ(installed.value(), snapshot_seq);
  MetadataState state;
  auto store = Store::open(options_for(member), state);
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ(state.seq(), snapshot_seq);
  ASSERT_TRUE(state.rank_stats(0));
  EXPECT_EQ(state.rank_stats(0)->allocated, 4);
  // The journal goes on after the snapshot.
  const std::vector<BlockKey> key = {BlockKey("after")};
  ASSERT_TRUE(state.allocate(0, key));
  EXPECT_TRUE(store.value()->journal().write_through(state.seq()));
}

TEST(DurableHaFilesTest, DamagedBytesInstallNothing) {
  TempDir leader;
  build(leader.path(), 2, 1);
  auto bytes = newest_snapshot_bytes(leader.path());
  ASSERT_TRUE(bytes);
  std::string damaged = bytes.value();
  damaged[damaged.size() / 2] ^= 0x40;
  TempDir member;
  const std::uint64_t had = build(member.path(), 3, 2);
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(member.path())) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  for (const std::string& bad : {damaged, bytes.value().substr(0, bytes.value().size() - 1), std::string()}) {
    auto installed = install_snapshot(member.path(), bad);
    ASSERT_FALSE(installed);
    EXPECT_THAT(installed.error().message, HasSubstr("the fetched snapshot"));
  }
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(newest_snapshot_seq(member.path()), had);
}

// A replicated store (a standby's), with rank 0 and `keys` allocates made and acknowledged.
Store::Options replicated(const std::filesystem::path& dir) {
  Store::Options options = options_for(dir);
  options.replicate = [](std::string_view, std::uint64_t) -> Result<void> { return boost::outcome_v2::success(); };
  return options;
}

std::vector<std::string> file_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A standby behind the compacted log, running: the leader's snapshot becomes its state and its data
// dir's newest snapshot, its own changes after its last snapshot go, and the journal goes on after
// the snapshot, so that a restart recovers the snapshot and what followed.
TEST(DurableHaFilesTest, ARunningStoreInstallsASnapshotAndItsJournalFollowsIt) {
  TempDir leader;
  const std::uint64_t snapshot_seq = build(leader.path(), 6, 5);
  ASSERT_EQ(snapshot_seq, 6u);
  auto bytes = newest_snapshot_bytes(leader.path());
  ASSERT_TRUE(bytes) << bytes.error().message;

  TempDir member;
  {
    MetadataState state;
    auto store = Store::open(replicated(member.path()), state);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE(state.initialize(0, 64));
    ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{BlockKey("mine")}));
    ASSERT_TRUE(store.value()->journal().write_through(state.seq()));
    ASSERT_EQ(state.seq(), 2u);

    auto installed = store.value()->install_snapshot(bytes.value());
    ASSERT_TRUE(installed) << installed.error().message;
    EXPECT_EQ(state.seq(), snapshot_seq);
    ASSERT_TRUE(state.rank_stats(0));
    EXPECT_EQ(state.rank_stats(0)->allocated, 5);
    EXPECT_EQ(store.value()->stats().last_snapshot_seq, snapshot_seq);
    EXPECT_EQ(newest_snapshot_seq(member.path()), snapshot_seq);
    // What came before the snapshot is gone; the journal after it is the one written to.
    EXPECT_THAT(file_names(member.path()), ::testing::Not(::testing::Contains(journal_name(1))));
    EXPECT_THAT(file_names(member.path()), ::testing::Contains(journal_name(snapshot_seq + 1)));

    ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{BlockKey("after")}));
    ASSERT_TRUE(store.value()->journal().write_through(state.seq()));
    EXPECT_EQ(state.seq(), snapshot_seq + 1);
  }
  MetadataState restarted;
  EXPECT_EQ(recovered_seq(member.path(), restarted), snapshot_seq + 1);
  ASSERT_TRUE(restarted.rank_stats(0));
  EXPECT_EQ(restarted.rank_stats(0)->allocated, 6);
  EXPECT_EQ(restarted.batch_exists(std::vector<std::string>{"mine"}), std::vector<bool>{false});
}

// A snapshot no newer than the running state, or bytes that are not a whole snapshot, change
// nothing: not the state, not the files, and the journal goes on where it was.
TEST(DurableHaFilesTest, ARunningStoreRefusesAnOlderOrDamagedSnapshot) {
  TempDir leader;
  build(leader.path(), 3, 2);  // a snapshot of change 3
  auto bytes = newest_snapshot_bytes(leader.path());
  ASSERT_TRUE(bytes) << bytes.error().message;
  std::string damaged = bytes.value();
  damaged[damaged.size() / 2] ^= 0x40;

  TempDir member;
  MetadataState state;
  auto store = Store::open(replicated(member.path()), state);
  ASSERT_TRUE(store) << store.error().message;
  ASSERT_TRUE(state.initialize(0, 64));
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{BlockKey(key)}));
  ASSERT_TRUE(store.value()->journal().write_through(state.seq()));
  ASSERT_EQ(state.seq(), 4u);
  const auto before = file_names(member.path());

  auto older = store.value()->install_snapshot(bytes.value());
  ASSERT_FALSE(older);
  EXPECT_EQ(older.error().code, Errc::inconsistent);
  EXPECT_THAT(older.error().message, HasSubstr("not past this state's 4"));
  for (const std::string& bad : {damaged, std::string()}) {
    auto installed = store.value()->install_snapshot(bad);
    ASSERT_FALSE(installed);
    EXPECT_THAT(installed.error().message, HasSubstr("the fetched snapshot"));
  }
  EXPECT_EQ(file_names(member.path()), before);
  EXPECT_EQ(state.seq(), 4u);
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{BlockKey("d")}));
  ASSERT_TRUE(store.value()->journal().write_through(state.seq()));
  store.value().reset();
  MetadataState restarted;
  EXPECT_EQ(recovered_seq(member.path(), restarted), 5u);
}

}  // namespace
}  // namespace hf3fs_meta::durable
