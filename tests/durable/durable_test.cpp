// The journal, snapshots and recovery: recovered state equals the state at the last whole record
// (full images compared, pool order included), torn tails are cut, everything else stops recovery
// with the file and offset named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <random>

#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/record.hpp"
#include "durable/store.hpp"
#include "support/durable_support.hpp"

namespace hf3fs_meta::durable {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::read_bytes;
using testing::TempDir;
using testing::Workload;
using testing::files_like;
using testing::write_bytes;

std::unique_ptr<Store> open_store(const fs::path& dir, MetadataState& state, FsyncMode mode = FsyncMode::no) {
  auto store = Store::open(Store::Options{dir, mode, 0, 100}, state);
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().message);
  return store ? std::move(store).value() : nullptr;
}

// A copy of `dir`'s snapshots and journals with the last journal cut to `size` bytes.
void copy_cut(const fs::path& from, const fs::path& to, std::size_t size) {
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.path().filename() == "LOCK") continue;
    fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  const auto journals = files_like(to, "journal-");
  fs::resize_file(journals.back(), size);
}

TEST(DurableCrc32c, EqualsBoostCrcForEveryLengthAlignmentAndSplit) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  std::mt19937 rng(7);
  std::string bytes(300, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  for (std::size_t begin = 0; begin < 9; ++begin) {
    for (std::size_t size = 0; begin + size <= bytes.size(); size += 1 + size / 8) {
      const std::string_view piece = std::string_view(bytes).substr(begin, size);
      Crc32c::Software reference;
      reference.process_bytes(piece.data(), piece.size());
      ASSERT_EQ(crc32c(piece), reference.checksum()) << "begin " << begin << " size " << size;
      // The same bytes given in two pieces, as a snapshot's checksum is computed.
      const std::size_t split = size / 3;
      Crc32c pieces;
      pieces.process_bytes(piece.data(), split);
      pieces.process_bytes(piece.data() + split, size - split);
      ASSERT_EQ(pieces.checksum(), reference.checksum()) << "begin " << begin << " size " << size;
    }
  }
}

TEST(DurableRecord, ADeletionOfAKeyThatIsNotThereDoesNotFit) {
  MetadataState state;
  const std::vector<BlockKey> a{{"a", ""}};
  const std::vector<Confirmation> a0{{"a", 0}};
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(state.allocate(0, a).has_value());
  ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
  const StateImage before = state.export_image();
  const std::string_view keys[] = {"a", "nobody"};
  Change change;
  change.kind = ChangeKind::keys_deleted;
  change.seq = state.seq() + 1;
  change.deleted = keys;
  auto applied = state.apply(change);
  ASSERT_FALSE(applied.has_value());
  EXPECT_THAT(applied.error().message, HasSubstr("key nobody does not exist"));
  EXPECT_EQ(state.export_image(), before);  // "a" is still there: a record that does not fit changes nothing
  const std::string_view twice[] = {"a", "a"};
  change.deleted = twice;
  EXPECT_FALSE(state.apply(change).has_value());
  EXPECT_EQ(state.export_image(), before);
}

