// The election and the replicated log against a real 3-member etcd on loopback: who wins, what a
// fence keeps out, and what a reader of the log is handed. LeaseWindow alone, on set time points.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "client/http_peer.hpp"
#include "durable/log_writer.hpp"
#include "ha/election.hpp"
#include "ha/log.hpp"
#include "ha/snapshot_fetch.hpp"
#include "ha/verify_log.hpp"
#include "support/etcd_suite.hpp"
#include "support/framed_records.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::server::ha {
namespace {

using ::hf3fs_meta::testing::HttpPeer;
using ::hf3fs_meta::testing::PeerRequest;
using ::hf3fs_meta::testing::PeerResponse;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

TEST(LeaseWindowTest, ALeaseIsSurelyAliveUntilTheRenewalsSendTimePlusTtlLessTheMargin) {
  LeaseWindow window(300ms);
  const TimePoint t0{std::chrono::seconds(100)};
  EXPECT_FALSE(window.surely_alive(t0));  // never granted
  window.renewed(t0, 2s);
  EXPECT_TRUE(window.surely_alive(t0 + 1699ms));
  EXPECT_FALSE(window.surely_alive(t0 + 1700ms));
  EXPECT_EQ(window.left(t0 + 700ms), std::chrono::steady_clock::duration(1s));
  window.renewed(t0 + 1s, 2s);
  EXPECT_TRUE(window.surely_alive(t0 + 2600ms));
  window.lost();
  EXPECT_FALSE(window.surely_alive(t0 + 1s));
}

// Framed records (their payloads do not matter here): the entry's first record says where it begins.
std::string records(std::uint64_t first, std::uint64_t last) { return ::hf3fs_meta::testing::framed_records(first, last); }

// The same records with other payloads: another leader's entry for the same seqs.
std::string other_records(std::uint64_t first, std::uint64_t last) {
  std::string out;
  durable::LogWriter writer(out);
  for (std::uint64_t seq = first; seq <= last; ++seq) writer.add_record_encoded(seq, [](std::string& p) { p += 'y'; });
  return out;
}

class HaEtcdTest : public ::hf3fs_meta::testing::EtcdSuite {
 protected:
  void SetUp() override {
    EtcdSuite::SetUp();
    if (HasFatalFailure()) return;
    EtcdOptions o;
    o.endpoints = cluster_->client_urls();
    etcd_ = std::make_unique<EtcdClient>(o);
  }

  // This test's own cluster name, so that tests do not see each other's keys.
  static Keys keys() { return Keys(test_name()); }

  ElectionOptions options(std::string advertise) const {
    return ElectionOptions{keys().leader(), std::move(advertise), 2, 300ms};
  }

