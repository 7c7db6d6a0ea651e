// Namespaces on disk (docs/design.md "Durable formats"): a record of a named namespace
// carries its id (flag bit 1), the namespaces' own kinds 12 and 13 carry theirs and the name, a
// snapshot holds the named namespaces from version 5 on; the default namespace's records and
// snapshots are byte for byte what they were, and every refusal names what it refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "durable/crc32c.hpp"
#include "durable/data_dir.hpp"
#include "durable/journal.hpp"
#include "durable/log_format.hpp"
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
using testing::files_like;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::unique_ptr<Store> open_store(const fs::path& dir, MetadataState& state) {
  auto store = Store::open(Store::Options{dir, FsyncMode::no, 0, std::size_t{1} << 20}, state);
  EXPECT_TRUE(store.has_value()) << (store ? "" : store.error().message);
  return store ? std::move(store).value() : nullptr;
}

std::string u32_bytes(std::uint32_t v) {
  std::string out;
  put_u32(out, v);
  return out;
}

// Bytes appended part by part (not operator+ on temporaries: GCC 12 at the tests' -O1 warns falsely
// on that, -Warray-bounds; tests/CMakeLists.txt).
std::string bytes_of(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) out.append(part);
  return out;
}

// The error of a payload the decoder refuses, with its code.
std::string refused(std::string_view payload, Errc code) {
  const auto decoded = Record::decode(1, payload);
  if (decoded) return "accepted";
  EXPECT_EQ(decoded.error().code, code) << decoded.error().message;
  return decoded.error().message;
}

// Decodes `payload`, checks that it encodes back to the same bytes (every field read as written) and
// that every shorter payload is refused as corrupt.
void expect_round_trip(const std::string& payload, std::uint64_t seq, std::uint32_t ns,
                       std::string_view ns_name = {}) {
  const auto decoded = Record::decode(seq, payload);
  ASSERT_TRUE(decoded) << decoded.error().message;
  const Change& c = decoded.value().change();
  EXPECT_EQ(c.ns, ns);
  EXPECT_EQ(c.ns_name, ns_name);
  std::string again;
  const auto& tag = decoded.value().tag();
  encode_payload(c, tag ? &*tag : nullptr, again);
  EXPECT_EQ(again, payload);
  for (std::size_t cut = 0; cut < payload.size(); ++cut) {
    const auto short_one = Record::decode(seq, std::string_view(payload).substr(0, cut));
    ASSERT_FALSE(short_one) << "cut " << cut;
    EXPECT_EQ(short_one.error().code, Errc::corrupt) << "cut " << cut;
  }
}

TEST(DurableNamespaceRecord, EveryKindOfANamedNamespaceCarriesItsIdAfterTheTag) {
  const AllocatedItem allocated[] = {{"a", 3, 3}};
  const ConfirmedItem confirmed[] = {{"a", 3, 2}};
  const std::uint32_t released[] = {9};
  const std::string_view deleted[] = {"gone"};
  std::vector<Change> changes(11);
  changes[0].kind = ChangeKind::rank_created;
  changes[0].rank = 2;
  changes[0].num_pages = 77;
  changes[1].kind = ChangeKind::allocated;
  changes[1].allocated = allocated;
  changes[2].kind = ChangeKind::confirmed;
  changes[2].confirmed = confirmed;
  changes[2].released = released;
  changes[3].kind = ChangeKind::cleared;
  changes[4].kind = ChangeKind::rank_dropped;
  changes[4].rank = 5;
  changes[5].kind = ChangeKind::keys_deleted;
  changes[5].deleted = deleted;
  changes[6].kind = ChangeKind::keys_removed;
  changes[6].removal = Removal::evicted;
  changes[6].deleted = deleted;
  changes[7].kind = ChangeKind::page_reclaimed;
  changes[7].page = 4;
  changes[8].kind = ChangeKind::key_drained;
  changes[8].key_id = 6;
  changes[9].kind = ChangeKind::clock;
  changes[9].clock_ms = 1'764'590'000'123;
  changes[10].kind = ChangeKind::page_draining;
  changes[10].page = 8;
  changes[10].key_id = 9;
  const DedupTag tag{Route::batch_allocate, "req-1", 0x1234567890ull, 42};
  for (Change& change : changes) {
    change.seq = 10;
    for (const DedupTag* t : {static_cast<const DedupTag*>(nullptr), &tag}) {
      change.ns = 0;
      std::string in_default;
      encode_payload(change, t, in_default);
      // The default namespace's record: flag bit 1 clear, as before namespaces.
      EXPECT_EQ(static_cast<std::uint8_t>(in_default[1]), t ? 1 : 0);
      for (const std::uint32_t ns : {1u, 0xFFFFFFFFu}) {
        change.ns = ns;
        std::string in_named;
        encode_payload(change, t, in_named);
        // The same bytes with bit 1 set and the id after the tag (2 bytes of kind and flags, then the tag).
        std::string expected = in_default;
        expected[1] = static_cast<char>(expected[1] | 2);
        const std::size_t tag_bytes = t ? 1 + 4 + t->id.size() + 8 + 8 : 0;
        expected.insert(2 + tag_bytes, u32_bytes(ns));
        EXPECT_EQ(in_named, expected) << "kind " << static_cast<int>(change.kind);
        expect_round_trip(in_named, change.seq, ns);
      }
    }
  }
}