TEST(DurableRecord, EveryKindRoundTrips) {
  const AllocatedItem allocated[] = {{"a", 3, 3}, {"b", 4, 1}};
  const ConfirmedItem confirmed[] = {{"a", 3, 2}, {"", 7, 0}};
  const std::uint32_t released[] = {9, 1};
  const std::string_view deleted[] = {"gone", "", "also gone"};
  std::vector<Change> changes(5);
  changes[0].kind = ChangeKind::rank_created;
  changes[0].rank = -5;
  changes[0].num_pages = 77;
  changes[1].kind = ChangeKind::allocated;
  changes[1].rank = 2;
  changes[1].allocated = allocated;
  changes[2].kind = ChangeKind::confirmed;
  changes[2].rank = 1;
  changes[2].confirmed = confirmed;
  changes[2].released = released;
  changes[2].kept_mapped = 4;
  changes[3].kind = ChangeKind::cleared;
  changes[4].kind = ChangeKind::keys_deleted;
  changes[4].deleted = deleted;
  const DedupTag tag{1, "req-1", 0x1234567890ull, 42};
  for (std::size_t i = 0; i < changes.size(); ++i) {
    changes[i].seq = 10 + i;
    for (const DedupTag* t : {static_cast<const DedupTag*>(nullptr), &tag}) {
      std::string payload;
      encode_payload(changes[i], t, payload);
      std::string error;
      auto record = Record::decode(changes[i].seq, payload, error);
      ASSERT_TRUE(record) << error;
      const Change& c = record->change();
      EXPECT_EQ(c.kind, changes[i].kind);
      EXPECT_EQ(c.seq, changes[i].seq);
      EXPECT_EQ(c.rank, changes[i].rank);
      EXPECT_EQ(c.num_pages, changes[i].num_pages);
      EXPECT_EQ(c.kept_mapped, changes[i].kept_mapped);
      ASSERT_EQ(c.allocated.size(), changes[i].allocated.size());
      for (std::size_t j = 0; j < c.allocated.size(); ++j) {
        EXPECT_EQ(c.allocated[j].key, changes[i].allocated[j].key);
        EXPECT_EQ(c.allocated[j].taken, changes[i].allocated[j].taken);
        EXPECT_EQ(c.allocated[j].page, changes[i].allocated[j].page);
      }
      ASSERT_EQ(c.confirmed.size(), changes[i].confirmed.size());
      for (std::size_t j = 0; j < c.confirmed.size(); ++j) {
        EXPECT_EQ(c.confirmed[j].key, changes[i].confirmed[j].key);
        EXPECT_EQ(c.confirmed[j].page, changes[i].confirmed[j].page);
        EXPECT_EQ(c.confirmed[j].new_key_tp_world_size, changes[i].confirmed[j].new_key_tp_world_size);
      }
      EXPECT_TRUE(std::equal(c.released.begin(), c.released.end(), changes[i].released.begin(), changes[i].released.end()));
      EXPECT_TRUE(std::equal(c.deleted.begin(), c.deleted.end(), changes[i].deleted.begin(), changes[i].deleted.end()));
      EXPECT_EQ(record->tag().has_value(), t != nullptr);
      if (t) {
        EXPECT_EQ(*record->tag(), tag);
      }
      // Every shorter payload is refused, never read past its end.
      for (std::size_t cut = 0; cut < payload.size(); ++cut) {
        EXPECT_FALSE(Record::decode(1, std::string_view(payload).substr(0, cut), error)) << "cut " << cut;
      }
    }
  }
  std::string error;
  EXPECT_FALSE(Record::decode(1, std::string("\x09\x00", 2), error));
  EXPECT_THAT(error, HasSubstr("unknown kind 9"));
}

// Drives a state through a Store and keeps, for each record, the image right after it and where it
// ends in the journal file.
struct Driven {
  std::vector<StateImage> images;  // images[k]: after k records (of this run's last journal file)
  std::vector<std::size_t> ends;   // ends[k]: that file's length after k records
};

Driven drive(const fs::path& dir, unsigned seed, int steps, int snapshot_every = 0) {
  Driven run;
  MetadataState state;
  auto store = open_store(dir, state);
  Workload work(seed);
  auto note = [&] {
    const auto journals = files_like(dir, "journal-");
    run.images.push_back(state.export_image());
    run.ends.push_back(fs::file_size(journals.back()));
  };
  note();
  for (int i = 0; i < steps; ++i) {
    const std::uint64_t before = state.seq();
    work.step(state);
    if (snapshot_every && i % snapshot_every == snapshot_every - 1) {
      EXPECT_TRUE(store->snapshot().has_value());
      run = Driven{};
      note();
      continue;
    }
    if (state.seq() == before) continue;
    EXPECT_FALSE(store->journal().write_through(state.seq()).has_value());
    note();
  }
  return run;
}