  std::unique_ptr<EtcdClient> etcd_;
  SteadyClock real_clock_ = [] { return std::chrono::steady_clock::now(); };
};


TEST_F(HaEtcdTest, OneMemberWinsAndTheOtherLearnsWhoWithTheFence) {
  Election a(*etcd_, real_clock_, options("http://a"));
  Election b(*etcd_, real_clock_, options("http://b"));
  const auto won = a.campaign();
  ASSERT_TRUE(won) << won.error().message;
  EXPECT_TRUE(won.value().won);
  EXPECT_GT(won.value().fence, 0);
  EXPECT_TRUE(a.surely_alive());

  const auto lost = b.campaign();
  ASSERT_TRUE(lost);
  EXPECT_FALSE(lost.value().won);
  EXPECT_EQ(lost.value().leader, "http://a");
  EXPECT_EQ(lost.value().fence, won.value().fence);

  // A repeated campaign (its answer lost, say) wins again with the same fence.
  const auto again = a.campaign();
  ASSERT_TRUE(again);
  EXPECT_TRUE(again.value().won);
  EXPECT_EQ(again.value().fence, won.value().fence);

  a.resign();
  EXPECT_FALSE(a.surely_alive());
  const auto next = b.campaign();
  ASSERT_TRUE(next);
  EXPECT_TRUE(next.value().won);
  EXPECT_GT(next.value().fence, won.value().fence);
  b.resign();
}

TEST_F(HaEtcdTest, ALeaseLeftUnrenewedLapsesAndAnotherMemberWins) {
  Election a(*etcd_, real_clock_, options("http://a"));
  Election b(*etcd_, real_clock_, options("http://b"));
  ASSERT_TRUE(a.campaign().value().won);
  ASSERT_TRUE(a.renew().value());
  EXPECT_EQ(a.ttl_seconds(), 2);
  // etcd's own clock decides when the lease expires: this wait is etcd's, bounded by TTL + 3 s.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  bool b_won = false;
  TimePoint sent;
  while (!b_won && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(200ms);
    sent = std::chrono::steady_clock::now();
    b_won = b.campaign().value().won;
  }
  ASSERT_TRUE(b_won);
  // By its own clock, a stopped counting itself leader before b's winning campaign was even sent:
  // etcd expired a's lease no earlier than a's last renewal's send time + TTL, and b won after that.
  EXPECT_FALSE(a.window().surely_alive(sent));
  const auto renewed = a.renew();
  ASSERT_TRUE(renewed);
  EXPECT_FALSE(renewed.value());  // the lease is gone
  EXPECT_EQ(a.lease_id(), 0);
  b.resign();
}

TEST_F(HaEtcdTest, ALeaderIsNotSurelyAliveOnceItsClockPassesTheLease) {
  TimePoint now{std::chrono::seconds(1000)};
  Election a(*etcd_, [&] { return now; }, options("http://a"));
  ASSERT_TRUE(a.campaign().value().won);
  now += 1699ms;
  EXPECT_TRUE(a.surely_alive());
  now += 1ms;  // 2 s TTL less the 300 ms margin from the grant's send time
  EXPECT_FALSE(a.surely_alive());
  ASSERT_TRUE(a.renew().value());  // renewed now: alive from this send time on
  EXPECT_TRUE(a.surely_alive());
  a.resign();
}

TEST_F(HaEtcdTest, TheLogIsReadBackInOrderFromAnySeq) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  ASSERT_TRUE(won.value().won);
  const Keys k = keys();
  const auto tip = read_tip(*etcd_, k);
  ASSERT_TRUE(tip);
  EXPECT_EQ(tip.value().seq, 0u);
  LogWriter writer(*etcd_, k, won.value().fence, tip.value());
  // Entries as the journal would batch them: records 1-2, 3, 4-6.
  const std::pair<std::string, std::uint64_t> batches[] = {{records(1, 2), 2}, {records(3, 3), 3}, {records(4, 6), 6}};
  for (const auto& [batch, last] : batches) {
    const auto appended = writer.append(batch, last);
    ASSERT_TRUE(appended) << appended.error().message;
    EXPECT_EQ(appended.value().seq, last);
  }
  EXPECT_EQ(writer.seq(), 6u);
  EXPECT_EQ(read_tip(*etcd_, k).value().seq, 6u);

  const auto all = read_log(*etcd_, k, 0);
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all.value().entries.size(), 3u);
  EXPECT_EQ(all.value().entries[0].last_seq, 2u);
  EXPECT_EQ(all.value().entries[0].batch, records(1, 2));
  EXPECT_EQ(all.value().entries[2].batch, records(4, 6));
  // A reader at record 1 starts with the entry that holds record 2 (and 1 with it).
  const auto from_one = read_log(*etcd_, k, 1, 1);
  ASSERT_TRUE(from_one);
  ASSERT_EQ(from_one.value().entries.size(), 1u);
  EXPECT_EQ(from_one.value().entries[0].last_seq, 2u);
  const auto from_four = read_log(*etcd_, k, 4);
  ASSERT_TRUE(from_four);
  ASSERT_EQ(from_four.value().entries.size(), 1u);
  EXPECT_EQ(from_four.value().entries[0].last_seq, 6u);
  EXPECT_TRUE(read_log(*etcd_, k, 6).value().entries.empty());

  const auto behind = writer.append(records(6, 6), 6);
  ASSERT_FALSE(behind);
  EXPECT_THAT(behind.error().message, HasSubstr("records 6-6, said to end at record 6, does not follow record 6 (the last handed to the log)"));
  a.resign();
}

