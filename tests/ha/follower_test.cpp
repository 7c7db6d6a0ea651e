// LogFollower against a real 3-member etcd: a standby is handed every entry once and in order,
// across the end of its watch's member; it stops, saying why, when an entry is refused or the log
// was compacted past it.
#include "ha/follower.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "ha/election.hpp"
#include "support/etcd_suite.hpp"
#include "support/framed_records.hpp"

namespace hf3fs_meta::server::ha {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// What a follower was handed, and how it ended, for the test thread to wait on.
struct Handed {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::uint64_t> seqs;
  std::vector<std::string> batches;
  std::string ended;
  bool needs_snapshot = false;
  std::uint64_t refuse_at = 0;  // an entry with this last seq is refused

  LogFollower::Apply apply() {
    return [this](const LogEntry& entry) -> EtcdResult<void> {
      std::lock_guard lock(mutex);
      if (entry.last_seq == refuse_at) return EtcdError{EtcdError::Kind::not_applied, 0, "refused by the test"};
      seqs.push_back(entry.last_seq);
      batches.push_back(entry.batch);
      changed.notify_all();
      return boost::outcome_v2::success();
    };
  }
  LogFollower::Ended ended_with() {
    return [this](EtcdError why) {
      std::lock_guard lock(mutex);
      ended = why.message.empty() ? "(no reason)" : std::move(why.message);
      needs_snapshot = why.needs_snapshot;
      changed.notify_all();
    };
  }
  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 15s, [&] { return pred(*this); });
  }
};

class LogFollowerTest : public ::hf3fs_meta::testing::EtcdSuite {
 protected:
  void SetUp() override {
    EtcdSuite::SetUp();
    if (HasFatalFailure()) return;
    keys_ = std::make_unique<Keys>(test_name());
    // The leader writes through the last two members; the follower reads from the first on.
    const auto urls = cluster_->client_urls();
    writer_etcd_ = std::make_unique<EtcdClient>(EtcdOptions{{urls[1], urls[2]}});
    reader_etcd_ = std::make_unique<EtcdClient>(EtcdOptions{urls});
    election_ = std::make_unique<Election>(*writer_etcd_, [] { return std::chrono::steady_clock::now(); },
                                           ElectionOptions{keys_->leader(), "http://leader", 2, 300ms});
    const auto won = election_->campaign();
    ASSERT_TRUE(won && won.value().won);
    fence_ = won.value().fence;
    writer_ = std::make_unique<LogWriter>(*writer_etcd_, *keys_, fence_, read_tip(*writer_etcd_, *keys_).value());
  }
  void TearDown() override {
    if (election_) election_->resign();
  }

  // The records after the tip up to `last_seq`, as one entry.
  void append(std::uint64_t last_seq) {
    const auto appended = writer_->append(::hf3fs_meta::testing::framed_records(writer_->seq() + 1, last_seq), last_seq);
    ASSERT_TRUE(appended) << appended.error().message;
  }

  std::unique_ptr<Keys> keys_;
  std::unique_ptr<EtcdClient> writer_etcd_, reader_etcd_;
  std::unique_ptr<Election> election_;
  std::unique_ptr<LogWriter> writer_;
  std::int64_t fence_ = 0;
};


TEST_F(LogFollowerTest, CatchesUpThenFollowsEveryEntryOnceInOrder) {
  append(2);
  append(3);
  Handed handed;
  // A read limit of 1: the catch-up takes several reads.
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with(), {1, 200ms});
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() >= 2; }));
  append(5);
  append(6);
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() >= 4; }));
  follower.stop();
  EXPECT_THAT(handed.seqs, ElementsAre(2, 3, 5, 6));
  EXPECT_EQ(handed.batches[2], ::hf3fs_meta::testing::framed_records(4, 5));
  EXPECT_EQ(follower.applied(), 6u);
  EXPECT_EQ(follower.catch_ups(), 1u);  // one watch all along: it never ended
  EXPECT_TRUE(handed.ended.empty());  // stop() is not an end
}

TEST_F(LogFollowerTest, StartsAfterWhatTheMemberHas) {
  append(2);
  append(4);
  append(7);
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 3, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() >= 2; }));
  follower.stop();
  EXPECT_THAT(handed.seqs, ElementsAre(4, 7));  // 4 holds record 4 (and maybe 3, which apply skips)
}

TEST_F(LogFollowerTest, GoesOnThroughAnotherMemberWhenItsWatchsMemberDies) {
  append(1);
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() >= 1; }));
  ASSERT_EQ(reader_etcd_->current_endpoint(), cluster_->client_url(0));
  cluster_->kill(0);
  // If it led etcd, the others elect a leader first (a write meanwhile may time out: not this test's
  // subject).
  ASSERT_NO_THROW(cluster_->wait_healthy(20s));
  append(2);
  append(3);
  const bool caught_up = handed.wait([](Handed& h) { return h.seqs.size() >= 3; });
  follower.stop();
  cluster_->restart(0);
  ASSERT_TRUE(caught_up) << "the follower did not go on after its member died";
  EXPECT_THAT(handed.seqs, ElementsAre(1, 2, 3));
  EXPECT_GE(follower.catch_ups(), 2u);
}