TEST(DurableRecovery, EqualsTheStateAtEveryRecordBoundaryAndInsideTheLastRecord) {
  for (unsigned seed : {1u, 2u, 3u}) {
    TempDir dir;
    const Driven run = drive(dir.path(), seed, 1000);
    ASSERT_GT(run.images.size(), 150u) << "the workload must apply most calls";
    std::mt19937 rng(seed);
    for (std::size_t k = 0; k < run.images.size(); ++k) {
      TempDir copy;
      copy_cut(dir.path(), copy.path(), run.ends[k]);
      MetadataState state;
      auto recovered = recover(copy.path(), state);
      ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
      ASSERT_EQ(state.export_image(), run.images[k]) << "seed " << seed << " record " << k;
      EXPECT_FALSE(recovered.value().cut.has_value());
      if (k + 1 < run.images.size()) {
        // Cut inside the next record: its header or its payload runs past the end.
        const std::size_t len = run.ends[k + 1] - run.ends[k];
        for (int t = 0; t < 3; ++t) {
          TempDir torn;
          const std::size_t at = run.ends[k] + std::uniform_int_distribution<std::size_t>(1, len - 1)(rng);
          copy_cut(dir.path(), torn.path(), at);
          MetadataState s2;
          auto r2 = recover(torn.path(), s2);
          ASSERT_TRUE(r2.has_value()) << r2.error().message;
          ASSERT_EQ(s2.export_image(), run.images[k]) << "seed " << seed << " cut at " << at;
          ASSERT_TRUE(r2.value().cut.has_value());
          EXPECT_THAT(*r2.value().cut, HasSubstr("offset " + std::to_string(run.ends[k])));
        }
      }
    }
  }
}

TEST(DurableRecovery, SnapshotThenJournalEqualsTheStateAndOldFilesGo) {
  TempDir dir;
  const Driven run = drive(dir.path(), 7, 600, 150);
  EXPECT_EQ(files_like(dir.path(), "snapshot-").size(), 1u);
  EXPECT_EQ(files_like(dir.path(), "journal-").size(), 1u);
  for (std::size_t k = 0; k < run.images.size(); ++k) {
    TempDir copy;
    copy_cut(dir.path(), copy.path(), run.ends[k]);
    MetadataState state;
    auto recovered = recover(copy.path(), state);
    ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
    ASSERT_EQ(state.export_image(), run.images[k]) << "record " << k;
  }
}

TEST(DurableRecovery, AStoreContinuesAfterACutAndAfterARestart) {
  TempDir dir;
  const Driven run = drive(dir.path(), 11, 200);
  ASSERT_GT(run.images.size(), 3u);
  const auto journal = files_like(dir.path(), "journal-").back();
  fs::resize_file(journal, run.ends[run.ends.size() - 2] + 5);  // the last record torn
  StateImage expected;
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(store->recovered().cut.has_value());
    EXPECT_EQ(state.export_image(), run.images[run.images.size() - 2]);
    Workload more(12);
    for (int i = 0; i < 100; ++i) more.step(state);
    ASSERT_FALSE(store->journal().write_through(state.seq()).has_value());
    expected = state.export_image();
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  EXPECT_FALSE(store->recovered().cut.has_value());
  EXPECT_EQ(state.export_image(), expected);
}

TEST(DurableRecovery, AShutdownSnapshotAloneRestoresEverything) {
  TempDir dir;
  StateImage expected;
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    Workload work(5);
    for (int i = 0; i < 300; ++i) work.step(state);
    ASSERT_TRUE(store->shutdown().has_value());
    expected = state.export_image();
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  EXPECT_EQ(store->recovered().records, 0u);
  EXPECT_EQ(store->recovered().snapshot_seq, expected.seq);
  EXPECT_EQ(state.export_image(), expected);
}