// A journal that numbered records again after its last entry (a rollback that missed a committed
// batch) must not fork the log: an entry holds exactly the records after the tip, or none is put.
TEST_F(HaEtcdTest, AnEntryIsAppendedOnlyIfItsFirstRecordIsTheOneAfterTheTip) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  ASSERT_TRUE(won.value().won);
  const Keys k = keys();
  const Tip start = read_tip(*etcd_, k).value();
  {
    LogWriter writer(*etcd_, k, won.value().fence, start);
    ASSERT_TRUE(writer.append(records(1, 2), 2));
    // Records 1-3 again: the last is past the tip, the first is not.
    const auto overlapping = writer.append(records(1, 3), 3);
    ASSERT_FALSE(overlapping);
    EXPECT_EQ(overlapping.error().kind, EtcdError::Kind::not_applied);
    EXPECT_THAT(overlapping.error().message,
                HasSubstr("an entry of records 1-3, said to end at record 3, does not follow record 2"));
    EXPECT_TRUE(writer.failed());  // the journal and the log disagree: the leader reads the log again
  }
  const std::pair<std::string, std::uint64_t> refused[] = {
      {records(4, 5), 5},          // a gap: record 3 nowhere
      {records(3, 4), 5},          // the key would name a record the entry does not hold
      {records(3, 4) + "xy", 4},   // bytes after the last record
      {records(3, 4).substr(0, 20), 4},  // a record cut short
      {records(3, 3) + records(5, 5), 5},  // numbered with a hole inside
      {"", 3},
  };
  // A batch past the next record waits for the call with the records before it (calls may overlap),
  // for the etcd call's timeout: kept short here.
  EtcdOptions quick;
  quick.endpoints = cluster_->client_urls();
  quick.request_timeout = 300ms;
  quick.call_timeout = 300ms;
  EtcdClient quick_etcd(quick);
  for (const auto& [batch, last] : refused) {
    LogWriter writer(quick_etcd, k, won.value().fence, read_tip(*etcd_, k).value());
    const auto appended = writer.append(batch, last);
    ASSERT_FALSE(appended) << batch.size() << " bytes up to " << last;
    EXPECT_THAT(appended.error().message, HasSubstr("does not follow record 2")) << last;
  }
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log);
  ASSERT_EQ(log.value().entries.size(), 1u);
  EXPECT_EQ(log.value().entries[0].batch, records(1, 2));
  EXPECT_EQ(read_tip(*etcd_, k).value().seq, 2u);
  LogWriter writer(*etcd_, k, won.value().fence, read_tip(*etcd_, k).value());
  ASSERT_TRUE(writer.append(records(3, 4), 4));
  a.resign();
}

TEST_F(HaEtcdTest, ADeposedLeaderAppendsNothing) {
  Election a(*etcd_, real_clock_, options("http://a"));
  Election b(*etcd_, real_clock_, options("http://b"));
  const Keys k = keys();
  const auto a_won = a.campaign();
  ASSERT_TRUE(a_won.value().won);
  LogWriter old_writer(*etcd_, k, a_won.value().fence, read_tip(*etcd_, k).value());
  ASSERT_TRUE(old_writer.append(records(1, 1), 1));

  a.resign();  // as if its lease lapsed
  const auto b_won = b.campaign();
  ASSERT_TRUE(b_won.value().won);
  LogWriter writer(*etcd_, k, b_won.value().fence, read_tip(*etcd_, k).value());

  const auto fenced = old_writer.append(records(2, 2), 2);
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.error().kind, EtcdError::Kind::not_applied);
  EXPECT_THAT(fenced.error().message, HasSubstr("fenced"));
  EXPECT_TRUE(old_writer.failed());
  ASSERT_TRUE(writer.append(records(2, 2), 2));
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log);
  ASSERT_EQ(log.value().entries.size(), 2u);  // a2 is nowhere
  EXPECT_EQ(log.value().entries[0].batch, records(1, 1));
  EXPECT_EQ(log.value().entries[1].batch, records(2, 2));
  b.resign();
}

