// A failing disk, injected (data_dir.hpp: inject_disk_error), so that these paths run in every test
// run: a change whose record was not acknowledged is rolled back before anyone is told, a repeat
// then applies it once, what was acknowledged stays; and the data dir's lock, leftovers and cuts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/store.hpp"
#include "support/durable_support.hpp"

namespace hf3fs_meta::durable {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::files_like;
using testing::TempDir;
using Pages = std::vector<Page>;

struct InjectedDiskErrors : ::testing::Test {
  ~InjectedDiskErrors() override { clear_disk_errors(); }

  std::unique_ptr<Store> open(MetadataState& state, FsyncMode mode) {
    auto store = Store::open(Store::Options{dir.path(), mode, 0, 1 << 20}, state);
    EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().message);
    return store ? std::move(store).value() : nullptr;
  }
  TempDir dir;
};

// As the server does it: the call, then its record written (Journal::thread_seq is the call's record).
Pages allocate(MetadataState& state, const std::string& key) {
  Journal::reset_thread_seq();
  auto pages = state.allocate(0, std::vector<BlockKey>{{key, ""}});
  EXPECT_TRUE(pages.has_value());
  return pages ? pages.value() : Pages{};
}
Result<void> write(Store& store) { return store.journal().write_through(Journal::thread_seq()); }
// --fsync always: what the waiter on the record is told.
Result<void> synced(Store& store, std::uint64_t seq) {
  std::promise<Result<void>> done;
  store.journal().when_durable(seq, [&](const Result<void>& durable) { done.set_value(durable); });
  return done.get_future().get();
}

// The record of the call just made, acknowledged as the server acknowledges it: written, and synced
// with always.
Result<void> acknowledge(Store& store) {
  if (auto written = write(store); !written) return written;
  if (store.journal().mode() != FsyncMode::always) return boost::outcome_v2::success();
  return synced(store, Journal::thread_seq());
}
// `store`'s state with rank 0 of 4 pages, acknowledged: where the failure tests start.
void initialize_rank(MetadataState& state, Store& store) {
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(acknowledge(store).has_value());
}
// A Result<void>'s message, for a failed assertion's output.
std::string message(const Result<void>& result) { return result ? "" : result.error().message; }

class InjectedWriteError : public InjectedDiskErrors, public ::testing::WithParamInterface<FsyncMode> {};

TEST_P(InjectedWriteError, AnAllocateWhoseRecordFailedIsRolledBackAndItsRepeatGetsTheSamePage) {
  StateImage expected;
  {
    MetadataState state;
    auto store = open(state, GetParam());
    ASSERT_NO_FATAL_FAILURE(initialize_rank(state, *store));
    ASSERT_EQ(allocate(state, "a"), Pages{0});
    ASSERT_TRUE(acknowledge(*store).has_value());
    const StateImage acknowledged = state.export_image();

    inject_disk_error(DiskOp::journal_write, ENOSPC, 1);
    ASSERT_EQ(allocate(state, "b"), Pages{1});  // applied in memory, then its record fails
    const auto written = write(*store);
    ASSERT_FALSE(written.has_value());  // not on disk: the caller answers 503
    EXPECT_EQ(written.error().code, Errc::journal_failed);
    // The server's 503 detail and /healthz quote it as it is.
    EXPECT_EQ(written.error().message, "journal write failed: " + errno_text(ENOSPC));
    EXPECT_TRUE(store->journal().rollback_pending());
    // A snapshot now would make the refused change durable: refused until it is rolled back.
    const auto early = store->snapshot();
    ASSERT_FALSE(early.has_value());
    EXPECT_THAT(early.error().message, HasSubstr("rolled back first"));
    EXPECT_TRUE(files_like(dir.path(), "snapshot-").empty());

    const auto kept = store->settle();
    ASSERT_TRUE(kept.has_value()) << kept.error().message;
    EXPECT_EQ(kept.value(), acknowledged.seq);
    EXPECT_FALSE(store->journal().rollback_pending());
    EXPECT_EQ(state.export_image(), acknowledged);
    EXPECT_FALSE(state.key_info("b").has_value());
    // Changes still refused until a snapshot, with the failure that stopped the journal.
    const auto writable = store->journal().writable();
    ASSERT_FALSE(writable.has_value());
    EXPECT_EQ(writable.error().code, Errc::journal_failed);
    EXPECT_EQ(writable.error().message, "journal write failed: " + errno_text(ENOSPC));
    const auto refused = write(*store);  // nothing new is written either
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().message, writable.error().message);
    EXPECT_EQ(store->stats().rollbacks, 1u);
    EXPECT_EQ(store->journal().stats().disk_errors, 1u);

    ASSERT_TRUE(store->snapshot().has_value());
    EXPECT_TRUE(store->journal().writable().has_value());
    EXPECT_EQ(allocate(state, "b"), Pages{1});  // the page the first attempt would have been given
    ASSERT_TRUE(acknowledge(*store).has_value());
    expected = state.export_image();
  }
  MetadataState state;
  auto store = open(state, GetParam());
  EXPECT_EQ(state.export_image(), expected);
}

