// Journal::Options::replicate: a record is acknowledged once the replicated log has it, never
// before; what is written during a replication goes into the next batch (group commit); with
// several calls in flight, their outcomes settle in the records' order;
// batches are whole records in order under the size limit; a failed replication is rolled back to
// the last record replicated. The replicated log here is the test's own, which can hold a call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "durable/store.hpp"
#include "support/durable_support.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::durable {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

// The test's replicated log: keeps each batch; holds a call while `hold`; fails while `fail_with`.
class FakeLog {
 public:
  Result<void> replicate(std::string_view records, std::uint64_t last_seq) {
    std::unique_lock lock(mutex_);
    ++calls_entered_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !hold_; });
    if (fail_with_) return Error{Errc::io, *fail_with_};
    batches_.push_back({std::string(records), last_seq});
    changed_.notify_all();
    return boost::outcome_v2::success();
  }
  auto function() {
    return [this](std::string_view records, std::uint64_t last_seq) { return replicate(records, last_seq); };
  }

  void hold() { set([&] { hold_ = true; }); }
  void release() { set([&] { hold_ = false; }); }
  void fail(std::string why) { set([&] { fail_with_ = std::move(why); }); }
  // Waits (bounded) until `n` calls have begun.
  bool wait_entered(int n) { return wait([&] { return calls_entered_ >= n; }); }
  // Waits (bounded) until a batch ends at record `seq`.
  bool wait_replicated(std::uint64_t seq) {
    return wait([&] { return !batches_.empty() && batches_.back().second >= seq; });
  }
  // The seqs of each batch's records, read back with the journal's own reader.
  std::vector<std::vector<std::uint64_t>> batch_seqs() {
    std::lock_guard lock(mutex_);
    std::vector<std::vector<std::uint64_t>> out;
    for (const auto& [records, last_seq] : batches_) {
      auto& seqs = out.emplace_back();
      std::string file = file_header(kJournalMagic);
      file += records;
      struct : CorruptionReporter {
        void dropped(std::size_t, std::string_view) override { ADD_FAILURE() << "a torn batch"; }
      } reporter;
      LogReader reader("batch", file, false, record_span(records).seq, reporter);
      for (;;) {
        auto next = reader.read();
        EXPECT_TRUE(next) << (next ? "" : next.error().message);
        if (!next || !next.value()) break;
        seqs.push_back(next.value()->seq);
      }
      EXPECT_EQ(seqs.empty() ? 0 : seqs.back(), last_seq);
    }
    return out;
  }

 private:
  template <class F>
  void set(F f) {
    std::lock_guard lock(mutex_);
    f();
    changed_.notify_all();
  }
  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), pred);
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool hold_ = false;
  std::optional<std::string> fail_with_;
  int calls_entered_ = 0;
  std::vector<std::pair<std::string, std::uint64_t>> batches_;
};

// A journal over an empty data dir with the fake log, and a state whose changes it records.
struct Replicated : ::testing::Test {
  void open(std::size_t batch_bytes = std::size_t{1} << 20) {
    Journal::Options options{dir.path(), FsyncMode::always, 1 << 20, log.function(), batch_bytes};
    auto opened = Journal::open(std::move(options), Recovered{});
    ASSERT_TRUE(opened) << opened.error().message;
    journal = std::move(opened).value();
    state.set_change_sink([this](const Change& change) { journal->append(change); });
  }
  // A change, its record written as the server writes it; its seq.
  std::uint64_t change(const std::string& key) {
    Journal::reset_thread_seq();
    EXPECT_TRUE(state.allocate(0, std::vector<BlockKey>{{key, ""}}));
    EXPECT_TRUE(journal->write_through(Journal::thread_seq()));
    return Journal::thread_seq();
  }
  std::future<Result<void>> acknowledged(std::uint64_t seq) {
    auto done = std::make_shared<std::promise<Result<void>>>();
    journal->when_durable(seq, [done](const Result<void>& result) { done->set_value(result); });
    return done->get_future();
  }

  TempDir dir;
  FakeLog log;
  MetadataState state;
  std::unique_ptr<Journal> journal;
};