TEST(DurableNamespaceRecord, TheNamespacesOwnKindsCarryTheirIdAndName) {
  Change created;
  created.seq = 3;
  created.kind = ChangeKind::namespace_created;
  created.ns = 7;
  created.ns_name = "model-a.v2_x";
  std::string payload;
  encode_payload(created, nullptr, payload);
  EXPECT_EQ(payload, bytes_of({std::string_view("\x0c\x00", 2), u32_bytes(7), u32_bytes(12), "model-a.v2_x"}));
  expect_round_trip(payload, 3, 7, "model-a.v2_x");

  Change dropped;
  dropped.seq = 4;
  dropped.kind = ChangeKind::namespace_dropped;
  dropped.ns = 0xFFFFFFFFu;
  payload.clear();
  encode_payload(dropped, nullptr, payload);
  EXPECT_EQ(payload, bytes_of({std::string_view("\x0d\x00", 2), u32_bytes(0xFFFFFFFFu)}));
  expect_round_trip(payload, 4, 0xFFFFFFFFu);
}

TEST(DurableNamespaceRecord, WhatNoServerWritesIsRefusedNamingTheRecord) {
  const std::string cleared_in_0 = bytes_of({std::string_view("\x04\x02", 2), u32_bytes(0)});
  EXPECT_THAT(refused(cleared_in_0, Errc::corrupt), HasSubstr("record 1: namespace flag with namespace id 0"));
  const std::string created_flagged =
      bytes_of({std::string_view("\x0c\x02", 2), u32_bytes(3), u32_bytes(3), u32_bytes(2), "m1"});
  EXPECT_THAT(refused(created_flagged, Errc::corrupt),
              HasSubstr("record 1: namespace flag on a namespace's own record"));
  const std::string created_0 = bytes_of({std::string_view("\x0c\x00", 2), u32_bytes(0), u32_bytes(2), "m1"});
  EXPECT_THAT(refused(created_0, Errc::corrupt),
              HasSubstr("record 1: namespace_created of namespace id 0 (the default namespace's)"));
  const std::string nameless = bytes_of({std::string_view("\x0c\x00", 2), u32_bytes(3), u32_bytes(0)});
  EXPECT_THAT(refused(nameless, Errc::corrupt), HasSubstr("record 1: namespace_created without a name"));
  const std::string dropped_0 = bytes_of({std::string_view("\x0d\x00", 2), u32_bytes(0)});
  EXPECT_THAT(refused(dropped_0, Errc::corrupt), HasSubstr("record 1: namespace_dropped of namespace id 0"));
  const std::string dropped_long = bytes_of({std::string_view("\x0d\x00", 2), u32_bytes(3), u32_bytes(3)});
  EXPECT_THAT(refused(dropped_long, Errc::corrupt), HasSubstr("record 1: 4 bytes after the record's fields"));
  // Flags and kinds beyond these are still a newer server's.
  EXPECT_THAT(refused(std::string("\x04\x04", 2), Errc::corrupt), HasSubstr("record 1: unknown flags 4"));
  EXPECT_THAT(refused(std::string("\x0e\x00", 2), Errc::unsupported), HasSubstr("record 1: unknown kind 14"));
}

// A journal of records built here: the file header, then each change framed with its seq.
std::string journal_of(const std::vector<Change>& changes) {
  std::string file = file_header(kJournalMagic);
  for (const Change& change : changes) encode_record(change, nullptr, file);
  return file;
}