// Appends overlap (the journal keeps several in flight), and etcd may take them in another order
// than they were sent: the later one's compare fails with the tip short of it, so it waits for the
// earlier one to be in, and is sent again. The log holds both, in order, each once.
TEST_F(HaEtcdTest, AnAppendThatReachesEtcdBeforeTheOneItFollowsIsSentAgainOnceThatOneIsIn) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  ASSERT_TRUE(won && won.value().won);
  const Keys k = keys();
  // In front of a real member: holds the first request back until the second has been answered.
  std::mutex mutex;
  std::condition_variable moved;
  int read = 0;
  std::vector<std::string> answers;  // the real member's, in the order it gave them
  HttpPeer reorder(HttpPeer::Mode::answer, [&](const PeerRequest& request) {
    std::unique_lock lock(mutex);
    const int mine = read++;
    moved.notify_all();
    if (mine == 0) moved.wait_for(lock, 10s, [&] { return !answers.empty(); });
    lock.unlock();
    const auto answer = ::hf3fs_meta::testing::http_call(cluster_->client_url(0).append(request.target), request.body, 5s);
    lock.lock();
    answers.push_back(answer.body);
    moved.notify_all();
    PeerResponse passed;
    passed.status = static_cast<int>(answer.status);
    passed.body = answer.body;
    return passed;
  });
  EtcdOptions o;
  o.endpoints = {reorder.url()};
  EtcdClient etcd(o);
  LogWriter writer(etcd, k, won.value().fence, read_tip(*etcd_, k).value());
  std::optional<EtcdResult<LogWriter::Appended>> first;
  std::thread sender([&] { first = writer.append(records(1, 2), 2); });
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(moved.wait_for(lock, 10s, [&] { return read >= 1; }));
  }
  const auto second = writer.append(records(3, 3), 3);
  sender.join();
  ASSERT_TRUE(first && *first) << first->error().message;
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second.value().seq, 3u);
  EXPECT_EQ(writer.seq(), 3u);
  std::lock_guard lock(mutex);
  EXPECT_EQ(read, 3);  // the second append twice
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_THAT(answers[0], Not(HasSubstr("\"succeeded\":true")));  // its compare failed: the tip was short of it
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log) << log.error().message;
  ASSERT_EQ(log.value().entries.size(), 2u);
  EXPECT_EQ(log.value().entries[0].batch, records(1, 2));
  EXPECT_EQ(log.value().entries[1].batch, records(3, 3));
  a.resign();
}

TEST_F(HaEtcdTest, TwoWritersFromOneTipCannotInterleave) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  const Keys k = keys();
  const Tip tip = read_tip(*etcd_, k).value();
  LogWriter first(*etcd_, k, won.value().fence, tip);
  LogWriter second(*etcd_, k, won.value().fence, tip);
  ASSERT_TRUE(first.append(records(1, 1), 1));
  const auto refused = second.append(records(1, 1), 1);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("tip moved past record 0"));
  const auto after = second.append(records(2, 2), 2);
  ASSERT_FALSE(after);
  EXPECT_THAT(after.error().message, HasSubstr("already failed"));
  EXPECT_EQ(read_log(*etcd_, k, 0).value().entries.size(), 1u);
  a.resign();
}