// A record another caller's write already took to disk, then a later write fails: that record was
// acknowledged (everysec, no) and the roll back keeps it, so its own caller must be told it was
// written, not 503 "nothing applied".
class WrittenBeforeAFailure : public InjectedDiskErrors, public ::testing::WithParamInterface<FsyncMode> {};

TEST_P(WrittenBeforeAFailure, IsWrittenForItsCallerAndKeptByTheRollBack) {
  MetadataState state;
  auto store = open(state, GetParam());
  ASSERT_NO_FATAL_FAILURE(initialize_rank(state, *store));
  ASSERT_EQ(allocate(state, "a"), Pages{0});
  const std::uint64_t a = Journal::thread_seq();
  ASSERT_EQ(allocate(state, "b"), Pages{1});
  const std::uint64_t b = Journal::thread_seq();
  ASSERT_TRUE(store->journal().write_through(b).has_value());  // b's caller writes a's record too
  inject_disk_error(DiskOp::journal_write, ENOSPC, 1);
  ASSERT_EQ(allocate(state, "c"), Pages{2});
  ASSERT_FALSE(write(*store).has_value());  // c's record: not on disk, 503
  const auto written = store->journal().write_through(a);  // a's caller comes to it only now
  EXPECT_TRUE(written.has_value()) << message(written);
  const auto kept = store->settle();
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_EQ(kept.value(), b);
  EXPECT_EQ(allocate(state, "d"), Pages{2});  // c's page went back; a's and b's did not
}

INSTANTIATE_TEST_SUITE_P(Modes, WrittenBeforeAFailure, ::testing::Values(FsyncMode::everysec, FsyncMode::no),
                         [](const auto& info) { return std::string(to_string(info.param)); });

INSTANTIATE_TEST_SUITE_P(Modes, InjectedWriteError,
                         ::testing::Values(FsyncMode::always, FsyncMode::everysec, FsyncMode::no),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_F(InjectedDiskErrors, AConfirmWhoseSyncFailedIsNotVisibleNowNorAfterARestart) {
  {
    MetadataState state;
    auto store = open(state, FsyncMode::always);
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.initialize(0, 4).has_value());
    ASSERT_EQ(allocate(state, "k"), Pages{0});
    ASSERT_TRUE(write(*store).has_value());
    ASSERT_TRUE(synced(*store, state.seq()).has_value());  // acknowledged: must survive what follows

    inject_disk_error(DiskOp::journal_sync, EIO, 1);
    Journal::reset_thread_seq();
    const std::vector<Confirmation> confirm{{"k", 0}};
    ASSERT_TRUE(state.confirm_write(0, confirm, {}).has_value());
    const std::uint64_t seq = Journal::thread_seq();
    ASSERT_TRUE(write(*store).has_value());  // written, then its sync fails
    const auto durable = synced(*store, seq);
    ASSERT_FALSE(durable.has_value());
    EXPECT_EQ(durable.error().code, Errc::journal_failed);
    EXPECT_EQ(durable.error().message, "journal fdatasync failed: " + errno_text(EIO));
    ASSERT_TRUE(store->settle().has_value());
    EXPECT_EQ(state.batch_exists(std::vector<std::string>{"k"}), std::vector<bool>{false});
    EXPECT_EQ(state.page_state(0, 0), PageState::allocated);  // the allocate was acknowledged
    // A waiter on a record acknowledged before the failure is not told of it.
    EXPECT_TRUE(synced(*store, seq - 1).has_value());
    ASSERT_TRUE(store->snapshot().has_value());
  }
  MetadataState state;
  auto store = open(state, FsyncMode::always);
  EXPECT_EQ(state.batch_exists(std::vector<std::string>{"k"}), std::vector<bool>{false});
  EXPECT_EQ(state.page_state(0, 0), PageState::allocated);
}