TEST(DurableNamespaceRecovery, ARecordInANamespaceThatDoesNotExistStopsRecoveryNamingIt) {
  TempDir dir;
  Change created;
  created.seq = 1;
  created.kind = ChangeKind::namespace_created;
  created.ns = 1;
  created.ns_name = "m1";
  Change rank;
  rank.seq = 2;
  rank.kind = ChangeKind::rank_created;
  rank.num_pages = 4;
  rank.ns = 2;  // never created
  const fs::path journal = dir.path() / journal_name(1);
  const std::string file = journal_of({created, rank});
  write_bytes(journal, file);
  MetadataState state;
  const auto recovered = recover(dir.path(), state);
  ASSERT_FALSE(recovered.has_value());
  EXPECT_EQ(recovered.error().code, Errc::inconsistent);
  const std::size_t second = file.size() - (kRecordHeaderSize + 2 + 4 + 8 + 4 + kRecordTrailerSize);
  EXPECT_THAT(recovered.error().message,
              HasSubstr(journal.string().append(" at offset ").append(std::to_string(second))));
  EXPECT_THAT(recovered.error().message, HasSubstr("change 2 does not fit the state: it names namespace 2"));
  // A namespace created out of order (the ids are given in turn, never reused) is refused too.
  created.ns = 2;
  write_bytes(journal, journal_of({created}));
  MetadataState again;
  const auto out_of_order = recover(dir.path(), again);
  ASSERT_FALSE(out_of_order.has_value());
  EXPECT_THAT(out_of_order.error().message, HasSubstr("namespace id 2 is not the next one (1)"));
}

// Random calls in the default namespace and three named ones (created by initialize, dropped and
// created again, cleared), with the lifecycle on a fake clock: the state after every record, and
// after snapshots, is what recovery rebuilds.
class Driver {
 public:
  Driver(unsigned seed, std::int64_t& clock) : rng_(seed), clock_(clock) {}
  void step(MetadataState& state) {
    static const char* const kNames[] = {"", "m1", "m2", "m3"};
    const NamespaceRef ns{kNames[pick(0, 3)]};
    const Rank rank = pick(0, 1);
    const std::string key = std::string("k").append(std::to_string(pick(0, 15)));
    const int op = pick(0, 99);
    if (pick(0, 3) == 0) clock_ += pick(1, 40);
    if (op < 15) {
      (void)state.initialize(ns, rank, pick(2, 6));
    } else if (op < 50) {
      const std::vector<BlockKey> keys{{key, ""}};
      const auto pages = state.allocate(ns, rank, keys);
      if (pages && pages.value()[0] != kNoPage) {
        const std::vector<Confirmation> cs{{key, pages.value()[0]}};
        if (pick(0, 3) != 0) (void)state.confirm_write(ns, rank, cs, {});
      }
    } else if (op < 75) {
      const std::vector<std::string> keys{key};
      (void)state.get_locations(ns, rank, keys);
    } else if (op < 90) {
      const std::vector<std::string> keys{key};
      (void)state.delete_keys(ns, keys);
    } else if (op < 94) {
      state.clear(ns);
    } else if (op < 98) {
      if (!ns.name.empty()) (void)state.drop_namespace(ns.name);
    } else {
      (void)state.drop_rank(ns, rank);
    }
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::mt19937 rng_;
  std::int64_t& clock_;
};

StateOptions lifecycle_options(const std::int64_t& clock) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(50);
  options.allocation_ttl = std::chrono::milliseconds(120);
  options.clock = [&clock] { return std::chrono::milliseconds(clock); };
  return options;
}

std::uint32_t snapshot_version(const fs::path& dir) {
  const std::string bytes = read_bytes(files_like(dir, "snapshot-").back());
  const auto version = check_file_header(bytes, kSnapshotMagic, kSnapshotNewestVersion);
  EXPECT_TRUE(version.has_value()) << version.error().message;
  return version ? version.value() : 0;
}