TEST_F(Replicated, ARecordIsAcknowledgedOnlyOnceReplicated) {
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_TRUE(journal->acknowledged_late());
  EXPECT_EQ(journal->mode(), FsyncMode::no);  // the local files are not what acknowledges
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 8));
  ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
  auto ack = acknowledged(Journal::thread_seq());
  ASSERT_TRUE(log.wait_entered(1));
  // Written, and the replication under way but not done: not acknowledged.
  EXPECT_EQ(ack.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  log.release();
  const Result<void> result = ack.get();
  EXPECT_TRUE(result) << result.error().message;
}

TEST_F(Replicated, WhatIsWrittenDuringAReplicationGoesIntoTheNextBatch) {
  ASSERT_NO_FATAL_FAILURE(open());
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 8));  // record 1
  ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
  ASSERT_TRUE(log.wait_entered(1));
  change("a");
  change("b");
  const std::uint64_t last = change("c");
  auto ack = acknowledged(last);
  log.release();
  ASSERT_TRUE(ack.get());
  EXPECT_THAT(log.batch_seqs(), ElementsAre(ElementsAre(1), ElementsAre(2, 3, 4)));
}

TEST_F(Replicated, BatchesAreWholeRecordsInOrderUnderTheLimit) {
  ASSERT_NO_FATAL_FAILURE(open(/*batch_bytes=*/1));  // below any record: each goes alone
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 8));
  ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
  ASSERT_TRUE(log.wait_entered(1));
  change("a");
  const std::uint64_t last = change("b");
  log.release();
  ASSERT_TRUE(log.wait_replicated(last));
  EXPECT_THAT(log.batch_seqs(), ElementsAre(ElementsAre(1), ElementsAre(2), ElementsAre(3)));
}

TEST_F(Replicated, OneWriteIsCutIntoSeveralBatches) {
  ASSERT_NO_FATAL_FAILURE(open(/*batch_bytes=*/1));
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 8));
  ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
  ASSERT_TRUE(log.wait_entered(1));
  // Three changes, then one write(2) of all three: one run of records, replicated one by one.
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{key, ""}}));
  ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
  auto ack = acknowledged(4);
  log.release();
  ASSERT_TRUE(ack.get());
  EXPECT_THAT(log.batch_seqs(), ElementsAre(ElementsAre(1), ElementsAre(2), ElementsAre(3), ElementsAre(4)));
}

// A local write that fails while a batch is being replicated, with another written behind it:
// the log's answer, not the local failure, says what became of the records written before it.
struct LocalFailureDuringReplication : Replicated {
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open());
    log.hold();
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.initialize(0, 8));  // record 1: being replicated
    ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
    ASSERT_TRUE(log.wait_entered(1));
    change("a");  // record 2: written, waiting for the next batch
    acks.push_back(acknowledged(1));
    acks.push_back(acknowledged(2));
    inject_disk_error(DiskOp::journal_write, ENOSPC, 1);
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"b", ""}}));  // record 3: its write fails
    const Result<void> written = journal->write_through(Journal::thread_seq());
    ASSERT_FALSE(written);
    EXPECT_THAT(written.error().message, HasSubstr("journal write failed"));
    acks.push_back(acknowledged(3));
  }
  void TearDown() override { clear_disk_errors(); }

  std::vector<std::future<Result<void>>> acks;
};