// --verify-ha-log's check (verify_log.hpp): a log as leaders write it is sound, before and after
// a compaction; each way a log can be wrong is named, with the entry and the records.
TEST_F(HaEtcdTest, VerifyingTheLogFindsItSoundOrNamesTheFirstThingWrong) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  ASSERT_TRUE(won.value().won);
  const Keys k = keys();
  {
    LogWriter writer(*etcd_, k, won.value().fence, read_tip(*etcd_, k).value());
    ASSERT_TRUE(writer.append(records(1, 2), 2));
    ASSERT_TRUE(writer.append(records(3, 5), 5));
    ASSERT_TRUE(writer.append(records(6, 6), 6));
  }
  auto sound = verify_log(*etcd_, k, /*page=*/2);  // two reads of entries
  ASSERT_TRUE(sound);
  EXPECT_EQ(sound.value().problem, "");
  EXPECT_EQ(sound.value().entries, 3u);
  EXPECT_EQ(sound.value().first_seq, 1u);
  EXPECT_EQ(sound.value().last_seq, 6u);
  EXPECT_EQ(sound.value().bytes, records(1, 6).size());
  // Compacted below record 3: the log begins at the oldest entry left.
  ASSERT_TRUE(etcd_->delete_range({k.log_prefix(), k.entry(3)}));
  sound = verify_log(*etcd_, k);
  ASSERT_TRUE(sound);
  EXPECT_EQ(sound.value().problem, "");
  EXPECT_EQ(sound.value().first_seq, 3u);
  EXPECT_EQ(sound.value().entries, 2u);
  a.resign();

  // Each a log of its own, written by hand as no leader would: the verdict names what is wrong.
  std::string damaged = records(2, 3);
  damaged.back() ^= 0x01;
  const struct {
    const char* name;
    std::vector<std::pair<std::uint64_t, std::string>> entries;  // keyed by last seq
    std::uint64_t tip;
    const char* problem;
  } broken[] = {
      {"twice", {{2, records(1, 2)}, {3, records(2, 3)}}, 3, "holds records 2-3, which do not follow record 2"},
      {"gap", {{2, records(1, 2)}, {5, records(4, 5)}}, 5, "holds records 4-5, which do not follow record 2"},
      {"checksum", {{1, records(1, 1)}, {3, damaged}}, 3, "record payload checksum mismatch"},
      {"mislabelled", {{1, records(1, 1)}, {4, records(2, 3)}}, 4, "holds records 2-3, which do not follow record 1"},
      {"tip", {{1, records(1, 1)}, {2, records(2, 2)}}, 7,
       "the log's entries end at record 2 but its tip says record 7"},
      {"stray_key", {{1, records(1, 1)}}, 1, "which is not an entry's key"},
  };
  for (const auto& c : broken) {
    const Keys bad(test_name() + "-" + c.name);
    for (const auto& [last, batch] : c.entries) ASSERT_TRUE(etcd_->put({bad.entry(last), batch}));
    if (std::string_view(c.name) == "stray_key") {
      ASSERT_TRUE(etcd_->put({bad.log_prefix() + "junk", "x"}));
    }
    ASSERT_TRUE(etcd_->put({bad.tip(), std::to_string(c.tip)}));
    const auto verdict = verify_log(*etcd_, bad);
    ASSERT_TRUE(verdict) << c.name;
    EXPECT_THAT(verdict.value().problem, HasSubstr(c.problem)) << c.name;
  }
}

TEST_F(HaEtcdTest, AReaderBehindACompactedLogIsToldItNeedsASnapshot) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  const Keys k = keys();
  LogWriter writer(*etcd_, k, won.value().fence, read_tip(*etcd_, k).value());
  ASSERT_TRUE(writer.append(records(1, 1), 1));
  ASSERT_TRUE(writer.append(records(2, 2), 2));
  ASSERT_TRUE(etcd_->delete_range({k.entry(1), k.entry(3)}));  // the leader's log compaction
  const auto behind = read_log(*etcd_, k, 0);
  ASSERT_FALSE(behind);
  EXPECT_THAT(behind.error().message, HasSubstr("the log's tip is record 2 but no entry holds record 1"));
  EXPECT_THAT(behind.error().message, HasSubstr("needs a snapshot"));
  EXPECT_TRUE(read_log(*etcd_, k, 2).value().entries.empty());
  a.resign();
}