// everysec: a change is acknowledged once written; the background sync failing later takes nothing
// back (the journal still refuses changes until a snapshot).
TEST_F(InjectedDiskErrors, EverysecKeepsWhatWasWrittenWhenALaterSyncFails) {
  MetadataState state;
  auto store = open(state, FsyncMode::everysec);
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  inject_disk_error(DiskOp::journal_sync, EIO, 1);
  ASSERT_EQ(allocate(state, "a"), Pages{0});
  ASSERT_TRUE(write(*store).has_value());
  const StateImage written = state.export_image();
  // The syncer runs at most a second after a write: bounded wait for its failure. The store's
  // background thread settles a failure by itself a second after the store opened, so the failure
  // may be gone before this loop looks (it was, now and then, on a loaded machine): either sign counts.
  const auto failed = [&] { return !store->journal().writable().has_value() || store->stats().rollbacks > 0; };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!failed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(failed());
  ASSERT_TRUE(store->settle().has_value());
  EXPECT_EQ(store->stats().rollbacks, 1u);
  EXPECT_EQ(state.export_image(), written);
}

// The snapshot writes the records before its instant to the old file first; if that fails, the
// image holds changes that will be answered 503: the snapshot is not kept.
TEST_F(InjectedDiskErrors, ASnapshotWhoseImageHoldsAFailedRecordIsNotKept) {
  MetadataState state;
  auto store = open(state, FsyncMode::no);
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(write(*store).has_value());
  const StateImage acknowledged = state.export_image();
  ASSERT_EQ(allocate(state, "b"), Pages{0});  // its caller has not written it yet
  inject_disk_error(DiskOp::journal_write, EIO, 1);
  const auto snapshot = store->snapshot();
  ASSERT_FALSE(snapshot.has_value());
  EXPECT_THAT(snapshot.error().message, HasSubstr("while the snapshot was taken"));
  EXPECT_TRUE(files_like(dir.path(), "snapshot-").empty());
  const auto refused = write(*store);  // the caller is told: not acknowledged
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, Errc::journal_failed);
  EXPECT_EQ(refused.error().message, "journal write failed: " + errno_text(EIO));
  ASSERT_TRUE(store->settle().has_value());
  EXPECT_EQ(state.export_image(), acknowledged);
  ASSERT_TRUE(store->snapshot().has_value());
  MetadataState again;
  store.reset();
  auto reopened = open(again, FsyncMode::no);
  EXPECT_EQ(again.export_image(), acknowledged);
}

TEST_F(InjectedDiskErrors, AFailedSnapshotWriteLeavesNoFileAndTheJournalWriting) {
  MetadataState state;
  auto store = open(state, FsyncMode::no);
  Journal::reset_thread_seq();
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(write(*store).has_value());
  inject_disk_error(DiskOp::snapshot_write, EIO, 1);
  const auto failed = store->snapshot();
  ASSERT_FALSE(failed.has_value());
  EXPECT_THAT(failed.error().message, HasSubstr(".snap.tmp: " + std::string(std::strerror(EIO))));
  EXPECT_TRUE(files_like(dir.path(), "snapshot-").empty());  // neither the snapshot nor its .tmp
  EXPECT_EQ(store->stats().snapshot_failures, 1u);
  EXPECT_TRUE(store->journal().writable().has_value()) << message(store->journal().writable());
  ASSERT_EQ(allocate(state, "a"), Pages{0});
  EXPECT_TRUE(write(*store).has_value());
  EXPECT_TRUE(store->snapshot().has_value());
}

TEST_F(InjectedDiskErrors, AnInjectedErrorCountsDownAndIsCleared) {
  inject_disk_error(DiskOp::journal_write, EIO, 2);
  EXPECT_EQ(take_injected_error(DiskOp::journal_sync), 0);
  EXPECT_EQ(take_injected_error(DiskOp::journal_write), EIO);
  EXPECT_EQ(take_injected_error(DiskOp::journal_write), EIO);
  EXPECT_EQ(take_injected_error(DiskOp::journal_write), 0);
  inject_disk_error(DiskOp::snapshot_write, ENOSPC, 5);
  clear_disk_errors();
  EXPECT_EQ(take_injected_error(DiskOp::snapshot_write), 0);
}