TEST_F(LocalFailureDuringReplication, WhatTheLogTookIsAcknowledgedAndKeptByTheRollBack) {
  // Record 3 was never written, so it never will be replicated: refused at once. Records 1 and 2
  // wait for the log.
  const Result<void> refused = acks[2].get();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::journal_failed);
  EXPECT_EQ(acks[0].wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(acks[1].wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_TRUE(journal->rollback_pending());
  // The roll back cuts only once the log has answered for every record written.
  auto kept = std::async(std::launch::async, [&] { return journal->roll_back(); });
  EXPECT_EQ(kept.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  log.release();
  for (int i = 0; i < 2; ++i) {
    const Result<void> acked = acks[i].get();
    EXPECT_TRUE(acked) << "record " << i + 1 << ": " << acked.error().message;
  }
  const auto kept_seq = kept.get();
  ASSERT_TRUE(kept_seq) << kept_seq.error().message;
  EXPECT_EQ(kept_seq.value(), 2u);  // what the log holds, neither less (a fork) nor more
  EXPECT_THAT(log.batch_seqs(), ElementsAre(ElementsAre(1), ElementsAre(2)));
  // Numbered on from the log's tip after the roll back: the files end at record 2.
  journal.reset();
  MetadataState recovered_state;
  const auto recovered = recover(dir.path(), recovered_state);
  ASSERT_TRUE(recovered) << recovered.error().message;
  EXPECT_EQ(recovered.value().seq, 2u);
}

TEST_F(LocalFailureDuringReplication, AReplicationThatThenFailsRefusesEveryRecordAfterTheLastReplicated) {
  log.fail("etcd: fenced");
  auto kept = std::async(std::launch::async, [&] { return journal->roll_back(); });
  log.release();
  for (auto& ack : acks) {
    const Result<void> refused = ack.get();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Errc::journal_failed);
  }
  const auto kept_seq = kept.get();
  ASSERT_TRUE(kept_seq) << kept_seq.error().message;
  EXPECT_EQ(kept_seq.value(), 0u);
  EXPECT_TRUE(log.batch_seqs().empty());
}

// ---- several calls in flight (Options::replicate_in_flight) -------------------------------------

// A log whose calls each wait until the test ends them, one by one, with the outcome it names.
class GatedLog {
 public:
  Result<void> replicate(std::string_view records, std::uint64_t last_seq) {
    std::unique_lock lock(mutex_);
    const std::size_t call = begun_.size();
    begun_.push_back({std::string(records), last_seq});
    changed_.notify_all();
    changed_.wait(lock, [&] { return outcomes_.size() > call && outcomes_[call]; });
    return *outcomes_[call];
  }
  auto function() {
    return [this](std::string_view records, std::uint64_t last_seq) { return replicate(records, last_seq); };
  }
  // Waits (bounded) until `n` calls have begun; the last record of each.
  std::vector<std::uint64_t> wait_begun(std::size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(10), [&] { return begun_.size() >= n; });
    std::vector<std::uint64_t> out;
    for (const auto& [records, last_seq] : begun_) out.push_back(last_seq);
    return out;
  }
  void end(std::size_t call, Result<void> outcome) {
    std::lock_guard lock(mutex_);
    if (outcomes_.size() <= call) outcomes_.resize(call + 1);
    outcomes_[call] = std::move(outcome);
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<std::string, std::uint64_t>> begun_;
  std::vector<std::optional<Result<void>>> outcomes_;
};

// A journal over the gated log, with options of the test's, record 1 in its first call.
struct Gated : Replicated {
  void open_gated(const std::function<void(Journal::Options&)>& tweak) {
    Journal::Options options{dir.path(), FsyncMode::always, 1 << 20, gated.function()};
    tweak(options);
    auto opened = Journal::open(std::move(options), Recovered{});
    ASSERT_TRUE(opened) << opened.error().message;
    journal = std::move(opened).value();
    state.set_change_sink([this](const Change& change) { journal->append(change); });
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.initialize(0, 8));
    ASSERT_TRUE(journal->write_through(Journal::thread_seq()));
    ASSERT_THAT(gated.wait_begun(1), ElementsAre(1));
  }
  void TearDown() override {
    for (std::size_t call = 0; call < 3; ++call) gated.end(call, boost::outcome_v2::success());
    journal.reset();  // its replicators gone before the log they call
  }

  GatedLog gated;
};

// Two calls in flight: record 1 in the first, record 2 in the second (written while the first was
// under way).
struct InFlight : Gated {
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(open_gated([](Journal::Options& o) { o.replicate_in_flight = 2; }));
    change("a");
    const auto begun = gated.wait_begun(2);
    ASSERT_EQ(begun.size(), 2u);  // the second began while the first was in flight
    EXPECT_EQ(begun[0], 1u);
    last = begun[1];
    for (std::uint64_t seq = 1; seq <= last; ++seq) acks.push_back(acknowledged(seq));
  }

  std::uint64_t last = 0;
  std::vector<std::future<Result<void>>> acks;
};

