// The journal, snapshots and recovery: recovered state equals the state at the last whole record
// (full images compared, pool order included), torn tails are cut, everything else stops recovery
// with the file and offset named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <random>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>

#include "durable/crc32c.hpp"
#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "durable/record.hpp"
#include "durable/snapshot.hpp"
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

std::unique_ptr<Store> open_store(const fs::path& dir, MetadataState& state, FsyncMode mode = FsyncMode::no,
                                  std::size_t dedup_bytes = std::size_t{1} << 20) {
  auto store = Store::open(Store::Options{dir, mode, 0, dedup_bytes}, state);
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
  auto repeated = state.apply(change);
  ASSERT_FALSE(repeated.has_value());
  EXPECT_THAT(repeated.error().message, HasSubstr("key a is named twice"));
  EXPECT_EQ(state.export_image(), before);
}

// Every way a record can fail to fit the state it is replayed on: refused with a message naming the
// change and why, and nothing changed (the image, and the number of the last change).
TEST(DurableRecord, ARecordThatDoesNotFitIsRefusedAndChangesNothing) {
  StateOptions limits;
  limits.max_pages = 16;
  limits.max_ranks = 1;
  MetadataState state(limits);
  const std::vector<BlockKey> a{{"a", ""}}, b{{"b", ""}};
  const std::vector<Confirmation> a0{{"a", 0}};
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(state.allocate(0, a).has_value());
  ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
  ASSERT_TRUE(state.allocate(0, b).has_value());  // page 1, allocated for "b"; the pool is [2, 3]
  const StateImage before = state.export_image();
  const std::uint64_t seq = state.seq();

  const AllocatedItem three[] = {{"x", 2, 2}, {"y", 3, 3}, {"z", 0, 0}};
  const AllocatedItem not_next[] = {{"x", 3, 3}};
  const AllocatedItem no_such_page[] = {{"x", 2, 0}};
  const ConfirmedItem out_of_range[] = {{"a", 9, 0}};
  const ConfirmedItem a_as_new[] = {{"a", 1, 1}};
  const ConfirmedItem c_as_known[] = {{"c", 1, 0}};
  const ConfirmedItem c_on_free[] = {{"c", 2, 1}};
  const std::uint32_t free_page[] = {2};
  struct Case {
    const char* name;
    std::function<void(Change&)> make;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"out of order", [&](Change& c) { c.seq = seq + 2; }, "expected change " + std::to_string(seq + 1)},
      {"rank exists", [](Change& c) { c.kind = ChangeKind::rank_created; c.num_pages = 4; }, "rank 0 exists"},
      {"no pages", [](Change& c) { c.kind = ChangeKind::rank_created; c.rank = 1; }, "num_pages 0"},
      {"beyond the limits", [](Change& c) { c.kind = ChangeKind::rank_created; c.rank = 1; c.num_pages = 17; },
       "num_pages 17 is above the maximum 16"},
      {"one rank too many", [](Change& c) { c.kind = ChangeKind::rank_created; c.rank = 1; c.num_pages = 4; },
       "rank 1 does not fit: the server has reached its limit of ranks"},
      {"unknown removal",
       [](Change& c) { c.kind = ChangeKind::keys_removed; c.removal = static_cast<Removal>(9); },
       "unknown removal 9"},
      {"not draining", [](Change& c) { c.kind = ChangeKind::key_drained; c.key_id = 0; }, "key id 0 is not draining"},
      {"unknown rank", [](Change& c) { c.kind = ChangeKind::allocated; c.rank = 7; }, "rank 7 does not exist"},
      {"reclaim of a mapped page",
       [](Change& c) { c.kind = ChangeKind::page_reclaimed; c.page = 0; c.was = PageState::allocated; },
       "page 0 of rank 0 cannot be reclaimed"},
      {"reclaim out of range",
       [](Change& c) { c.kind = ChangeKind::page_reclaimed; c.page = 9; c.was = PageState::allocated; },
       "page 9 of rank 0 cannot be reclaimed"},
      {"more than free", [&](Change& c) { c.kind = ChangeKind::allocated; c.allocated = three; },
       "more pages taken than rank 0 has free"},
      {"not next", [&](Change& c) { c.kind = ChangeKind::allocated; c.allocated = not_next; },
       "page 3 is not next in the pool of rank 0"},
      {"reuse of a page the key lacks", [&](Change& c) { c.kind = ChangeKind::allocated; c.allocated = no_such_page; },
       "key x has no page 0"},
      {"confirm out of range", [&](Change& c) { c.kind = ChangeKind::confirmed; c.confirmed = out_of_range; },
       "page 9 out of range"},
      {"known key as new", [&](Change& c) { c.kind = ChangeKind::confirmed; c.confirmed = a_as_new; }, "key a exists"},
      {"new key as known", [&](Change& c) { c.kind = ChangeKind::confirmed; c.confirmed = c_as_known; },
       "key c does not exist"},
      {"confirm of a free page", [&](Change& c) { c.kind = ChangeKind::confirmed; c.confirmed = c_on_free; },
       "page 2 of rank 0 cannot be confirmed"},
      {"release of a free page", [&](Change& c) { c.kind = ChangeKind::confirmed; c.released = free_page; },
       "page 2 of rank 0 cannot be released"},
      {"unknown kind", [](Change& c) { c.kind = static_cast<ChangeKind>(99); }, "unknown kind"},
  };
  for (const Case& t : cases) {
    Change change;
    change.seq = seq + 1;
    t.make(change);
    auto applied = state.apply(change);
    ASSERT_FALSE(applied.has_value()) << t.name;
    EXPECT_THAT(applied.error().message,
                HasSubstr("change " + std::to_string(change.seq) + " does not fit the state: " + t.why))
        << t.name;
    EXPECT_EQ(state.seq(), seq) << t.name;
    EXPECT_EQ(state.export_image(), before) << t.name;
  }
}