TEST_F(HaEtcdTest, AReaderWhoseNextRecordWasCompactedAwayNeedsASnapshotThoughLaterEntriesAreLeft) {
  Election a(*etcd_, real_clock_, options("http://a"));
  const auto won = a.campaign();
  const Keys k = keys();
  LogWriter writer(*etcd_, k, won.value().fence, read_tip(*etcd_, k).value());
  ASSERT_TRUE(writer.append(records(1, 2), 2));
  ASSERT_TRUE(writer.append(records(3, 4), 4));
  ASSERT_TRUE(etcd_->delete_range({k.entry(1), k.entry(3)}));  // records 1-2 compacted away
  for (const std::uint64_t after : {0u, 1u}) {
    const auto behind = read_log(*etcd_, k, after);
    ASSERT_FALSE(behind) << after;
    EXPECT_TRUE(behind.error().needs_snapshot);
    EXPECT_THAT(behind.error().message, HasSubstr("no entry holds record " + std::to_string(after + 1)));
  }
  const auto next = read_log(*etcd_, k, 2);
  ASSERT_TRUE(next) << next.error().message;
  ASSERT_EQ(next.value().entries.size(), 1u);
  EXPECT_EQ(next.value().entries.front().last_seq, 4u);
  a.resign();
}

// A data dir the log continues needs no snapshot; one it does not, with no leader to give one, or a
// leader that does not answer, gets an error naming why once the wait is over, and its data dir
// gets nothing (not even the download's file).
TEST_F(HaEtcdTest, AFetchWithoutASnapshotToGetGivesUpNamingWhy) {
  Election a(*etcd_, real_clock_, options("http://127.0.0.1:1"));  // nothing listens there
  const auto won = a.campaign();
  ASSERT_TRUE(won && won.value().won);
  const Keys k = keys();
  LogWriter writer(*etcd_, k, won.value().fence, read_tip(*etcd_, k).value());
  ASSERT_TRUE(writer.append(records(1, 2), 2));
  ASSERT_TRUE(writer.append(records(3, 4), 4));
  ::hf3fs_meta::testing::TempDir dir;
  SnapshotFetchOptions quick;
  quick.wait_for_leader = 600ms;
  const auto continued = fetch_snapshot_if_behind(*etcd_, k, dir.path(), quick);
  ASSERT_TRUE(continued) << continued.error().message;
  EXPECT_EQ(continued.value(), 0u);

  ASSERT_TRUE(etcd_->delete_range({k.entry(1), k.entry(3)}));  // records 1-2 compacted away
  const auto unanswered = fetch_snapshot_if_behind(*etcd_, k, dir.path(), quick);
  ASSERT_FALSE(unanswered);
  EXPECT_THAT(unanswered.error().message, HasSubstr("no longer holds what follows change 0"));
  EXPECT_THAT(unanswered.error().message, HasSubstr("http://127.0.0.1:1/_ha/snapshot did not answer"));
  a.resign();
  const auto leaderless = fetch_snapshot_if_behind(*etcd_, k, dir.path(), quick);
  ASSERT_FALSE(leaderless);
  EXPECT_THAT(leaderless.error().message, HasSubstr("no snapshot came from the leader: no leader"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---- appends whose answer is lost ----------------------------------------------------------------
//
// The first member of the writer's client is an HttpPeer that reads each request, hands it to the
// test (which may pass it on to a real member, or act as another leader meanwhile), then hangs up
// unanswered: the writer cannot know what became of that copy, and repeats it through the next member.

class LostAnswerTest : public HaEtcdTest {
 protected:
  // A client whose first member is `losing`, then the real ones.
  std::unique_ptr<EtcdClient> losing_client(const HttpPeer& losing) {
    EtcdOptions o;
    o.endpoints = cluster_->client_urls();
    o.endpoints.insert(o.endpoints.begin(), losing.url());
    return std::make_unique<EtcdClient>(o);
  }
  void expect_fenced_after_a_lost_answer(bool and_appends);

  // Member "http://a" (a_) campaigns and wins: its fence; 0 when it did not win (the test has then
  // failed, saying why).
  std::int64_t win() {
    a_.emplace(*etcd_, real_clock_, options("http://a"));
    const auto won = a_->campaign();
    if (!won) {
      ADD_FAILURE() << "the campaign failed: " << won.error().message;
      return 0;
    }
    if (!won.value().won) {
      ADD_FAILURE() << "the campaign lost to " << won.value().leader;
      return 0;
    }
    return won.value().fence;
  }

  std::optional<Election> a_;  // the writer's member, once win() made it
};

// The first copy committed (passed on to a real member) and only its answer was lost: the repeat's
// compare fails, and the entry read back is this one, so the append is answered once, committed.
TEST_F(LostAnswerTest, AnAppendThatCommittedThoughItsAnswerWasLostIsAnsweredAsCommitted) {
  const std::int64_t fence = win();
  ASSERT_NE(fence, 0);
  const Keys k = keys();
  std::mutex mutex;
  long passed_on = -1;  // the real member's status for the copy passed on; under mutex
  HttpPeer losing(HttpPeer::Mode::hang_up, {}, [&](const PeerRequest& request) {
    const auto answer = ::hf3fs_meta::testing::http_call(cluster_->client_url(0).append(request.target), request.body, 5s);
    std::lock_guard lock(mutex);
    passed_on = answer.status;
  });
  const auto etcd = losing_client(losing);
  LogWriter writer(*etcd, k, fence, read_tip(*etcd_, k).value());
  const auto appended = writer.append(records(1, 2), 2);
  ASSERT_TRUE(appended) << appended.error().message;
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(passed_on, 200);  // the copy whose answer was lost did commit
  }
  EXPECT_EQ(appended.value().seq, 2u);
  EXPECT_THAT(appended.value().lost_answer, HasSubstr(losing.url()));
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log) << log.error().message;
  ASSERT_EQ(log.value().entries.size(), 1u);
  EXPECT_EQ(log.value().entries[0].batch, records(1, 2));
  EXPECT_EQ(appended.value().revision, log.value().entries[0].revision);
  // The writer goes on from the entry the first copy put, through the member that answered.
  const auto next = writer.append(records(3, 3), 3);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_TRUE(next.value().lost_answer.empty());
  EXPECT_EQ(read_tip(*etcd_, k).value().seq, 3u);
  EXPECT_EQ(losing.requests().size(), 1u);
  a_->resign();
}

// No member took the first copy: the tip is where the writer left it, so the repeat commits.
TEST_F(LostAnswerTest, AnAppendLostBeforeAnyMemberTookItIsCommittedByItsRepeat) {
  const std::int64_t fence = win();
  ASSERT_NE(fence, 0);
  const Keys k = keys();
  HttpPeer losing(HttpPeer::Mode::hang_up);
  const auto etcd = losing_client(losing);
  LogWriter writer(*etcd, k, fence, read_tip(*etcd_, k).value());
  const auto appended = writer.append(records(1, 2), 2);
  ASSERT_TRUE(appended) << appended.error().message;
  EXPECT_FALSE(appended.value().lost_answer.empty());
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log) << log.error().message;
  ASSERT_EQ(log.value().entries.size(), 1u);
  EXPECT_EQ(log.value().entries[0].batch, records(1, 2));
  EXPECT_EQ(appended.value().revision, log.value().entries[0].revision);
  EXPECT_EQ(losing.requests().size(), 1u);
  a_->resign();
}