TEST(DurableNamespaceRecovery, ThreeNamespacesRecoverExactlyFromTheJournalAndFromSnapshots) {
  for (const unsigned seed : {1u, 2u, 3u}) {
    TempDir dir;
    std::int64_t clock = 1'764'590'000'000;
    MetadataState state(lifecycle_options(clock));
    auto store = open_store(dir.path(), state);
    Driver driver(seed, clock);
    int named_images = 0;
    for (int i = 0; i < 600; ++i) {
      const std::uint64_t before = state.seq();
      driver.step(state);
      if (i % 150 == 149) {
        ASSERT_TRUE(store->snapshot().has_value());
        EXPECT_EQ(snapshot_version(dir.path()), kSnapshotNamespaceVersion) << "seed " << seed;
      } else if (state.seq() == before || i % 7 != 0) {
        continue;
      }
      ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
      const StateImage expected = state.export_image();
      named_images += !expected.namespaces.empty();
      TempDir copy;
      for (const auto& e : fs::directory_iterator(dir.path())) {
        if (e.path().filename() != "LOCK") fs::copy_file(e.path(), copy.path() / e.path().filename());
      }
      MetadataState recovered_state(lifecycle_options(clock));
      const auto recovered = recover(copy.path(), recovered_state);
      ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
      ASSERT_EQ(recovered_state.export_image(), expected) << "seed " << seed << " step " << i;
    }
    EXPECT_GT(named_images, 20) << "seed " << seed;
  }
}

TEST(DurableNamespaceSnapshot, Version5IsWrittenOnlyOnceANamedNamespaceExistedAndKeepsTheNextId) {
  TempDir dir;
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(state.initialize(0, 4).has_value());
    ASSERT_TRUE(store->snapshot().has_value());
    EXPECT_EQ(snapshot_version(dir.path()), kFormatVersion);  // the default namespace alone: as before
    ASSERT_TRUE(state.initialize(NamespaceRef{"m1"}, 0, 4).has_value());
    ASSERT_TRUE(state.initialize(NamespaceRef{"m2"}, 0, 4).has_value());
    ASSERT_TRUE(state.drop_namespace("m1").has_value());
    ASSERT_TRUE(state.drop_namespace("m2").has_value());
    ASSERT_TRUE(store->snapshot().has_value());
    // None is left, but the next one gets id 3: version 5 keeps it.
    EXPECT_EQ(snapshot_version(dir.path()), kSnapshotNamespaceVersion);
    ASSERT_TRUE(state.initialize(NamespaceRef{"m3"}, 1, 4).has_value());
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const StateImage image = state.export_image();
  ASSERT_EQ(image.namespaces.size(), 1u);
  EXPECT_EQ(image.namespaces[0].id, 3u);
  EXPECT_EQ(image.namespaces[0].name, "m3");
  EXPECT_EQ(image.next_namespace_id, 4u);
  EXPECT_EQ(state.rank_stats(NamespaceRef{"m3"}, 1)->num_pages, 4);
}