// A confirm_write makes a record even when it changes nothing (a key confirmed again with its own
// page, a release of a free page): the server sends its answer once its record is on disk, which is
// also once every record before it is, so a repeated confirm is never acknowledged before the
// original's effect is durable; and a request id is journaled with the record.
TEST(DurableRecord, AConfirmThatChangesNothingStillMakesARecord) {
  MetadataState state;
  std::vector<ChangeKind> records;
  state.set_change_sink([&](const Change& c) { records.push_back(c.kind); });
  const std::vector<BlockKey> a{{"a", ""}};
  const std::vector<Confirmation> a0{{"a", 0}};
  const std::vector<Page> free_page{3};
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  ASSERT_TRUE(state.allocate(0, a).has_value());
  ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
  const StateImage before = state.export_image();
  ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
  ASSERT_TRUE(state.confirm_write(0, {}, free_page).has_value());
  EXPECT_EQ(state.export_image().ranks, before.ranks);
  EXPECT_EQ(records, (std::vector<ChangeKind>{ChangeKind::rank_created, ChangeKind::allocated, ChangeKind::confirmed,
                                              ChangeKind::confirmed, ChangeKind::confirmed}));
  // A call with nothing in it makes none.
  ASSERT_TRUE(state.confirm_write(0, {}, {}).has_value());
  ASSERT_TRUE(state.allocate(0, std::vector<BlockKey>{}).has_value());
  EXPECT_EQ(records.size(), 5u);
}

// A restored state lives under the same --max-* limits as a replayed one: an image beyond them is
// refused, naming the rank and the limit, and a restored state's pages count against them.
TEST(DurableRecord, AnImageBeyondTheLimitsIsRefusedAndARestoredOneCountsAgainstThem) {
  MetadataState original;
  ASSERT_TRUE(original.initialize(0, 8).has_value());
  ASSERT_TRUE(original.initialize(1, 8).has_value());
  const StateImage image = original.export_image();
  const auto limited = [](std::int64_t pages, std::int64_t ranks, std::int64_t total) {
    StateOptions o;
    o.max_pages = pages;
    o.max_ranks = ranks;
    o.max_total_pages = total;
    return o;
  };
  const std::pair<StateOptions, std::string> refusals[] = {
      {limited(4, 8, 100), "the image is beyond this state's limits: rank 0: num_pages 8 is above the maximum 4"},
      {limited(8, 1, 100), "the image is beyond this state's limits: rank 1: rank 1 does not fit: the server has reached its limit of ranks"},
      {limited(8, 8, 12),
       "the image is beyond this state's limits: rank 1: num_pages 8 would exceed the server's limit of pages"},
  };
  for (const auto& [options, message] : refusals) {
    MetadataState state(options);
    auto imported = state.import_image(image);
    ASSERT_FALSE(imported.has_value()) << message;
    EXPECT_EQ(imported.error().message, message);
    EXPECT_EQ(state.rank_count(), 0u);
  }
  MetadataState state(limited(8, 8, 20));
  ASSERT_TRUE(state.import_image(image).has_value());
  auto over = state.initialize(2, 8);
  ASSERT_FALSE(over.has_value());
  EXPECT_THAT(over.error().message, HasSubstr("would exceed the server's limit of pages"));
  EXPECT_TRUE(state.initialize(2, 4).has_value());
}

TEST(DurableRecord, EveryKindRoundTrips) {
  const AllocatedItem allocated[] = {{"a", 3, 3}, {"b", 4, 1}};
  const ConfirmedItem confirmed[] = {{"a", 3, 2}, {"", 7, 0}};
  const std::uint32_t released[] = {9, 1};
  const std::string_view deleted[] = {"gone", "", "also gone"};
  const std::string_view evicted[] = {"old"};
  std::vector<Change> changes(11);
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
  // The lifecycle's kinds, every field away from its default.
  changes[5].kind = ChangeKind::keys_removed;
  changes[5].removal = Removal::reclaimed;
  changes[5].draining = true;
  changes[5].deleted = deleted;
  changes[6].kind = ChangeKind::keys_removed;
  changes[6].removal = Removal::evicted;
  changes[6].deleted = evicted;
  changes[7].kind = ChangeKind::page_reclaimed;
  changes[7].rank = -3;
  changes[7].page = 0xFFFFFFF0u;
  changes[7].was = PageState::orphaned;
  changes[8].kind = ChangeKind::key_drained;
  changes[8].key_id = 123456;
  changes[9].kind = ChangeKind::clock;
  changes[9].clock_ms = -1764590000123;
  changes[10].kind = ChangeKind::page_draining;
  changes[10].rank = -7;
  changes[10].page = 0xFFFFFFF1u;
  changes[10].key_id = 654321;
  const DedupTag tag{Route::batch_allocate, "req-1", 0x1234567890ull, 42};
  for (std::size_t i = 0; i < changes.size(); ++i) {
    changes[i].seq = 10 + i;
    for (const DedupTag* t : {static_cast<const DedupTag*>(nullptr), &tag}) {
      std::string payload;
      encode_payload(changes[i], t, payload);
      auto decoded = Record::decode(changes[i].seq, payload);
      ASSERT_TRUE(decoded) << decoded.error().message;
      const Record& record = decoded.value();
      const Change& c = record.change();
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
      EXPECT_EQ(c.removal, changes[i].removal);
      EXPECT_EQ(c.draining, changes[i].draining);
      EXPECT_EQ(c.page, changes[i].page);
      EXPECT_EQ(c.was, changes[i].was);
      EXPECT_EQ(c.key_id, changes[i].key_id);
      EXPECT_EQ(c.clock_ms, changes[i].clock_ms);
      EXPECT_EQ(record.tag().has_value(), t != nullptr);
      if (t) {
        EXPECT_EQ(*record.tag(), tag);
      }
      // Every shorter payload is refused, never read past its end.
      for (std::size_t cut = 0; cut < payload.size(); ++cut) {
        const auto refused = Record::decode(1, std::string_view(payload).substr(0, cut));
        ASSERT_FALSE(refused) << "cut " << cut;
        EXPECT_EQ(refused.error().code, Errc::corrupt) << "cut " << cut;
      }
    }
  }
  // The error of a payload the decoder refuses, with its code.
  auto refused = [](std::string_view payload, Errc code) {
    const auto decoded = Record::decode(1, payload);
    if (decoded) return std::string("accepted");
    EXPECT_EQ(decoded.error().code, code) << decoded.error().message;
    return decoded.error().message;
  };
  // A kind from a newer server is unsupported; the rest is corrupt.
  EXPECT_THAT(refused(std::string("\x0e\x00", 2), Errc::unsupported), HasSubstr("unknown kind 14"));
  // A removal or a page state the format does not know is refused, not guessed.
  EXPECT_THAT(refused(std::string("\x07\x00\x04\x00\x00\x00\x00\x00", 8), Errc::corrupt), HasSubstr("unknown removal 4"));
  EXPECT_THAT(refused(std::string("\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02", 15), Errc::corrupt),
              HasSubstr("reclaimed page state 2"));
  // Flags the format does not know, and bytes after the last field, are refused too.
  EXPECT_THAT(refused(std::string("\x04\x04", 2), Errc::corrupt), HasSubstr("record 1: unknown flags 4"));
  EXPECT_TRUE(Record::decode(1, std::string("\x04\x00", 2)));  // the same cleared record, whole
  EXPECT_THAT(refused(std::string("\x04\x00\x00\x00", 4), Errc::corrupt),
              HasSubstr("record 1: 2 bytes after the record's fields"));
}