TEST(DurableRecovery, DedupTagsSurviveInTheJournalAndInSnapshots) {
  TempDir dir;
  const DedupTag first{1, "req-a", 11, 100};
  const DedupTag second{2, "req-b", 22, 200};
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(state.initialize(0, 8).has_value());
    {
      TagScope scope(&first);
      const std::vector<BlockKey> keys{{"x", ""}, {"y", ""}};
      ASSERT_TRUE(state.allocate(0, keys).has_value());
    }
    ASSERT_TRUE(store->snapshot().has_value());
    {
      TagScope scope(&second);
      const std::vector<Confirmation> cs{{"x", 0}};
      ASSERT_TRUE(state.confirm_write(0, cs, {}).has_value());
    }
    const std::vector<BlockKey> untagged{{"z", ""}};
    ASSERT_TRUE(state.allocate(0, untagged).has_value());
    ASSERT_FALSE(store->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), 2u);
  EXPECT_EQ(*dedup[0].tag(), first);
  ASSERT_EQ(dedup[0].change().allocated.size(), 2u);
  EXPECT_EQ(dedup[0].change().allocated[1].key, "y");
  EXPECT_EQ(dedup[0].change().allocated[1].page, 1u);
  EXPECT_EQ(*dedup[1].tag(), second);
  EXPECT_EQ(dedup[1].change().kind, ChangeKind::confirmed);
}

TEST(DurableRecovery, ASnapshotKeepsThousandsOfRequestIdsInOrder) {
  // More tagged records than the snapshot copies at a time (they are copied in chunks, outside the
  // state's lock), and some after the snapshot.
  TempDir dir;
  constexpr int kTagged = 10000;
  {
    MetadataState state;
    auto store = Store::open(Store::Options{dir.path(), FsyncMode::no, 0, std::size_t{8} << 20}, state);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    ASSERT_TRUE(state.initialize(0, kTagged + 10).has_value());
    for (int i = 0; i < kTagged + 3; ++i) {
      if (i == kTagged) {
        ASSERT_TRUE(store.value()->snapshot().has_value());
      }
      const DedupTag tag{1, std::string("req-").append(std::to_string(i)), static_cast<std::uint64_t>(i), 40};
      TagScope scope(&tag);
      const std::vector<BlockKey> keys{{std::string("k").append(std::to_string(i)), ""}};
      ASSERT_TRUE(state.allocate(0, keys).has_value());
    }
    ASSERT_FALSE(store.value()->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), std::size_t{kTagged + 3});
  for (int i = 0; i < kTagged + 3; ++i) {
    ASSERT_EQ(dedup[i].tag()->id, std::string("req-").append(std::to_string(i)));
    ASSERT_EQ(dedup[i].change().allocated[0].page, static_cast<std::uint32_t>(i));
  }
}

TEST(DurableImage, EachAllocatedPageKeepsItsKeyAcrossExportAndImport) {
  MetadataState source;
  ASSERT_TRUE(source.initialize(3, 6).has_value());
  ASSERT_TRUE(source.initialize(5, 2).has_value());  // a rank with no allocated page beside it
  const std::vector<BlockKey> keys{{"a", ""}, {"b", ""}, {"c", ""}, {"d", ""}};
  ASSERT_EQ(source.allocate(3, keys).value(), (std::vector<Page>{0, 1, 2, 3}));
  const std::vector<Confirmation> b{{"b", 1}};
  ASSERT_TRUE(source.confirm_write(3, b, {}).has_value());  // allocated pages 0, 2, 3 are left: a, c, d
  const StateImage image = source.export_image();
  ASSERT_EQ(image.ranks.size(), 2u);
  EXPECT_EQ(image.ranks[0].allocated_for.size(), 3u);
  EXPECT_EQ(image.ranks[0].free_pool, (std::vector<std::uint32_t>{4, 5}));
  EXPECT_TRUE(image.ranks[1].allocated_for.empty());
  MetadataState target;
  ASSERT_TRUE(target.import_image(image).has_value());
  const std::vector<Confirmation> wrong{{"a", 2}};
  const auto refused = target.confirm_write(3, wrong, {});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().kind, StateErrc::conflict);
  const std::vector<Confirmation> right{{"a", 0}, {"c", 2}, {"d", 3}};
  EXPECT_TRUE(target.confirm_write(3, right, {}).has_value());
}