TEST_F(LogFollowerTest, AWatchThatFallsSilentIsStartedAnewThroughAnotherMember) {
  append(1);
  Handed handed;
  // A short stall check, and a request timeout short enough for the stopped member's reads to fail.
  EtcdClient reader(EtcdOptions{cluster_->client_urls(), std::chrono::milliseconds(500), std::chrono::milliseconds(1000)});
  LogFollower follower(reader, *keys_, 0, handed.apply(), handed.ended_with(), {64, 200ms, 500ms});
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() >= 1; }));
  ASSERT_EQ(reader.current_endpoint(), cluster_->client_url(0));
  cluster_->stop(0);  // its watch stays open, and says nothing more
  ASSERT_NO_THROW(cluster_->wait_healthy(20s));  // the others, with a leader among them
  append(2);
  const bool caught_up = handed.wait([](Handed& h) { return h.seqs.size() >= 2; });
  follower.stop();
  cluster_->cont(0);
  ASSERT_TRUE(caught_up) << "the follower did not notice its watch had stalled";
  EXPECT_THAT(handed.seqs, ElementsAre(1, 2));
  EXPECT_GE(follower.catch_ups(), 2u);
  EXPECT_NE(reader.current_endpoint(), cluster_->client_url(0));
}

TEST_F(LogFollowerTest, AnEntryItCannotApplyEndsFollowingSayingWhy) {
  append(1);
  append(2);
  append(3);
  Handed handed;
  handed.refuse_at = 2;
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(handed.ended, HasSubstr("log entry 2 could not be applied: refused by the test"));
  EXPECT_FALSE(handed.needs_snapshot);
  EXPECT_THAT(handed.seqs, ElementsAre(1));
  EXPECT_EQ(follower.applied(), 1u);
}

// Entries put as a leader's journal that numbered records again would have put them (LogWriter
// refuses that): the follower refuses loudly, naming the seqs, and skips nothing.
class ForkedLogTest : public LogFollowerTest {
 protected:
  void put_entry(std::uint64_t first, std::uint64_t last) {
    ASSERT_TRUE(writer_etcd_->put({keys_->entry(last), ::hf3fs_meta::testing::framed_records(first, last)}));
    ASSERT_TRUE(writer_etcd_->put({keys_->tip(), std::to_string(last)}));
    writer_ = std::make_unique<LogWriter>(*writer_etcd_, *keys_, fence_, read_tip(*writer_etcd_, *keys_).value());
  }
};

TEST_F(ForkedLogTest, AnEntryHoldingRecordsAlreadyAppliedEndsFollowingNamingTheSeqs) {
  append(2);
  ASSERT_NO_FATAL_FAILURE(put_entry(1, 3));  // records 1-2 a second time
  append(4);
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(handed.ended, HasSubstr("log entry 3 (revision "));
  EXPECT_THAT(handed.ended, HasSubstr("holds records 1-3, which do not follow record 2, the last applied"));
  EXPECT_FALSE(handed.needs_snapshot);
  EXPECT_THAT(handed.seqs, ElementsAre(2));  // neither 3 nor what follows it
  EXPECT_EQ(follower.applied(), 2u);
}

TEST_F(ForkedLogTest, AGapEndsFollowingWhileTheWatchDelivers) {
  append(2);
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return h.seqs.size() == 1; }));
  ASSERT_NO_FATAL_FAILURE(put_entry(4, 5));  // record 3 nowhere
  ASSERT_TRUE(handed.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(handed.ended, HasSubstr("log entry 5 (revision "));
  EXPECT_THAT(handed.ended, HasSubstr("holds records 4-5, which do not follow record 2"));
  EXPECT_THAT(handed.seqs, ElementsAre(2));
}

// A member that restarted at the end of an entry (record 2 here) takes nothing from a later entry
// that holds record 2 again; one that restarted inside an entry takes that entry.
TEST_F(ForkedLogTest, AMemberStartingAtAnEntrysEndRefusesAnEntryHoldingItsRecordsAgain) {
  append(2);
  ASSERT_NO_FATAL_FAILURE(put_entry(1, 3));
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 2, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(handed.ended, HasSubstr("holds records 1-3, which do not follow record 2"));
  EXPECT_TRUE(handed.seqs.empty());

  Handed inside;
  LogFollower from_one(*reader_etcd_, *keys_, 1, inside.apply(), inside.ended_with());
  ASSERT_TRUE(inside.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(inside.seqs, ElementsAre(2));  // records 1-2, from record 2 on
  EXPECT_THAT(inside.ended, HasSubstr("holds records 1-3, which do not follow record 2"));
}

TEST_F(LogFollowerTest, ALogCompactedPastItEndsFollowingAsNeedingASnapshot) {
  append(1);
  append(2);
  ASSERT_TRUE(writer_etcd_->delete_range({keys_->entry(1), keys_->entry(3)}));
  Handed handed;
  LogFollower follower(*reader_etcd_, *keys_, 0, handed.apply(), handed.ended_with());
  ASSERT_TRUE(handed.wait([](Handed& h) { return !h.ended.empty(); }));
  EXPECT_THAT(handed.ended, HasSubstr("needs a snapshot"));
  EXPECT_TRUE(handed.needs_snapshot);
  EXPECT_TRUE(handed.seqs.empty());
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