// Drives a state through a Store and keeps, for each record, the image right after it and where it
// ends in the journal file.
struct Driven {
  std::vector<StateImage> images;  // images[k]: after k records (of this run's last journal file)
  std::vector<std::size_t> ends;   // ends[k]: that file's length after k records
};

// `clock`: the fake clock of `options`, moved by the workload.
Driven drive(const fs::path& dir, unsigned seed, int steps, int snapshot_every = 0, const StateOptions& options = {},
             std::int64_t* clock = nullptr) {
  Driven run;
  MetadataState state(options);
  auto store = open_store(dir, state);
  Workload work(seed, "k", clock);
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
    EXPECT_TRUE(store->journal().write_through(state.seq()).has_value());
    note();
  }
  return run;
}

// The length of the record at `offset` of the last journal (from its header).
std::size_t record_length(const fs::path& journal, std::size_t offset) {
  const std::string bytes = read_bytes(journal);
  std::uint32_t len = 0;
  std::memcpy(&len, bytes.data() + offset + 8, 4);
  return kRecordHeaderSize + len + kRecordTrailerSize;
}

// How many records of each kind the journals hold.
std::map<ChangeKind, int> kinds_in(const fs::path& dir) {
  std::map<ChangeKind, int> kinds;
  for (const fs::path& journal : files_like(dir, "journal-")) {
    const std::string bytes = read_bytes(journal);
    for (std::size_t at = kFileHeaderSize; at < bytes.size(); at += record_length(journal, at)) {
      ++kinds[static_cast<ChangeKind>(bytes[at + kRecordHeaderSize])];
    }
  }
  return kinds;
}

// The most keys one eviction record names (an allocate's victims share one record).
std::size_t most_keys_evicted_at_once(const fs::path& dir) {
  std::size_t most = 0;
  for (const fs::path& journal : files_like(dir, "journal-")) {
    const std::string bytes = read_bytes(journal);
    for (std::size_t at = kFileHeaderSize; at < bytes.size(); at += record_length(journal, at)) {
      if (static_cast<ChangeKind>(bytes[at + kRecordHeaderSize]) != ChangeKind::keys_removed) continue;
      const std::string_view payload(bytes.data() + at + kRecordHeaderSize,
                                     record_length(journal, at) - kRecordHeaderSize - kRecordTrailerSize);
      const auto record = Record::decode(0, payload);
      EXPECT_TRUE(record.has_value()) << record.error().message;
      if (record && record.value().change().removal == Removal::evicted) {
        most = std::max(most, record.value().change().deleted.size());
      }
    }
  }
  return most;
}

// Recovery from every step's end, and from cuts inside the record after it, equals the image the
// uninterrupted state had there. (A call may make several records: an eviction and its allocate, a
// clock reading and a change; each is cut inside its first.) With `snapshot_every`, the steps after
// the last snapshot, which recovery reads from it and the journal after it.
void expect_recovery_equality(unsigned seed, int steps, int snapshot_every = 0, const StateOptions& options = {},
                              std::int64_t* clock = nullptr) {
  TempDir dir;
  const Driven run = drive(dir.path(), seed, steps, snapshot_every, options, clock);
  if (snapshot_every) {
    EXPECT_EQ(files_like(dir.path(), "snapshot-").size(), 1u);
    EXPECT_EQ(files_like(dir.path(), "journal-").size(), 1u);
  }
  const int last_steps = snapshot_every ? steps % snapshot_every : steps;
  ASSERT_GT(run.images.size(), static_cast<std::size_t>(last_steps) / 7) << "the workload must apply most calls";
  const fs::path journal = files_like(dir.path(), "journal-").back();
  std::mt19937 rng(seed);
  for (std::size_t k = 0; k < run.images.size(); ++k) {
    TempDir copy;
    copy_cut(dir.path(), copy.path(), run.ends[k]);
    MetadataState state(options);
    auto recovered = recover(copy.path(), state);
    ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
    ASSERT_EQ(state.export_image(), run.images[k]) << "seed " << seed << " record " << k;
    EXPECT_FALSE(recovered.value().cut.has_value());
    if (k + 1 < run.images.size()) {
      // Cut inside the next record: its header or its payload runs past the end.
      const std::size_t len = record_length(journal, run.ends[k]);
      for (int t = 0; t < 3; ++t) {
        TempDir torn;
        const std::size_t at = run.ends[k] + std::uniform_int_distribution<std::size_t>(1, len - 1)(rng);
        copy_cut(dir.path(), torn.path(), at);
        MetadataState s2(options);
        auto r2 = recover(torn.path(), s2);
        ASSERT_TRUE(r2.has_value()) << r2.error().message;
        ASSERT_EQ(s2.export_image(), run.images[k]) << "seed " << seed << " cut at " << at;
        ASSERT_TRUE(r2.value().cut.has_value());
        EXPECT_THAT(*r2.value().cut, HasSubstr("offset " + std::to_string(run.ends[k])));
      }
    }
  }
}