TEST_F(InFlight, ALaterBatchThatEndsFirstIsAcknowledgedOnlyAfterTheOneBeforeIt) {
  gated.end(1, boost::outcome_v2::success());
  // The second call ended; its records wait for the first's.
  EXPECT_EQ(acks.back().wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(acks.front().wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  gated.end(0, boost::outcome_v2::success());
  for (auto& ack : acks) {
    const Result<void> acked = ack.get();
    EXPECT_TRUE(acked) << acked.error().message;
  }
  EXPECT_EQ(journal->roll_back().value(), last);  // nothing to cut: the log holds it all
}

TEST_F(InFlight, AFailedBatchRefusesTheOnesAfterItAndTheRollBackKeepsWhatTheLogTook) {
  auto kept = std::async(std::launch::async, [&] { return journal->roll_back(); });
  gated.end(0, Error{Errc::io, "etcd: no answer"});
  for (auto& ack : acks) {
    const Result<void> refused = ack.get();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Errc::journal_failed);
    EXPECT_THAT(refused.error().message, HasSubstr("etcd: no answer"));
  }
  // The roll back waits for the second call: the log may yet take it (its append follows the
  // first's records, so only if the first is in after all), and what it took is kept.
  EXPECT_EQ(kept.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  gated.end(1, boost::outcome_v2::success());
  const auto kept_seq = kept.get();
  ASSERT_TRUE(kept_seq) << kept_seq.error().message;
  EXPECT_EQ(kept_seq.value(), last);
}

TEST_F(InFlight, BothFailingKeepNothing) {
  gated.end(1, Error{Errc::io, "etcd: fenced"});
  gated.end(0, Error{Errc::io, "etcd: fenced"});
  for (auto& ack : acks) EXPECT_FALSE(ack.get());
  const auto kept_seq = journal->roll_back();
  ASSERT_TRUE(kept_seq) << kept_seq.error().message;
  EXPECT_EQ(kept_seq.value(), 0u);
}

// ---- Options::replicate_gather --------------------------------------------------------------------

// One call at a time, each batch waiting up to `gather` for the clients the last one answered.
struct Gathered : Gated {
  void open_gathered(std::chrono::microseconds gather) {
    ASSERT_NO_FATAL_FAILURE(open_gated([&](Journal::Options& o) { o.replicate_gather = gather; }));
    // Record 1 in flight, records 2 and 3 written meanwhile: the next batch waits for 1 + 2.
    change("a");
    change("b");
    auto first = acknowledged(1);
    gated.end(0, boost::outcome_v2::success());
    ASSERT_TRUE(first.get());
  }
};

TEST_F(Gathered, ABatchWaitsForAsManyRecordsAsTheLastCarriedAndThoseWrittenMeanwhile) {
  ASSERT_NO_FATAL_FAILURE(open_gathered(std::chrono::seconds(60)));  // ended by the third record
  change("c");  // the client record 1 answered, back
  EXPECT_THAT(gated.wait_begun(2), ElementsAre(1, 4));  // records 2-4 in one batch
}

TEST_F(Gathered, ABatchGoesWithWhatCameOnceTheWaitIsOver) {
  ASSERT_NO_FATAL_FAILURE(open_gathered(std::chrono::milliseconds(20)));
  EXPECT_THAT(gated.wait_begun(2), ElementsAre(1, 3));  // no third record came: records 2-3
}

// A Store over the fake log, and a change acknowledged as the server acknowledges it.
struct ReplicatedStore : ::testing::Test {
  void SetUp() override {
    auto opened = Store::open(Store::Options{dir.path(), FsyncMode::everysec, 0, 1 << 20, log.function()}, state);
    ASSERT_TRUE(opened) << opened.error().message;
    store = std::move(opened).value();
  }
  // Written (which fails, too, once the journal has), then replicated.
  Result<void> write_and_wait() {
    if (auto written = store->journal().write_through(Journal::thread_seq()); !written) return written;
    std::promise<Result<void>> done;
    store->journal().when_durable(Journal::thread_seq(), [&](const Result<void>& r) { done.set_value(r); });
    return done.get_future().get();
  }

  TempDir dir;
  FakeLog log;
  MetadataState state;
  std::unique_ptr<Store> store;
};

TEST_F(ReplicatedStore, ASnapshotWaitsForWhatItHoldsToBeReplicated) {
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4));
  ASSERT_TRUE(write_and_wait());
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"a", ""}}));
  ASSERT_TRUE(store->journal().write_through(Journal::thread_seq()));
  ASSERT_TRUE(log.wait_entered(2));
  auto snapshot = std::async(std::launch::async, [&] { return store->snapshot(); });
  // Held: a snapshot now would make change 2 durable before the replicated log has it.
  EXPECT_EQ(snapshot.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  log.release();
  const auto taken = snapshot.get();
  ASSERT_TRUE(taken) << taken.error().message;
  EXPECT_EQ(testing::files_like(dir.path(), "snapshot-").size(), 1u);

  // A snapshot waiting for a replication that then fails is refused: what it held is not durable.
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"b", ""}}));
  ASSERT_TRUE(store->journal().write_through(Journal::thread_seq()));
  ASSERT_TRUE(log.wait_entered(3));
  auto second = std::async(std::launch::async, [&] { return store->snapshot(); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  log.fail("etcd: fenced");
  log.release();
  const auto refused = second.get();
  ASSERT_FALSE(refused);
  // Refused while it waited, or (had it started only after the failure) for the failure pending.
  EXPECT_THAT(refused.error().message,
              ::testing::AnyOf(HasSubstr("replication failed: etcd: fenced"), HasSubstr("rolled back first")));
  EXPECT_EQ(testing::files_like(dir.path(), "snapshot-").size(), 1u);  // the first one only
}

TEST_F(ReplicatedStore, AFailedReplicationIsRolledBackToTheLastRecordReplicated) {
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4));
  ASSERT_TRUE(write_and_wait());
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"a", ""}}));
  ASSERT_TRUE(write_and_wait());
  const StateImage replicated = state.export_image();

  log.fail("etcd: fenced");
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"b", ""}}));  // applied in memory
  const Result<void> refused = write_and_wait();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::journal_failed);
  EXPECT_THAT(refused.error().message, HasSubstr("replication failed: etcd: fenced"));
  EXPECT_TRUE(store->journal().rollback_pending());

  const auto kept = store->settle();
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(kept.value(), replicated.seq);
  EXPECT_EQ(state.export_image(), replicated);
  EXPECT_FALSE(state.key_info("b").has_value());
}

