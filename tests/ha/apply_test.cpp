// A log entry applied to a member's state through recovery's replay: a follower that applies a
// leader's records in entries ends with the leader's state and its request-id answers, whatever
// the entries' cuts; a gap or a damaged entry is refused naming it.
#include "ha/apply.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/log_format.hpp"
#include "durable/record.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::server::ha {
namespace {

using ::testing::HasSubstr;

// A leader's state whose every change is framed as its journal would write it.
class Leader {
 public:
  Leader() {
    state.set_change_sink([this](const Change& change) {
      std::string& record = records.emplace_back();
      durable::encode_record(change, tag, record);
    });
  }

  // The records from `first` to `last` (1-based seqs) as one entry.
  LogEntry entry(std::uint64_t first, std::uint64_t last) const {
    LogEntry out;
    out.last_seq = last;
    for (std::uint64_t seq = first; seq <= last; ++seq) out.batch += records.at(seq - 1);
    return out;
  }

  MetadataState state;
  std::vector<std::string> records;
  const durable::DedupTag* tag = nullptr;  // the tag the next records carry
};

// Ranks in two namespaces, allocations (one with a request id), a confirm, a delete.
void make_history(Leader& leader) {
  ASSERT_TRUE(leader.state.initialize(0, 8));
  ASSERT_TRUE(leader.state.initialize(NamespaceRef{"m1"}, 0, 4));
  const durable::DedupTag tag{Route::batch_allocate, "request-1", 42, 10};
  leader.tag = &tag;
  const std::vector<BlockKey> keys = {BlockKey("a"), BlockKey("b")};
  const auto pages = leader.state.allocate(0, keys);
  leader.tag = nullptr;
  ASSERT_TRUE(pages);
  const Confirmation confirm{"a", pages.value()[0]};
  ASSERT_TRUE(leader.state.confirm_write(0, std::span(&confirm, 1), {}));
  const std::vector<std::string> gone = {"b"};
  leader.state.delete_keys(gone);
  const std::vector<BlockKey> other = {BlockKey("c")};
  ASSERT_TRUE(leader.state.allocate(NamespaceRef{"m1"}, 0, other));
}

TEST(HaApplyTest, AFollowerOfTheEntriesHasTheLeadersStateAndAnswers) {
  Leader leader;
  ASSERT_NO_FATAL_FAILURE(make_history(leader));
  const std::uint64_t n = leader.records.size();
  ASSERT_GE(n, 6u);

  MetadataState follower;
  durable::Recovered out;
  // Cut anyhow, and one entry overlapping what the follower has (a member that recovered up to
  // record 3 reads on from the entry that holds 4, which begins at 2).
  ASSERT_TRUE(apply_entry(follower, leader.entry(1, 3), out));
  EXPECT_EQ(out.seq, 3u);
  const auto overlapping = apply_entry(follower, leader.entry(2, 5), out);
  ASSERT_TRUE(overlapping) << overlapping.error().message;
  EXPECT_EQ(out.seq, 5u);
  // All had: refused, not skipped in silence, and nothing changes.
  const auto again = apply_entry(follower, leader.entry(2, 5), out);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, durable::Errc::inconsistent);
  EXPECT_THAT(again.error().message, HasSubstr("etcd log entry 5 holds no record after record 5, the last applied"));
  EXPECT_EQ(out.seq, 5u);
  ASSERT_TRUE(apply_entry(follower, leader.entry(6, n), out));
  EXPECT_EQ(out.seq, n);
  EXPECT_EQ(follower.export_image(), leader.state.export_image());

  // The request id's answer came with its record: the pages the allocate was answered.
  ASSERT_EQ(out.dedup.size(), 1u);
  EXPECT_EQ(out.dedup[0].tag.id, "request-1");
  EXPECT_EQ(out.dedup[0].pages.size(), 2u);
}

TEST(HaApplyTest, AnEntryAfterAGapIsRefusedAsNeedingASnapshot) {
  Leader leader;
  ASSERT_NO_FATAL_FAILURE(make_history(leader));
  MetadataState follower;
  durable::Recovered out;
  ASSERT_TRUE(apply_entry(follower, leader.entry(1, 2), out));
  const auto gap = apply_entry(follower, leader.entry(4, 5), out);
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, durable::Errc::inconsistent);
  EXPECT_THAT(gap.error().message, HasSubstr("etcd log entry 5 begins at record 4, after record 3"));
  EXPECT_THAT(gap.error().message, HasSubstr("needs a snapshot"));
  EXPECT_EQ(out.seq, 2u);  // nothing of it applied
}

TEST(HaApplyTest, ADamagedOrMislabelledEntryIsRefusedNamingIt) {
  Leader leader;
  ASSERT_NO_FATAL_FAILURE(make_history(leader));
  {
    MetadataState follower;
    durable::Recovered out;
    LogEntry damaged = leader.entry(1, 2);
    damaged.batch.back() ^= 0x01;  // the second record's payload checksum
    const auto refused = apply_entry(follower, damaged, out);
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().message, HasSubstr("etcd log entry 2"));
    EXPECT_EQ(out.seq, 1u);
  }
  {
    MetadataState follower;
    durable::Recovered out;
    LogEntry short_entry{3, leader.entry(1, 2).batch};  // its key says 3, it holds 1-2
    const auto refused = apply_entry(follower, short_entry, out);
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().message, HasSubstr("etcd log entry 3 ends at record 2"));
  }
  {
    MetadataState follower;
    durable::Recovered out;
    const auto refused = apply_entry(follower, LogEntry{1, "tiny"}, out);
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error().message, HasSubstr("etcd log entry 1: 4 bytes hold no record"));
  }
}

// A standby keeps a journal of what it applies (apply_entry to_sink, ha/member.hpp): its journal
// then holds the leader's records byte for byte, request-id tags included, so that its data dir
// and snapshots are the leader's at the same seq.
TEST(HaApplyTest, ToTheSinkAMembersJournalHoldsTheLeadersRecordsAsWritten) {
  Leader leader;
  ASSERT_NO_FATAL_FAILURE(make_history(leader));
  const std::uint64_t n = leader.records.size();
  testing::TempDir dir;
  durable::Journal::Options options;
  options.dir = dir.path();
  options.mode = durable::FsyncMode::no;
  auto journal = durable::Journal::open(options, durable::Recovered{});
  ASSERT_TRUE(journal) << journal.error().message;
  MetadataState follower;
  follower.set_change_sink([j = journal.value().get()](const Change& change) { j->append(change); });
  durable::Recovered out;
  ASSERT_TRUE(apply_entry(follower, leader.entry(1, 3), out, /*to_sink=*/true));
  ASSERT_TRUE(apply_entry(follower, leader.entry(2, n), out, /*to_sink=*/true));  // overlapping: once each
  ASSERT_TRUE(journal.value()->write_through(n));
  follower.set_change_sink({});
  journal.value().reset();

  std::ifstream file(dir.path() / durable::journal_name(1), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), durable::kFileHeaderSize);
  EXPECT_EQ(bytes.substr(durable::kFileHeaderSize), leader.entry(1, n).batch);
  // Without to_sink (recovery's own replay) nothing reaches a sink.
  MetadataState quiet;
  int sunk = 0;
  quiet.set_change_sink([&sunk](const Change&) { ++sunk; });
  durable::Recovered again;
  ASSERT_TRUE(apply_entry(quiet, leader.entry(1, n), again));
  EXPECT_EQ(sunk, 0);
  EXPECT_EQ(quiet.seq(), n);
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