// Eviction, read leases and reclaim, on a fake clock.
StateOptions lifecycle_options(const std::int64_t& clock, int lease_ms = 100, int ttl_ms = 300) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(lease_ms);
  options.allocation_ttl = std::chrono::milliseconds(ttl_ms);
  options.clock = [&clock] { return std::chrono::milliseconds(clock); };
  return options;
}

TEST(DurableRecovery, EqualsTheStateAtEveryRecordBoundaryAndInsideTheLastRecord) {
  for (unsigned seed : {1u, 2u, 3u}) expect_recovery_equality(seed, 1000);
}

TEST(DurableRecovery, WithTheCacheLifecycleEqualsTheStateAtEveryRecordBoundary) {
  for (unsigned seed : {21u, 22u}) {
    std::int64_t clock = 1'764'590'000'000;  // wall-clock-like
    expect_recovery_equality(seed, 1000, 0, lifecycle_options(clock), &clock);
  }
  // Every lifecycle record was made (and so replayed above).
  std::int64_t clock = 1'764'590'000'000;
  TempDir dir;
  drive(dir.path(), 21, 4000, 0, lifecycle_options(clock), &clock);
  const auto kinds = kinds_in(dir.path());
  for (const ChangeKind kind : {ChangeKind::keys_removed, ChangeKind::page_reclaimed, ChangeKind::key_drained,
                                ChangeKind::clock, ChangeKind::allocated, ChangeKind::confirmed}) {
    EXPECT_GE(kinds.count(kind) ? kinds.at(kind) : 0, 3) << "kind " << static_cast<int>(kind);
  }
  EXPECT_GE(most_keys_evicted_at_once(dir.path()), 2u) << "an eviction record of several keys is replayed";
}

TEST(DurableRecovery, SnapshotThenJournalEqualsTheStateAndOldFilesGo) {
  expect_recovery_equality(7, 660, 150);
  std::int64_t clock = 1'764'590'000'000;
  expect_recovery_equality(8, 660, 150, lifecycle_options(clock), &clock);
}

// The restart rule (MetadataState::restarted): each case once after a crash (the journal alone) and
// once after a clean shutdown (the snapshot alone).
class DurableRestart : public ::testing::TestWithParam<bool> {
 protected:
  // The first server's life; then the second one's store, opened at `clock` = `restart_at`.
  std::unique_ptr<Store> restart(MetadataState& first, std::unique_ptr<Store> store, MetadataState& second,
                                 std::int64_t restart_at) {
    if (GetParam()) {
      EXPECT_TRUE(store->shutdown().has_value());
    } else {
      EXPECT_TRUE(store->journal().write_through(first.seq()).has_value());
    }
    store.reset();
    clock_ = restart_at;
    auto next = open_store(dir_.path(), second);
    EXPECT_EQ(next->recovered().records == 0, GetParam());
    return next;
  }
  TempDir dir_;
  std::int64_t clock_ = 1'764'590'000'000;
};

TEST_P(DurableRestart, AKeyLookedUpBeforeACrashIsNotEvictedWithinALeasePeriodAfter) {
  const StateOptions options = lifecycle_options(clock_, 100, 0);
  const std::int64_t t0 = clock_;
  MetadataState first(options);
  MetadataState second(options);  // before the store, which unsubscribes from its state when it goes
  auto store = open_store(dir_.path(), first);
  ASSERT_TRUE(first.initialize(0, 2).has_value());
  const std::vector<BlockKey> ab{{"a", ""}, {"b", ""}};
  ASSERT_EQ(first.allocate(0, ab).value(), (std::vector<Page>{0, 1}));
  const std::vector<Confirmation> cs{{"a", 0}, {"b", 1}};
  ASSERT_TRUE(first.confirm_write(0, cs, {}).has_value());
  clock_ = t0 + 10;
  const std::vector<std::string> a{"a"};
  ASSERT_EQ(first.batch_exists(a), std::vector<bool>{true});  // a reader: "a" leased until t0 + 110
  store = restart(first, std::move(store), second, t0 + 50);
  // Every key counts as leased until t0 + 150: a full pool evicts nothing before then ("b" was never
  // leased, "a"'s lease from before the crash ended at t0 + 110).
  const std::vector<BlockKey> c{{"c", ""}};
  clock_ = t0 + 149;
  EXPECT_EQ(second.allocate(0, c).value(), std::vector<Page>{kNoPage});
  EXPECT_TRUE(second.key_info("a").has_value());
  EXPECT_TRUE(second.key_info("b").has_value());
  EXPECT_EQ(second.stats().evicted_keys, 0u);
  clock_ = t0 + 150;
  const auto got = second.allocate(0, c).value();
  ASSERT_NE(got[0], kNoPage);
  EXPECT_EQ(second.stats().evicted_keys, 1u);
  EXPECT_EQ(second.key_info("a").has_value() + second.key_info("b").has_value(), 1);
}