TEST(DurableImage, ImportRefusesAnInconsistentImageAndChangesNothing) {
  MetadataState source;
  Workload work(9);
  for (int i = 0; i < 300; ++i) work.step(source);
  ASSERT_TRUE(source.initialize(7, 4).has_value());
  const StateImage good = source.export_image();
  MetadataState target;
  ASSERT_TRUE(target.import_image(good).has_value());
  EXPECT_EQ(target.export_image(), good);
  const std::vector<std::pair<std::string, std::function<void(StateImage&)>>> damage = {
      {"names no key", [](StateImage& i) { i.ranks.back().owner[0] = static_cast<std::uint32_t>(i.keys.size()); }},
      {"pool size", [](StateImage& i) { i.ranks.back().free_pool.pop_back(); }},
      {"pool entry", [](StateImage& i) { i.ranks.back().free_pool[0] = i.ranks.back().free_pool[1]; }},
      {"twice", [](StateImage& i) { i.ranks.push_back(i.ranks.back()); }},
      {"size", [](StateImage& i) { i.ranks.back().owner.clear(); }},
      {"free key id", [](StateImage& i) { i.free_ids.push_back(static_cast<std::uint32_t>(i.keys.size())); }},
  };
  for (const auto& [why, hurt] : damage) {
    StateImage bad = good;
    hurt(bad);
    const auto imported = target.import_image(bad);
    ASSERT_FALSE(imported.has_value()) << why;
    EXPECT_THAT(imported.error().message, HasSubstr(why));
    EXPECT_EQ(target.export_image(), good) << why;
  }
}

// --- corruption: each stops recovery naming the file (and the offset) ---

struct Damaged : ::testing::Test {
  TempDir dir;
  Driven run;
  void SetUp() override { run = drive(dir.path(), 3, 200); }
  fs::path journal() { return files_like(dir.path(), "journal-").back(); }
  std::string recover_error() {
    MetadataState state;
    auto recovered = recover(dir.path(), state);
    EXPECT_FALSE(recovered.has_value());
    return recovered ? "" : recovered.error().message;
  }
};

TEST_F(Damaged, AFlippedHeaderByteMidJournal) {
  std::string bytes = read_bytes(journal());
  const std::size_t at = run.ends[run.ends.size() / 2];
  bytes[at + 9] ^= 0x40;  // the length
  write_bytes(journal(), bytes);
  const std::string error = recover_error();
  EXPECT_THAT(error, HasSubstr(journal().string()));
  EXPECT_THAT(error, HasSubstr("offset " + std::to_string(at)));
  EXPECT_THAT(error, HasSubstr("header checksum"));
}

TEST_F(Damaged, AFlippedHeaderByteInTheLastRecordIsNotATornTail) {
  std::string bytes = read_bytes(journal());
  const std::size_t at = run.ends[run.ends.size() - 2];
  bytes[at + 1] ^= 0x01;  // the seq
  write_bytes(journal(), bytes);
  EXPECT_THAT(recover_error(), HasSubstr("header checksum"));
}

TEST_F(Damaged, AFlippedPayloadByte) {
  std::string bytes = read_bytes(journal());
  const std::size_t at = run.ends[10];
  bytes[at + kRecordHeaderSize] ^= 0x10;
  write_bytes(journal(), bytes);
  const std::string error = recover_error();
  EXPECT_THAT(error, HasSubstr("offset " + std::to_string(at)));
  EXPECT_THAT(error, HasSubstr("payload checksum"));
}