// While the first copy's answer is lost, another member takes the lead (`and_appends`: and puts its
// own entry for the same records). The repeat is fenced, and nothing of this writer's is in the log,
// whether the tip stayed short of the entry or another's entry holds its key.
void LostAnswerTest::expect_fenced_after_a_lost_answer(bool and_appends) {
  const std::int64_t fence = win();
  ASSERT_NE(fence, 0);
  Election b(*etcd_, real_clock_, options("http://b"));
  const Keys k = keys();
  std::mutex mutex;
  std::optional<bool> taken_over;  // under mutex
  HttpPeer losing(HttpPeer::Mode::hang_up, {}, [&](const PeerRequest&) {
    a_->resign();
    const auto taken = b.campaign();
    bool ok = taken && taken.value().won;
    if (ok && and_appends) {
      LogWriter other(*etcd_, k, taken.value().fence, read_tip(*etcd_, k).value());
      ok = static_cast<bool>(other.append(other_records(1, 2), 2));
    }
    std::lock_guard lock(mutex);
    taken_over = ok;
  });
  const auto etcd = losing_client(losing);
  LogWriter writer(*etcd, k, fence, read_tip(*etcd_, k).value());
  const auto appended = writer.append(records(1, 2), 2);
  {
    std::lock_guard lock(mutex);
    ASSERT_EQ(taken_over, std::optional<bool>(true)) << "the other member did not take over";
  }
  ASSERT_FALSE(appended);
  EXPECT_EQ(appended.error().kind, EtcdError::Kind::not_applied);
  EXPECT_THAT(appended.error().message, HasSubstr("fenced"));
  EXPECT_TRUE(writer.failed());
  const auto log = read_log(*etcd_, k, 0);
  ASSERT_TRUE(log) << log.error().message;
  if (and_appends) {
    ASSERT_EQ(log.value().entries.size(), 1u);
    EXPECT_EQ(log.value().entries[0].batch, other_records(1, 2));
  } else {
    EXPECT_TRUE(log.value().entries.empty());
  }
  EXPECT_EQ(losing.requests().size(), 1u);
  b.resign();
}