TEST_P(DurableRestart, ADrainingPageIsNotReusedWithinALeasePeriodAfter) {
  const StateOptions options = lifecycle_options(clock_, 100, 0);
  const std::int64_t t0 = clock_;
  MetadataState first(options);
  MetadataState second(options);  // before the store, which unsubscribes from its state when it goes
  MetadataState third(options);
  auto store = open_store(dir_.path(), first);
  ASSERT_TRUE(first.initialize(0, 1).has_value());
  const std::vector<BlockKey> a{{"a", ""}};
  ASSERT_EQ(first.allocate(0, a).value(), std::vector<Page>{0});
  const std::vector<Confirmation> cs{{"a", 0}};
  ASSERT_TRUE(first.confirm_write(0, cs, {}).has_value());
  const std::vector<std::string> names{"a"};
  ASSERT_EQ(first.get_locations(0, names).value()[0], Page{0});  // a reader of page 0, leased until t0 + 100
  ASSERT_EQ(first.delete_keys(names), std::vector<bool>{true});
  ASSERT_EQ(first.page_state(0, 0), PageState::draining);
  store = restart(first, std::move(store), second, t0 + 50);
  EXPECT_FALSE(second.key_info("a").has_value());
  const std::vector<BlockKey> b{{"b", ""}};
  clock_ = t0 + 149;
  EXPECT_EQ(second.page_state(0, 0), PageState::draining);
  EXPECT_EQ(second.allocate(0, b).value(), std::vector<Page>{kNoPage});
  clock_ = t0 + 150;
  EXPECT_EQ(second.allocate(0, b).value(), std::vector<Page>{0});
  // The drain was recorded: a third server finds page 0 allocated for "b", not draining again.
  store = restart(second, std::move(store), third, t0 + 160);
  EXPECT_EQ(third.page_state(0, 0), PageState::allocated);
}

TEST_P(DurableRestart, WhatWasAllocatedBeforeIsReclaimedAtItsOwnDeadline) {
  const StateOptions options = lifecycle_options(clock_, 0, 100);
  const std::int64_t t0 = clock_;
  MetadataState first(options);
  MetadataState second(options);  // before the store, which unsubscribes from its state when it goes
  auto store = open_store(dir_.path(), first);
  ASSERT_TRUE(first.initialize(0, 4).has_value());
  ASSERT_TRUE(first.initialize(1, 4).has_value());
  const std::vector<BlockKey> x{{"x", ""}};
  ASSERT_EQ(first.allocate(0, x).value(), std::vector<Page>{0});  // allocated at t0
  clock_ = t0 + 20;
  const std::vector<BlockKey> y{{"y", ""}};
  ASSERT_EQ(first.allocate(0, y).value(), std::vector<Page>{1});
  const std::vector<Confirmation> cy{{"y", 1}};
  ASSERT_TRUE(first.confirm_write(0, cy, {}).has_value());  // y incomplete (2 ranks) from t0 + 20
  store = restart(first, std::move(store), second, t0 + 50);
  clock_ = t0 + 99;
  EXPECT_EQ(second.page_state(0, 0), PageState::allocated);
  clock_ = t0 + 100;  // x's deadline, not the restart's + 100
  EXPECT_EQ(second.page_state(0, 0), PageState::free);
  EXPECT_TRUE(second.key_info("y").has_value());
  clock_ = t0 + 120;
  EXPECT_FALSE(second.key_info("y").has_value());
  EXPECT_EQ(second.page_state(0, 1), PageState::free);
  const StateStats stats = second.stats();
  EXPECT_EQ(stats.reclaimed_allocated_pages, 1u);
  EXPECT_EQ(stats.reclaimed_keys, 1u);
}

// A reclaimed page reallocated, across a restart: a page the TTL reclaimed from "k1" and allocated to "k3"
// before the restart still refuses a bare release after it (the mark is in the snapshot, version 4,
// and in the journal's page_reclaimed record); a keyed release still frees it for its holder only.
TEST_P(DurableRestart, ABareReleaseOfAPageReallocatedAfterAReclaimIsStillRefused) {
  const StateOptions options = lifecycle_options(clock_, 0, 100);
  const std::int64_t t0 = clock_;
  MetadataState first(options);
  MetadataState second(options);  // before the store, which unsubscribes from its state when it goes
  auto store = open_store(dir_.path(), first);
  ASSERT_TRUE(first.initialize(0, 1).has_value());
  const std::vector<BlockKey> k1{{"k1", ""}};
  ASSERT_EQ(first.allocate(0, k1).value(), std::vector<Page>{0});
  clock_ = t0 + 100;  // k1's page 0 reclaimed
  const std::vector<BlockKey> k3{{"k3", ""}};
  ASSERT_EQ(first.allocate(0, k3).value(), std::vector<Page>{0});
  if (GetParam()) {
    // The clean shutdown's snapshot holds the mark, and says so in its version.
    ASSERT_TRUE(store->shutdown().has_value());
    const std::string bytes = read_bytes(files_like(dir_.path(), "snapshot-").back());
    const auto version = check_file_header(bytes, kSnapshotMagic, kSnapshotNewestVersion);
    ASSERT_TRUE(version.has_value()) << version.error().message;
    EXPECT_EQ(version.value(), kSnapshotReclaimVersion);
  }
  store = restart(first, std::move(store), second, t0 + 150);
  ASSERT_EQ(second.export_image().ranks.size(), 1u);
  EXPECT_EQ(second.export_image().ranks[0].reclaimed, std::vector<std::uint32_t>{0});
  const auto late = second.confirm_write(0, {}, std::vector<Page>{0});
  ASSERT_TRUE(late.has_error());
  EXPECT_EQ(late.error().kind, StateErrc::conflict);
  EXPECT_THAT(late.error().message, HasSubstr("page 0 was reclaimed by the allocation TTL"));
  EXPECT_EQ(second.page_state(0, 0), PageState::allocated);
  const std::vector<ReleaseKey> as_k1{{0, "k1"}};
  EXPECT_EQ(second.confirm_write(0, {}, std::vector<Page>{0}, as_k1).value().late, 1u);
  const std::vector<ReleaseKey> as_k3{{0, "k3"}};
  EXPECT_EQ(second.confirm_write(0, {}, std::vector<Page>{0}, as_k3).value().released, 1u);
  EXPECT_EQ(second.page_state(0, 0), PageState::free);
}