TEST_F(InjectedDiskErrors, StartupRemovesWhatAnInterruptedSnapshotLeft) {
  const fs::path left = dir.path() / (snapshot_name(7) + ".tmp");
  testing::write_bytes(left, "half a snapshot");
  testing::write_bytes(dir.path() / "notes.tmp", "not ours");
  MetadataState state;
  auto store = open(state, FsyncMode::no);
  EXPECT_EQ(store->recovered().removed_temporaries, std::vector<fs::path>{left});
  EXPECT_FALSE(fs::exists(left));
  EXPECT_TRUE(fs::exists(dir.path() / "notes.tmp"));
}

TEST(DurableLockOnTheDirectory, DeletingLockDoesNotLetASecondHolderIn) {
  TempDir dir;
  auto first = DirLock::acquire(dir.path());
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(fs::remove(dir.path() / "LOCK"));
  auto second = DirLock::acquire(dir.path());
  ASSERT_FALSE(second.has_value());
  // Named from the kernel's list of locks, where there is one.
  const std::string pid = fs::exists("/proc/locks") ? std::to_string(::getpid()) : "unknown";
  EXPECT_THAT(second.error().message, HasSubstr("is in use by process " + pid + " ("));
  EXPECT_THAT(second.error().message, HasSubstr("LOCK, which names it, was deleted"));
}

TEST(DurableCut, RecoveryNamesTheLastChangeKeptAndTheBytesCut) {
  TempDir dir;
  std::uintmax_t before_last = 0;
  {
    MetadataState state;
    auto store = Store::open(Store::Options{dir.path(), FsyncMode::no, 0, 1 << 20}, state);
    ASSERT_TRUE(store.has_value());
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.initialize(0, 4).has_value());
    ASSERT_EQ(allocate(state, "a"), Pages{0});
    ASSERT_TRUE(write(*store.value()).has_value());
    before_last = fs::file_size(files_like(dir.path(), "journal-").back());
    ASSERT_EQ(allocate(state, "b"), Pages{1});  // change 3, cut below
    ASSERT_TRUE(write(*store.value()).has_value());
  }
  const auto journal = files_like(dir.path(), "journal-").back();
  fs::resize_file(journal, fs::file_size(journal) - 3);
  const auto cut = fs::file_size(journal) - before_last;
  MetadataState state;
  auto recovered = recover(dir.path(), state);
  ASSERT_TRUE(recovered.has_value());
  EXPECT_EQ(recovered.value().seq, 2u);
  EXPECT_EQ(recovered.value().cut_bytes, cut);
  ASSERT_TRUE(recovered.value().cut.has_value());
  EXPECT_THAT(*recovered.value().cut, HasSubstr("cut " + std::to_string(cut) + " bytes after change 2"));
}

// Changes lost at a record boundary before the last journal file (a file removed, or one cut): the
// next file names the first change it holds, so the gap is found and named. (At the end of the last
// file such a cut cannot be told from changes never made: nothing follows to name them.)
TEST(DurableCut, ChangesMissingBeforeAJournalFileAreNamed) {
  TempDir dir;
  {
    MetadataState state;
    auto store = Store::open(Store::Options{dir.path(), FsyncMode::no, 0, 1 << 20}, state);
    ASSERT_TRUE(store.has_value());
    Journal::reset_thread_seq();
    ASSERT_TRUE(state.initialize(0, 8).has_value());
    for (const char* k : {"a", "b", "c"}) allocate(state, k);  // changes 2 to 4
    ASSERT_TRUE(write(*store.value()).has_value());
    ASSERT_TRUE(store.value()->snapshot().has_value());  // journal-5 follows snapshot 4
    allocate(state, "d");
    ASSERT_TRUE(write(*store.value()).has_value());
  }
  ASSERT_EQ(files_like(dir.path(), "journal-").size(), 1u);
  fs::remove(files_like(dir.path(), "snapshot-").back());
  MetadataState state;
  auto recovered = recover(dir.path(), state);
  ASSERT_FALSE(recovered.has_value());
  EXPECT_THAT(recovered.error().message, HasSubstr("changes 1 to 4 are missing"));
}

}  // namespace
}  // namespace hf3fs_meta::durable