TEST_F(LostAnswerTest, AnAppendLostWhileAnotherMemberTookTheLeadIsNotApplied) {
  expect_fenced_after_a_lost_answer(/*and_appends=*/false);
}

TEST_F(LostAnswerTest, AnAppendLostWhileAnotherLeaderPutItsOwnEntryThereIsNotApplied) {
  expect_fenced_after_a_lost_answer(/*and_appends=*/true);
}

// No member answers at all: the writer repeats through each until the etcd call's timeout has
// passed since its first copy, and then says that the outcome is unknown (a copy may yet commit).
TEST_F(LostAnswerTest, AnAppendNoMemberAnswersIsUnknownOnceTheCallTimeoutHasPassed) {
  const std::int64_t fence = win();
  ASSERT_NE(fence, 0);
  const Keys k = keys();
  HttpPeer first(HttpPeer::Mode::silent);
  HttpPeer second(HttpPeer::Mode::silent);
  EtcdOptions o;
  o.endpoints = {first.url(), second.url()};
  o.request_timeout = 200ms;
  o.call_timeout = 700ms;
  EtcdClient etcd(o);
  LogWriter writer(etcd, k, fence, read_tip(*etcd_, k).value());
  const auto appended = writer.append(records(1, 2), 2);
  ASSERT_FALSE(appended);
  EXPECT_EQ(appended.error().kind, EtcdError::Kind::unknown);
  EXPECT_THAT(appended.error().message, HasSubstr("no etcd member said within 700 ms whether the log took it"));
  EXPECT_THAT(appended.error().message, HasSubstr(first.url()));  // the first copy's, lost
  EXPECT_TRUE(writer.failed());
  EXPECT_GE(first.requests().size(), 1u);
  EXPECT_GE(second.requests().size(), 1u);  // repeated through the next member
  EXPECT_TRUE(read_log(*etcd_, k, 0).value().entries.empty());
  a_->resign();
}

TEST(HaKeysTest, EntriesSortAsTheirSeqsAndParseBack) {
  const Keys k("c");
  EXPECT_EQ(k.leader(), "/hf3fs-meta/c/leader");
  EXPECT_EQ(k.entry(12), "/hf3fs-meta/c/log/00000000000000000012");
  EXPECT_LT(k.entry(9), k.entry(10));
  EXPECT_EQ(k.seq_of(k.entry(18446744073709551615ull)), 18446744073709551615ull);
  EXPECT_EQ(k.seq_of("/hf3fs-meta/c/log/99999999999999999999"), 0u);  // beyond 64 bits
  EXPECT_EQ(k.seq_of("/hf3fs-meta/c/log/0000000000000000001x"), 0u);
  EXPECT_EQ(k.seq_of("/hf3fs-meta/d/log/00000000000000000001"), 0u);
  EXPECT_EQ(k.seq_of(k.tip()), 0u);
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