INSTANTIATE_TEST_SUITE_P(CrashOrShutdown, DurableRestart, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "AfterShutdown" : "AfterCrash"; });

// Versions 1 and 2 kept request-id answers as whole tagged records (key names and all): still read,
// into the compact form the cache keeps.
TEST(DurableSnapshot, AnOlderSnapshotsTaggedRecordsAreReadIntoTheCompactForm) {
  for (const std::uint32_t version : {kFormatVersion, kSnapshotLifecycleVersion}) {
    Change change;
    change.seq = 1;
    change.kind = ChangeKind::allocated;
    const std::vector<AllocatedItem> items{{"x", 0, 0}, {"y", kNoPage32, kNoPage32}};
    change.allocated = items;
    const DedupTag tag{Route::batch_allocate, "req-old", 42, 77};
    std::string body;
    put_u64(body, 0);  // seq
    put_u32(body, 0);  // ranks
    put_u64(body, 0);  // keys
    put_u32(body, 0);  // free ids
    if (version == kSnapshotLifecycleVersion) {
      put_u8(body, 0);
      put_u64(body, 0);
      for (int i = 0; i < 3; ++i) put_u32(body, 0);  // draining ids, timed pages, timed keys
    }
    put_u32(body, 1);
    put_u64(body, 1);
    std::string payload;
    encode_payload(change, &tag, payload);
    put_bytes(body, payload);
    put_bytes(body, journal_name(1));
    std::string file = file_header(kSnapshotMagic, version) + body;
    put_u32(file, crc32c(body));
    auto loaded = read_snapshot("snapshot-old", file);
    ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
    ASSERT_EQ(loaded.value().dedup.size(), 1u);
    EXPECT_EQ(loaded.value().dedup[0], (DedupEntry{1, tag, 200, {0, kNoPage32}, 0}));
  }
}

// Version 3 is written only when there are answers to keep, and keeps them exactly: no key names.
// Version 4 holds the reclaim marks after the lifecycle section; a snapshot cut inside them is
// refused naming the rank.
TEST(DurableSnapshot, ReclaimMarksAreReadAndACutInsideThemIsNamed) {
  TempDir dir;
  std::int64_t clock = 1'764'590'000'000;
  MetadataState state(lifecycle_options(clock, 0, 100));
  ASSERT_TRUE(state.initialize(0, 1).has_value());
  const std::vector<BlockKey> k1{{"k1", ""}};
  const std::vector<BlockKey> k3{{"k3", ""}};
  ASSERT_EQ(state.allocate(0, k1).value(), std::vector<Page>{0});
  clock += 100;  // reclaimed, then allocated again
  ASSERT_EQ(state.allocate(0, k3).value(), std::vector<Page>{0});
  const StateImage image = state.export_image();
  ASSERT_TRUE(image.has_reclaim_marks());
  const std::string next = journal_name(image.seq + 1);
  ASSERT_TRUE(write_snapshot(dir.path(), image, {}, next).has_value());
  const auto path = files_like(dir.path(), "snapshot-").back();
  const std::string bytes = read_bytes(path);
  auto loaded = read_snapshot(path, bytes);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded.value().image, image);
  // Cut just before rank 0's mark count: what follows it is one mark, the dedup count, the journal's
  // name and the checksum.
  std::string cut = bytes.substr(0, bytes.size() - (4 + 4 + 4 + 4 + next.size() + 4));
  put_u32(cut, crc32c(std::string_view(cut).substr(kFileHeaderSize)));
  auto refused = read_snapshot(path, cut);
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message, HasSubstr("truncated reclaim marks of rank 0"));
}

TEST(DurableSnapshot, RequestIdAnswersAreKeptInTheirCompactForm) {
  TempDir dir;
  MetadataState state;
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  const std::vector<DedupEntry> dedup{
      {3, DedupTag{Route::batch_allocate, "req-a", 11, 100}, 200, {2, kNoPage32, 0}, 1'764'590'000'123},
      {4, DedupTag{Route::confirm_write, "req-b", 22, 200}, 204, {}, 0}};
  const StateImage image = state.export_image();
  ASSERT_TRUE(write_snapshot(dir.path(), image, dedup, journal_name(image.seq + 1)).has_value());
  const auto path = files_like(dir.path(), "snapshot-").back();
  const std::string bytes = read_bytes(path);
  const auto version = check_file_header(bytes, kSnapshotMagic, kSnapshotDedupVersion);
  ASSERT_TRUE(version.has_value()) << version.error().message;
  EXPECT_EQ(version.value(), kSnapshotDedupVersion);
  auto loaded = read_snapshot(path, bytes);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded.value().dedup, dedup);
  EXPECT_EQ(loaded.value().image, image);
  // A cut inside an entry is named as such (the last 40 bytes: the checksum and the journal's name).
  std::string cut = bytes.substr(0, bytes.size() - 41);
  const std::string cut_body = cut.substr(kFileHeaderSize);
  put_u32(cut, crc32c(cut_body));
  auto refused = read_snapshot(path, cut);
  ASSERT_FALSE(refused.has_value());
  EXPECT_THAT(refused.error().message, HasSubstr("truncated pages of request-id entry 4"));
}