// The store's view of a local write failure during a replication: the change the log took stays
// applied (it was acknowledged), the one whose write failed is rolled back (it was answered 503).
TEST_F(ReplicatedStore, ALocalWriteFailureDuringAReplicationKeepsWhatTheLogTook) {
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4));
  ASSERT_TRUE(write_and_wait());
  log.hold();
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"a", ""}}));
  const std::uint64_t a = Journal::thread_seq();
  const StateImage with_a = state.export_image();
  ASSERT_TRUE(store->journal().write_through(a));
  ASSERT_TRUE(log.wait_entered(2));
  std::promise<Result<void>> a_done;
  store->journal().when_durable(a, [&](const Result<void>& r) { a_done.set_value(r); });

  inject_disk_error(DiskOp::journal_write, ENOSPC, 1);
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{{"b", ""}}));  // applied in memory
  const Result<void> refused = write_and_wait();
  clear_disk_errors();
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().message, HasSubstr("No space left on device"));

  auto settled = std::async(std::launch::async, [&] { return store->settle(); });
  log.release();
  const Result<void> acked = a_done.get_future().get();
  EXPECT_TRUE(acked) << acked.error().message;
  const auto kept = settled.get();
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_EQ(kept.value(), a);
  EXPECT_EQ(state.export_image(), with_a);  // "a" allocated, "b" nowhere
}

}  // namespace
}  // namespace hf3fs_meta::durable
