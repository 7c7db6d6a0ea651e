// A log entry applied to a member's state through recovery's replay: a follower that applies a
// leader's records in entries ends with the leader's state and its request-id answers, whatever
// the entries' cuts; a gap or a damaged entry is refused naming it.
#include "ha/apply.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "durable/record.hpp"

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
  ASSERT_TRUE(apply_entry(follower, leader.entry(2, 5), out));  // all had: nothing to do
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

}  // namespace
}  // namespace hf3fs_meta::server::ha