TEST(DurableSnapshot, TheFormatChangesOnlyWithTheCacheLifecycle) {
  for (const bool lifecycle : {false, true}) {
    TempDir dir;
    std::int64_t clock = 1'764'590'000'000;
    MetadataState state(lifecycle ? lifecycle_options(clock) : StateOptions{});
    auto store = open_store(dir.path(), state);
    Workload work(3);
    for (int i = 0; i < 200; ++i) work.step(state);
    ASSERT_TRUE(store->shutdown().has_value());
    const std::string bytes = read_bytes(files_like(dir.path(), "snapshot-").back());
    const auto version = check_file_header(bytes, kSnapshotMagic, kSnapshotLifecycleVersion);
    ASSERT_TRUE(version.has_value()) << version.error().message;
    EXPECT_EQ(version.value(), lifecycle ? kSnapshotLifecycleVersion : kFormatVersion);
    // A reader of version 1 only says so, naming the version.
    const auto v1 = check_file_header(bytes, kSnapshotMagic);
    EXPECT_EQ(v1.has_value(), !lifecycle);
    if (!v1) {
      EXPECT_EQ(v1.error().code, Errc::unsupported);
      EXPECT_THAT(v1.error().message, HasSubstr("unknown format version 2"));
    }
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
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
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
  const DedupTag first{Route::batch_allocate, "req-a", 11, 100};
  const DedupTag second{Route::confirm_write, "req-b", 22, 200};
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
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), 2u);
  EXPECT_EQ(dedup[0].tag, first);
  EXPECT_EQ(dedup[0].status, 200u);
  EXPECT_EQ(dedup[0].pages, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_GT(dedup[0].at_ms, 0);  // through the snapshot: its time kept
  EXPECT_EQ(dedup[1].tag, second);
  EXPECT_EQ(dedup[1].status, 204u);
  EXPECT_TRUE(dedup[1].pages.empty());
  EXPECT_EQ(dedup[1].at_ms, 0);  // replayed from the journal: no time recorded
  // Its window started at this restart, as in the cache: the next snapshot keeps that time, so a
  // restart after it does not give the answer a whole window again.
  ASSERT_TRUE(store->shutdown().has_value());
  store.reset();
  MetadataState again;
  const auto reopened = open_store(dir.path(), again);
  ASSERT_EQ(reopened->recovered().dedup.size(), 2u);
  EXPECT_GT(reopened->recovered().dedup[1].at_ms, 0);
}

// A clear forgets no request id (the server answers a repeat of one from before it 409, its pages
// taken back): neither the journal's replay nor the snapshot after it drops them.
TEST(DurableRecovery, AClearForgetsNoRequestId) {
  for (const bool snapshot : {false, true}) {
    TempDir dir;
    const DedupTag tag{Route::batch_allocate, "req-before", 5, 20};
    {
      MetadataState state;
      auto store = open_store(dir.path(), state);
      ASSERT_TRUE(state.initialize(0, 2).has_value());
      {
        TagScope scope(&tag);
        const std::vector<BlockKey> keys{{"k", ""}};
        ASSERT_TRUE(state.allocate(0, keys).has_value());
      }
      state.clear();
      if (snapshot) {
        ASSERT_TRUE(store->shutdown().has_value());
      } else {
        ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
      }
    }
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_EQ(store->recovered().dedup.size(), 1u) << (snapshot ? "snapshot" : "journal");
    EXPECT_EQ(store->recovered().dedup[0].tag, tag);
    EXPECT_EQ(state.rank_count(), 0u);
  }
}

// The journal keeps the newest answers within --dedup-max-bytes, weighed as the cache weighs them
// (pages, not key names): a key of 1,000 bytes costs nothing, and the oldest go first.
TEST(DurableRecovery, ASnapshotKeepsTheNewestAnswersWithinTheBudgetAsTheCacheWeighsThem) {
  TempDir dir;
  const std::string long_key(1000, 'k');
  {
    MetadataState state;
    auto store = open_store(dir.path(), state, FsyncMode::no, 3 * dedup_weight({}, "req-0", 1));
    ASSERT_TRUE(state.initialize(0, 8).has_value());
    for (int i = 0; i < 5; ++i) {
      const DedupTag tag{Route::batch_allocate, "req-" + std::to_string(i), 0, 0};
      TagScope scope(&tag);
      const std::vector<BlockKey> keys{{long_key + std::to_string(i), ""}};
      ASSERT_TRUE(state.allocate(0, keys).has_value());
    }
    ASSERT_TRUE(store->shutdown().has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dedup[i].tag.id, "req-" + std::to_string(i + 2));
    EXPECT_EQ(dedup[i].pages, std::vector<std::uint32_t>{static_cast<std::uint32_t>(i + 2)});
  }
}