TEST_F(Damaged, AnUnknownFormatVersion) {
  std::string bytes = read_bytes(journal());
  const std::uint32_t version = kFormatVersion + 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  const std::uint32_t crc = crc32c(std::string_view(bytes).substr(0, 12));
  std::memcpy(bytes.data() + 12, &crc, 4);
  write_bytes(journal(), bytes);
  const std::string error = recover_error();
  EXPECT_THAT(error, HasSubstr(journal().string()));
  EXPECT_THAT(error, HasSubstr("unknown format version 2"));
}

TEST_F(Damaged, ATruncatedSnapshot) {
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(store->snapshot().has_value());
  }
  const auto snapshot = files_like(dir.path(), "snapshot-").back();
  fs::resize_file(snapshot, fs::file_size(snapshot) - 7);
  const std::string error = recover_error();
  EXPECT_THAT(error, HasSubstr(snapshot.string()));
  EXPECT_THAT(error, HasSubstr("checksum"));
}

TEST_F(Damaged, TheJournalASnapshotNamesIsMissing) {
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(store->snapshot().has_value());
  }
  const auto named = journal();
  fs::remove(named);
  const std::string error = recover_error();
  EXPECT_THAT(error, HasSubstr(named.string()));
  EXPECT_THAT(error, HasSubstr("missing"));
}

TEST_F(Damaged, AJournalFileMissingFromTheChain) {
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(store->snapshot().has_value());
    Workload more(4);
    for (int i = 0; i < 50; ++i) more.step(state);
    ASSERT_FALSE(store->journal().write_through(state.seq()).has_value());
  }
  fs::remove(files_like(dir.path(), "snapshot-").back());
  EXPECT_THAT(recover_error(), HasSubstr("a journal file is missing"));
}

TEST(DurableLock, ASecondHolderIsToldThePid) {
  TempDir dir;
  auto first = DirLock::acquire(dir.path());
  ASSERT_TRUE(first.has_value());
  auto second = DirLock::acquire(dir.path());
  ASSERT_FALSE(second.has_value());
  EXPECT_THAT(second.error().message, HasSubstr("in use by process " + std::to_string(::getpid())));
  MetadataState state;
  auto store = Store::open(Store::Options{dir.path()}, state);
  ASSERT_FALSE(store.has_value());
  EXPECT_THAT(store.error().message, HasSubstr(std::to_string(::getpid())));
}

TEST(DurableJournal, AlwaysWakesWaitersAfterAnFdatasync) {
  TempDir dir;
  MetadataState state;
  auto store = open_store(dir.path(), state, FsyncMode::always);
  ASSERT_TRUE(state.initialize(1, 4).has_value());
  const std::uint64_t seq = Journal::thread_seq();
  EXPECT_EQ(seq, state.seq());
  ASSERT_FALSE(store->journal().write_through(seq).has_value());
  std::promise<std::optional<std::string>> done;
  store->journal().when_durable(seq, [&](const std::optional<std::string>& error) { done.set_value(error); });
  EXPECT_FALSE(done.get_future().get().has_value());
  EXPECT_GE(store->journal().stats().fsyncs, 1u);
  // Already durable: at once, on this thread.
  bool called = false;
  store->journal().when_durable(seq, [&](const std::optional<std::string>&) { called = true; });
  EXPECT_TRUE(called);
}

TEST(DurableJournal, ParsesFsyncModes) {
  EXPECT_EQ(parse_fsync_mode("always"), FsyncMode::always);
  EXPECT_EQ(parse_fsync_mode("everysec"), FsyncMode::everysec);
  EXPECT_EQ(parse_fsync_mode("no"), FsyncMode::no);
  EXPECT_FALSE(parse_fsync_mode("sometimes"));
}

}  // namespace
}  // namespace hf3fs_meta::durable