// Every field of version 5, the named namespaces' lifecycle and marks and the answers' namespaces
// included, read as written; a cut inside a named namespace is refused naming it.
TEST(DurableNamespaceSnapshot, Version5ReadsBackEveryFieldAndACutNamesTheNamespace) {
  TempDir dir;
  std::int64_t clock = 1'764'590'000'000;
  StateOptions options = lifecycle_options(clock);
  options.read_lease = std::chrono::milliseconds(0);
  MetadataState state(options);
  const NamespaceRef m1{"m1"};
  ASSERT_TRUE(state.initialize(0, 2).has_value());
  ASSERT_TRUE(state.initialize(m1, 0, 1).has_value());
  const std::vector<BlockKey> k1{{"k1", ""}};
  const std::vector<BlockKey> k3{{"k3", ""}};
  ASSERT_EQ(state.allocate(m1, 0, k1).value(), std::vector<Page>{0});
  clock += 120;  // reclaimed, then allocated again: a reclaim mark in m1
  ASSERT_EQ(state.allocate(m1, 0, k3).value(), std::vector<Page>{0});
  ASSERT_EQ(state.allocate(0, k1).value(), std::vector<Page>{0});
  const std::vector<Confirmation> c1{{"k1", 0}};
  ASSERT_TRUE(state.confirm_write(0, c1, {}).has_value());
  const StateImage image = state.export_image();
  ASSERT_EQ(image.namespaces.size(), 1u);
  ASSERT_TRUE(image.namespaces[0].space.has_reclaim_marks());
  ASSERT_FALSE(image.namespaces[0].space.timed_pages.empty());
  const std::vector<DedupEntry> dedup{
      {3, DedupTag{Route::batch_allocate, "req-a", 11, 100, "m1"}, 200, {0}, 1'764'590'000'123},
      {4, DedupTag{Route::confirm_write, "req-b", 22, 200}, 204, {}, 0}};
  const std::string next = journal_name(image.seq + 1);
  ASSERT_TRUE(write_snapshot(dir.path(), image, dedup, next).has_value());
  const auto path = files_like(dir.path(), "snapshot-").back();
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(snapshot_version(dir.path()), kSnapshotNamespaceVersion);
  auto loaded = read_snapshot(path, bytes);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  EXPECT_EQ(loaded.value().image, image);
  EXPECT_EQ(loaded.value().dedup, dedup);
  EXPECT_EQ(loaded.value().next_journal, next);
  MetadataState restored(options);
  ASSERT_TRUE(restored.import_image(std::move(loaded.value().image)).has_value());
  EXPECT_EQ(restored.export_image(), image);
  // Cut inside m1's reclaim marks: what follows its mark count is one mark, then the answers (a u32
  // count and two entries), the journal's name and the checksum.
  const std::size_t first_answer = 8 + 1 + 4 + 5 + 8 + 8 + (4 + 2) + 4 + 8 + 4 + 4;  // ns "m1", one page
  const std::size_t second_answer = 8 + 1 + 4 + 5 + 8 + 8 + (4 + 0) + 4 + 8 + 4;     // the default's, none
  const std::size_t answers = 4 + first_answer + second_answer;
  std::string cut = bytes.substr(0, bytes.size() - (4 + 4 + answers + 4 + next.size() + 4));
  put_u32(cut, crc32c(std::string_view(cut).substr(kFileHeaderSize)));
  const auto refused_cut = read_snapshot(path, cut);
  ASSERT_FALSE(refused_cut.has_value());
  EXPECT_THAT(refused_cut.error().message, HasSubstr("namespace m1 (id 1): truncated reclaim marks of rank 0"));
  // A version-4 reader says which version it does not know.
  const auto v4 = check_file_header(bytes, kSnapshotMagic, kSnapshotReclaimVersion);
  ASSERT_FALSE(v4.has_value());
  EXPECT_EQ(v4.error().code, Errc::unsupported);
  EXPECT_THAT(v4.error().message, HasSubstr("unknown format version 5"));
  // An answer's namespace is empty for the default one and a name otherwise: another spelling of the
  // default, or no name at all, is no snapshot a server wrote.
  for (const std::string bad : {"default", "m 1"}) {
    TempDir other;
    const std::vector<DedupEntry> misnamed{{3, DedupTag{Route::batch_allocate, "req-a", 11, 100, bad}, 200, {0}, 0}};
    ASSERT_TRUE(write_snapshot(other.path(), image, misnamed, next).has_value());
    const auto misnamed_path = files_like(other.path(), "snapshot-").back();
    const auto refused_answer = read_snapshot(misnamed_path, read_bytes(misnamed_path));
    ASSERT_FALSE(refused_answer.has_value()) << bad;
    EXPECT_THAT(refused_answer.error().message, HasSubstr("request-id entry 3 names no namespace a server writes"));
  }
}

// A tagged record of a named namespace: recovery names the namespace of its answer, from the journal
// (where the record's namespace is its id) and from a snapshot (where the answer keeps the name).
TEST(DurableNamespaceRecovery, AnAnswerKeepsItsNamespaceThroughTheJournalAndSnapshots) {
  TempDir dir;
  const DedupTag first{Route::batch_allocate, "req-a", 11, 100, "m1"};
  const DedupTag second{Route::batch_allocate, "req-a", 11, 100, "m2"};
  {
    MetadataState state;
    auto store = open_store(dir.path(), state);
    ASSERT_TRUE(state.initialize(NamespaceRef{"m1"}, 0, 8).has_value());
    ASSERT_TRUE(state.initialize(NamespaceRef{"m2"}, 0, 8).has_value());
    const std::vector<BlockKey> keys{{"x", ""}};
    {
      TagScope scope(&first);
      ASSERT_TRUE(state.allocate(NamespaceRef{"m1"}, 0, keys).has_value());
    }
    ASSERT_TRUE(store->snapshot().has_value());
    {
      TagScope scope(&second);
      ASSERT_TRUE(state.allocate(NamespaceRef{"m2"}, 0, keys).has_value());
    }
    ASSERT_TRUE(store->journal().write_through(state.seq()).has_value());
  }
  MetadataState state;
  auto store = open_store(dir.path(), state);
  const auto& dedup = store->recovered().dedup;
  ASSERT_EQ(dedup.size(), 2u);
  EXPECT_EQ(dedup[0].tag, first);   // from the snapshot
  EXPECT_EQ(dedup[1].tag, second);  // from the journal
  EXPECT_EQ(dedup[1].pages, std::vector<std::uint32_t>{0});
}

}  // namespace
}  // namespace hf3fs_meta::durable