// A lifecycle record written during a tagged request (here, the eviction an allocate makes room
// with) is the state's doing, not the request's answer: only the allocate's record carries the id.
TEST(DurableRecovery, OnlyTheRequestsOwnRecordCarriesItsRequestId) {
  TempDir dir;
  const DedupTag tag{Route::batch_allocate, "req-evicting", 7, 30};
  StateOptions options;
  options.eviction = Eviction::lru;
  {
    MetadataState state(options);
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(state.initialize(0, 1).has_value());
    const std::vector<BlockKey> a{{"a", ""}};
    const std::vector<Confirmation> a0{{"a", 0}};
    ASSERT_TRUE(state.allocate(0, a).has_value());
    ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
    {
      TagScope scope(&tag);
      const std::vector<BlockKey> b{{"b", ""}};
      ASSERT_EQ(state.allocate(0, b).value(), std::vector<Page>{0});  // "a" evicted to make room
    }
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
  }
  EXPECT_EQ(kinds_in(dir.path()).at(ChangeKind::keys_removed), 1);
  MetadataState state(options);
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), 1u);
  EXPECT_EQ(dedup[0].tag, tag);
  EXPECT_EQ(dedup[0].status, 200u);
  EXPECT_FALSE(state.key_info("a").has_value());
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
      const DedupTag tag{Route::batch_allocate, std::string("req-").append(std::to_string(i)), static_cast<std::uint64_t>(i), 40};
      TagScope scope(&tag);
      const std::vector<BlockKey> keys{{std::string("k").append(std::to_string(i)), ""}};
      ASSERT_TRUE(state.allocate(0, keys).has_value());
    }
    ASSERT_TRUE(store.value()->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), std::size_t{kTagged + 3});
  for (int i = 0; i < kTagged + 3; ++i) {
    ASSERT_EQ(dedup[i].tag.id, std::string("req-").append(std::to_string(i)));
    ASSERT_EQ(dedup[i].pages, std::vector<std::uint32_t>{static_cast<std::uint32_t>(i)});
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

// import_image enters the pages by page number across the ranks, largest rank first: ranks of
// unsorted sizes, each key at another page number on each, every kind of page.
TEST(DurableImage, RanksOfDifferentSizesKeepEveryKeysPagesAcrossExportAndImport) {
  MetadataState source;
  ASSERT_TRUE(source.initialize(1, 3).has_value());
  ASSERT_TRUE(source.initialize(2, 7).has_value());
  ASSERT_TRUE(source.initialize(3, 5).has_value());
  const std::vector<BlockKey> fill{{"x", ""}, {"y", ""}, {"z", ""}};
  ASSERT_EQ(source.allocate(2, fill).value(), (std::vector<Page>{0, 1, 2}));
  const std::vector<Confirmation> x{{"x", 0}};
  ASSERT_TRUE(source.confirm_write(2, x, {}).has_value());  // y and z stay allocated
  const std::vector<BlockKey> w{{"w", ""}};
  ASSERT_EQ(source.allocate(3, w).value(), (std::vector<Page>{0}));
  const std::vector<Confirmation> w0{{"w", 0}};
  ASSERT_TRUE(source.confirm_write(3, w0, {}).has_value());
  const std::vector<BlockKey> keys{{"k0", ""}, {"k1", ""}, {"k2", ""}};
  for (const Rank rank : {1, 2, 3}) {
    const auto pages = source.allocate(rank, keys).value();
    std::vector<Confirmation> cs;
    for (std::size_t i = 0; i < keys.size(); ++i) cs.push_back({keys[i].key, pages[i]});
    ASSERT_TRUE(source.confirm_write(rank, cs, {}).has_value());
  }
  ASSERT_EQ(source.allocate(3, w).value(), (std::vector<Page>{4}));
  const std::vector<Confirmation> w4{{"w", 4}};
  ASSERT_TRUE(source.confirm_write(3, w4, {}).has_value());  // page 0 of rank 3 is orphaned
  const StateImage image = source.export_image();
  MetadataState target;
  ASSERT_TRUE(target.import_image(image).has_value());
  EXPECT_EQ(target.export_image(), image);
  const std::vector<std::string> all{"k0", "k1", "k2", "w", "x", "y", "z"};
  for (const Rank rank : {1, 2, 3}) {
    EXPECT_EQ(target.get_locations(rank, all).value(), source.get_locations(rank, all).value()) << rank;
    for (Page page = 0; page < 7; ++page) {
      EXPECT_EQ(target.page_owner(rank, page), source.page_owner(rank, page)) << rank << " " << page;
    }
    const RankStats got = target.rank_stats(rank).value();
    const RankStats want = source.rank_stats(rank).value();
    EXPECT_EQ(std::tie(got.num_pages, got.free, got.allocated, got.mapped, got.orphaned),
              std::tie(want.num_pages, want.free, want.allocated, want.mapped, want.orphaned)) << rank;
  }
  EXPECT_EQ(source.get_locations(2, all).value()[1], std::optional<Page>{4});  // k1: pages 1, 4, 2
  EXPECT_EQ(target.batch_exists(all), source.batch_exists(all));
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
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
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
  ASSERT_TRUE(store->journal().write_through(seq).has_value());
  std::promise<Result<void>> done;
  store->journal().when_durable(seq, [&](const Result<void>& durable) { done.set_value(durable); });
  EXPECT_TRUE(done.get_future().get().has_value());  // synced, not failed
  EXPECT_GE(store->journal().stats().fsyncs, 1u);
  // Already durable: at once, on this thread, and told so.
  bool called = false;
  store->journal().when_durable(seq, [&](const Result<void>& durable) {
    called = true;
    EXPECT_TRUE(durable.has_value());
  });
  EXPECT_TRUE(called);
}

// everysec's promise: a record written is synced within about a second, with nobody waiting on it
// (no `always` waiter wakes the syncer). Timed against a bound three times the promise, so that a
// loaded machine passes: it fails once the syncer waits 3 s or more (20 s, say), not at 2.
TEST(DurableJournal, EverysecSyncsAWrittenRecordWithinASecond) {
  TempDir dir;
  MetadataState state;
  auto store = open_store(dir.path(), state, FsyncMode::everysec);
  ASSERT_TRUE(state.initialize(1, 4).has_value());
  const std::uint64_t before = store->journal().stats().fsyncs;
  ASSERT_TRUE(store->journal().write_through(Journal::thread_seq()).has_value());
  const auto written = std::chrono::steady_clock::now();
  const auto bound = written + std::chrono::seconds(3);
  while (store->journal().stats().fsyncs == before && std::chrono::steady_clock::now() < bound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // between polls; orders nothing
  }
  EXPECT_GT(store->journal().stats().fsyncs, before) << "no fdatasync within 3 s of the write";
}

TEST(DurableJournal, ParsesFsyncModes) {
  EXPECT_EQ(parse_fsync_mode("always"), FsyncMode::always);
  EXPECT_EQ(parse_fsync_mode("everysec"), FsyncMode::everysec);
  EXPECT_EQ(parse_fsync_mode("no"), FsyncMode::no);
  EXPECT_FALSE(parse_fsync_mode("sometimes"));
  for (const auto& m : kFsyncModes) EXPECT_EQ(to_string(m.mode), m.name);
  EXPECT_EQ(fsync_mode_names("|"), "always|everysec|no");
}

}  // namespace
}  // namespace hf3fs_meta::durable
