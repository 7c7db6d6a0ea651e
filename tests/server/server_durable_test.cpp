// A durable server (--data-dir): what it keeps across SIGKILL and a clean stop, what stops it from
// starting (exit 2, naming the file or the PID), --verify-data-dir, snapshots, and a failing disk.
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <set>
#include <tuple>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>
#include <thread>

#include "server/server_test_support.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Constructed before ServerTestBase, which starts the server on it.
struct DataDir {
  TempDir dir_;
};

class DurableServerTest : protected DataDir, public ServerTestBase {
 protected:
  explicit DurableServerTest(const std::string& fsync = "always")
      : ServerTestBase({"--threads", "2", "--data-dir", dir_.str() + "/data", "--fsync", fsync}) {}
  fs::path data() const { return dir_.path() / "data"; }
  RawResponse confirm(int rank, std::string_view key, int page) {
    return post("/keys/confirm_write", R"({"rank":)" + std::to_string(rank) + R"(,"confirmations":[[")" +
                                           std::string(key) + R"(",)" + std::to_string(page) + "]]}");
  }
  RawResponse exists(std::string_view key) {
    return post("/keys/batch_exists", R"({"keys":[")" + std::string(key) + R"("]})");
  }
};

TEST_F(DurableServerTest, EveryAcknowledgedChangeAndAnswerSurvivesSigkill) {
  initialize(0, 16);
  const Headers id{{"X-Request-Id", "alloc-1"}};
  const auto first = allocate(0, "k1", id);
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(confirm(0, "k1", 0).status, 204);
  ASSERT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
  server_.restart();  // SIGKILL, then the same arguments
  EXPECT_EQ(exists("k1").body, R"({"exists":[true]})");
  // The request id's answer came back with the journal: the same pages, nothing taken again.
  EXPECT_EQ(allocate(0, "k1", id).body, first.body);
  EXPECT_EQ(allocate(0, "k3").body, allocate_answer(0, "k3", 2));
  EXPECT_EQ(metric("hf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"allocated\"}"), "2");
}

// A deletion is journaled like any change: a restart never brings a deleted key back, and its page
// is back at the end of its pool as it was before the crash.
TEST_F(DurableServerTest, ADeletionSurvivesSigkill) {
  initialize(0, 2);
  ASSERT_EQ(allocate(0, "k").status, 200);
  ASSERT_EQ(confirm(0, "k", 0).status, 204);
  const auto deleted = post("/keys/delete", R"({"keys":["k","never"]})");
  ASSERT_EQ(deleted.status, 200);
  EXPECT_EQ(deleted.body, R"({"deleted":[true,false]})");
  server_.restart();  // SIGKILL, then the same arguments
  EXPECT_EQ(exists("k").body, R"({"exists":[false]})");
  // Page 1 was never used, page 0 went to the back of the pool when "k" was deleted.
  EXPECT_EQ(allocate(0, "a").body, allocate_answer(0, "a", 1));
  EXPECT_EQ(allocate(0, "b").body, allocate_answer(0, "b", 0));
}

// The cache lifecycle with a data dir: evictions and deletions (a leased key's page draining) are
// journaled, an allocation keeps its reclaim time, and after a restart every key counts as leased for
// one lease period. Leases and the TTL are long (600 s), so nothing here depends on timing.
class DurableLifecycleServerTest : protected DataDir, public ServerTestBase {
 protected:
  DurableLifecycleServerTest()
      : ServerTestBase({"--threads", "2", "--data-dir", dir_.str() + "/data", "--fsync", "always", "--eviction",
                        "lru", "--read-lease-ms", "600000", "--allocation-ttl-ms", "600000"}) {}
  fs::path data() const { return dir_.path() / "data"; }
  std::optional<std::string> pages(std::string_view state) {
    return metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state=")" + std::string(state) + R"("})");
  }
};

TEST_F(DurableLifecycleServerTest, EvictionsDeletionsAndLeasesSurviveSigkillAndACleanStop) {
  initialize(0, 2);
  ASSERT_EQ(allocate(0, "a").body, allocate_answer(0, "a", 0));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0]]})").status, 204);
  ASSERT_EQ(allocate(0, "b").body, allocate_answer(0, "b", 1));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["b",1]]})").status, 204);
  ASSERT_EQ(allocate(0, "c").body, allocate_answer(0, "c", 0));  // "a" (least recently used) evicted
  ASSERT_EQ(post("/keys/batch_exists", R"({"keys":["b"]})").body, R"({"exists":[true]})");  // "b" leased
  ASSERT_EQ(post("/keys/delete", R"({"keys":["b"]})").body, R"({"deleted":[true]})");  // its page drains
  ASSERT_EQ(pages("draining"), "1");
  server_.restart();  // SIGKILL, then the same arguments
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["a","b","c"]})").body, R"({"exists":[false,false,false]})");
  EXPECT_EQ(pages("allocated"), "1");  // "c"'s page, not reclaimed
  EXPECT_EQ(pages("draining"), "1");   // "b"'s, drains a lease period after the restart
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "1");
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["c",0]]})").status, 204);
  ASSERT_EQ(server_.terminate(), 0);  // a clean stop: the snapshot alone holds the state
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr("0 journal records replayed"));
  EXPECT_THAT(verified.output, HasSubstr("1 ranks, 2 pages (0 free, 0 allocated, 1 mapped, 0 orphaned, 1 draining), 1 keys"));
  server_.restart();
  // "c" was never looked up, yet counts as leased after the restart: not evicted for "d".
  EXPECT_EQ(allocate(0, "d").body, allocate_answer(0, "d", -1));
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["c","d"]})").body, R"({"exists":[true,false]})");
  EXPECT_EQ(pages("mapped"), "1");
  EXPECT_EQ(pages("draining"), "1");
  // Counted since this process started.
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "0");
}

// Kill -9 exactness per namespace (docs/design.md, "Durable formats"): the default namespace and
// two named ones, changed alike and differently under --fsync always (the same key, the same request
// id, other page counts, a delete, an unconfirmed allocate); after SIGKILL each one's /stats, exists,
// locations and request-id repeats are what they were, and none answers another's.
TEST_F(DurableServerTest, ThreeNamespacesSurviveSigkillExactly) {
  struct Space {
    std::string name;  // empty: the default namespace, no header
    int pages;
    Headers header() const { return name.empty() ? Headers{} : Headers{{"X-Hf3fs-Namespace", name}}; }
    Headers with_id(const std::string& id) const {
      Headers h = header();
      h.emplace_back("X-Request-Id", id);
      return h;
    }
  };
  const std::vector<Space> spaces{{"", 16}, {"m1", 8}, {"m2", 4}};
  const auto allocate_in = [&](int rank, std::string_view key, const Headers& headers) {
    return post("/keys/batch_allocate",
                R"({"rank":)" + std::to_string(rank) + R"(,"keys":[[")" + std::string(key) + R"(",""]]})", headers);
  };
  // What a namespace answers: its stats, exists and locations of every key used, and the repeats of
  // its request ids (each the whole answer: status and body).
  const auto observe = [&](const Space& s) {
    std::vector<std::string> seen;
    const auto note = [&](const RawResponse& r) { seen.push_back(std::to_string(r.status) + " " + r.body); };
    note(send("GET", "/stats", {}, s.header()));
    note(post("/keys/batch_exists", R"({"keys":["k","j","d","u","x"]})", s.header()));
    for (int rank : {0, 1}) {
      note(post("/keys/get_locations", R"({"rank":)" + std::to_string(rank) + R"(,"keys":["k","j","d","u","x"]})",
                s.header()));
    }
    note(allocate_in(0, "k", s.with_id("alloc-k")));
    note(allocate_in(0, "u", s.with_id("alloc-u-" + s.name)));
    note(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})", s.with_id("confirm-k")));
    return seen;
  };
  for (const Space& s : spaces) {
    for (int rank = 0; rank < (s.name == "m1" ? 2 : 1); ++rank) {
      const auto r = post("/rank/" + std::to_string(rank) + "/initialize",
                          R"({"num_pages":)" + std::to_string(s.pages) + "}", s.header());
      ASSERT_EQ(r.status, 200) << s.name << ": " << r.body;
    }
  }
  // The same key under the same request id in every namespace: each gets page 0 of its own rank 0.
  for (const Space& s : spaces) {
    const auto r = allocate_in(0, "k", s.with_id("alloc-k"));
    ASSERT_EQ(r.body, allocate_answer(0, "k", 0)) << s.name;
    ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})", s.with_id("confirm-k")).status,
              204);
  }
  // Then each its own: m1 (two ranks) "k" on rank 1 too (complete there) and "j" on rank 1 only
  // (incomplete), m2 a deleted key, every one an unconfirmed allocate.
  ASSERT_EQ(allocate_in(1, "k", spaces[1].header()).body, allocate_answer(1, "k", 0));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":1,"confirmations":[["k",0]]})", spaces[1].header()).status, 204);
  ASSERT_EQ(allocate_in(1, "j", spaces[1].header()).body, allocate_answer(1, "j", 1));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":1,"confirmations":[["j",1]]})", spaces[1].header()).status, 204);
  ASSERT_EQ(allocate_in(0, "d", spaces[2].header()).body, allocate_answer(0, "d", 1));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["d",1]]})", spaces[2].header()).status, 204);
  ASSERT_EQ(post("/keys/delete", R"({"keys":["d"]})", spaces[2].header()).body, R"({"deleted":[true]})");
  for (const Space& s : spaces) ASSERT_EQ(allocate_in(0, "u", s.with_id("alloc-u-" + s.name)).status, 200);

  std::vector<std::vector<std::string>> before;
  for (const Space& s : spaces) before.push_back(observe(s));
  // The namespaces differ (so equal answers after the restart are each one's own).
  EXPECT_NE(before[0][0], before[1][0]);
  EXPECT_NE(before[1][0], before[2][0]);
  EXPECT_EQ(before[0][1], R"(200 {"exists":[true,false,false,false,false]})");
  EXPECT_EQ(before[1][1], R"(200 {"exists":[true,false,false,false,false]})");  // "j" incomplete
  EXPECT_EQ(before[2][1], R"(200 {"exists":[true,false,false,false,false]})");  // "d" deleted
  EXPECT_EQ(metric("hf3fs_meta_namespaces"), "3");
  server_.restart();  // SIGKILL, then the same arguments
  for (std::size_t i = 0; i < spaces.size(); ++i) EXPECT_EQ(observe(spaces[i]), before[i]) << spaces[i].name;
  EXPECT_EQ(metric("hf3fs_meta_namespaces"), "3");
  EXPECT_EQ(metric(R"(hf3fs_meta_ranks{namespace="m1"})"), "2");
  // A clean stop writes a snapshot (version 5: the namespaces and each kept answer's namespace); a
  // start from it gives every namespace and answer back alike. The lifecycle's counters in /stats
  // count since the process started, as without namespaces: a replayed journal counts its records
  // again (m2's deletion above), a snapshot holds none, so they are left out here.
  const auto without_counters = [](std::vector<std::string> seen) {
    // (Not std::regex: GCC 12 warns, falsely, inside libstdc++'s regex at -O1 with ASan.)
    for (const std::string_view name : {"evicted_keys", "deleted_keys", "reclaimed_keys", "reclaimed_allocated_pages",
                                        "reclaimed_orphaned_pages"}) {
      std::string field = "\"";
      field.append(name).append("\":");
      const std::size_t at = seen[0].find(field);
      if (at == std::string::npos) continue;
      const std::size_t from = at + field.size();
      const std::size_t to = seen[0].find_first_not_of("0123456789", from);
      seen[0].replace(from, to - from, "counted");
    }
    return seen;
  };
  EXPECT_THAT(before[2][0], HasSubstr(R"("deleted_keys":1)"));
  ASSERT_EQ(server_.terminate(), 0);
  server_.restart();
  for (std::size_t i = 0; i < spaces.size(); ++i) {
    EXPECT_EQ(without_counters(observe(spaces[i])), without_counters(before[i])) << spaces[i].name;
  }
  // --verify-data-dir counts the ranks, pages and keys of every namespace (1 + 2 + 1 ranks of 16, 8
  // and 4 pages; k, then k and j, then k).
  ASSERT_EQ(server_.terminate(), 0);
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr(": sound. "));
  EXPECT_THAT(verified.output, HasSubstr("\n4 ranks, 36 pages ("));
  EXPECT_THAT(verified.output, HasSubstr(", 4 keys in 3 namespaces, "));
  server_.restart();  // for the fixture's own stop
}

// A state beyond the restarted server's --max-* flags stops it (exit 2, saying which limit), whether
// the rank is in the snapshot or only in the journal; with the flags raised it starts.
TEST_F(DurableServerTest, AStateBeyondTheRestartedServersLimitsStopsIt) {
  initialize(0, 20);
  ASSERT_EQ(server_.terminate(), 0);  // a clean stop: rank 0 is in the snapshot
  const auto from_snapshot = ServerProcess::run_to_exit({"--port", "0", "--data-dir", data().string(), "--max-pages", "10"});
  EXPECT_EQ(from_snapshot.exit_code, 2) << from_snapshot.output;
  EXPECT_THAT(from_snapshot.output, HasSubstr("rank 0: num_pages 20 is above the maximum 10"));
  EXPECT_THAT(from_snapshot.output, Not(HasSubstr("listening")));
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string(), "--max-pages", "10"});
  EXPECT_EQ(verified.exit_code, 2) << verified.output;
  server_.restart();
  initialize(1, 20);
  server_.kill();  // rank 1 is only in the journal
  const auto from_journal = ServerProcess::run_to_exit(
      {"--port", "0", "--data-dir", data().string(), "--max-pages", "30", "--max-total-pages", "30"});
  EXPECT_EQ(from_journal.exit_code, 2) << from_journal.output;
  EXPECT_THAT(from_journal.output, HasSubstr("num_pages 20 would exceed the server's limit of pages"));
  server_.restart();
  EXPECT_EQ(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="1",state="free"})"), "20");
}

TEST_F(DurableServerTest, ACleanStopWritesASnapshotThatAloneRestoresTheState) {
  initialize(3, 8);
  ASSERT_EQ(allocate(3, "k").status, 200);
  ASSERT_EQ(confirm(3, "k", 0).status, 204);
  ASSERT_EQ(server_.terminate(), 0);
  EXPECT_EQ(files_like(data(), "snapshot-").size(), 1u);
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr("sound"));
  EXPECT_THAT(verified.output, HasSubstr("0 journal records replayed"));
  EXPECT_THAT(verified.output, HasSubstr("1 ranks, 8 pages (7 free, 0 allocated, 1 mapped, 0 orphaned, 0 draining), 1 keys"));
  server_.restart();
  EXPECT_EQ(exists("k").body, R"({"exists":[true]})");
}

TEST_F(DurableServerTest, ASecondServerOnTheSameDirExits2NamingThePid) {
  const auto second = ServerProcess::run_to_exit({"--port", "0", "--data-dir", data().string()});
  EXPECT_EQ(second.exit_code, 2);
  EXPECT_THAT(second.output, HasSubstr("in use by process " + std::to_string(server_.pid())));
}

TEST_F(DurableServerTest, ACorruptJournalStopsTheServerNamingTheFileAndOffset) {
  initialize(0, 4);
  ASSERT_EQ(allocate(0, "a").status, 200);
  ASSERT_EQ(allocate(0, "b").status, 200);
  server_.kill();
  const auto journal = files_like(data(), "journal-").back();
  std::string bytes = read_bytes(journal);
  bytes[16 + 3] ^= 0x01;  // the first record's header
  write_bytes(journal, bytes);
  const auto started = ServerProcess::run_to_exit({"--port", "0", "--data-dir", data().string()});
  EXPECT_EQ(started.exit_code, 2);
  EXPECT_THAT(started.output, HasSubstr(journal.string() + " at offset 16"));
  EXPECT_THAT(started.output, Not(HasSubstr("listening on")));
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 2);
  EXPECT_THAT(verified.output, HasSubstr("header checksum"));
}

TEST_F(DurableServerTest, ATornLastRecordIsCutAndLogged) {
  initialize(0, 4);
  const auto journal = files_like(data(), "journal-").back();
  const auto after_initialize = fs::file_size(journal);  // --fsync always: written before the answer
  ASSERT_EQ(allocate(0, "a").status, 200);
  server_.kill();
  const auto whole = fs::file_size(journal);
  fs::resize_file(journal, whole - 3);
  // What is cut is named by the last change kept and the bytes after it, by --verify-data-dir too.
  const std::string cut = "cut " + std::to_string(whole - 3 - after_initialize) + " bytes after change 1";
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr(data().string() + ": " + cut + " (the server will cut them)"));
  EXPECT_THAT(verified.output, Not(HasSubstr("sound")));
  const TempDir logs;
  const std::string log = logs.str() + "/stderr";
  ServerProcess again({"--data-dir", data().string()}, log);
  const std::string err = read_bytes(log);
  EXPECT_THAT(err, HasSubstr(cut + ": a torn record at journal " + journal.string()));
  const auto recovered_at = err.find("recovered 1 ranks, 0 keys from " + data().string() + " in ");
  const auto listening_at = err.find("hf3fs-meta-server: ready");
  ASSERT_NE(recovered_at, std::string::npos) << err;
  EXPECT_LT(recovered_at, listening_at);
  // The allocation whose record was torn never happened: page 0 is the pool's front again.
  EXPECT_EQ(raw_request(again.host(), again.port(), "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["b",""]]})").body,
            allocate_answer(0, "b", 0));
  EXPECT_EQ(again.terminate(), 0);
}

TEST_F(DurableServerTest, AlwaysSyncsBeforeAnsweringAndCountsIt) {
  initialize(0, 1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(allocate(0, std::string("t").append(std::to_string(t * 100 + i))).status, 200);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto records = std::stoull(*metric("hf3fs_meta_journal_records_total"));
  const auto fsyncs = std::stoull(*metric("hf3fs_meta_journal_fsyncs_total"));
  EXPECT_EQ(records, 161u);
  EXPECT_GE(fsyncs, 1u);
  EXPECT_LE(fsyncs, records);
}

class DurableSnapshotTest : public DurableServerTest {
 protected:
  DurableSnapshotTest() : DurableServerTest("everysec") {}
};

TEST_F(DurableSnapshotTest, SnapshotsFollowTheJournalsGrowthAndOldFilesGo) {
  server_.terminate();
  ServerProcess small({"--data-dir", data().string(), "--snapshot-after-bytes", "2000"});
  raw_request(small.host(), small.port(), "POST", "/rank/0/initialize", R"({"num_pages":1000})");
  for (int i = 0; i < 100; ++i) {
    raw_request(small.host(), small.port(), "POST", "/keys/batch_allocate",
                R"({"rank":0,"keys":[["key-)" + std::to_string(i) + R"(",""]]})");
  }
  // The snapshot thread looks every tenth of a second: bounded wait for its work.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (files_like(data(), "snapshot-").empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(files_like(data(), "snapshot-").empty());
  EXPECT_EQ(small.terminate(), 0);
  EXPECT_EQ(files_like(data(), "snapshot-").size(), 1u);
  EXPECT_EQ(files_like(data(), "journal-").size(), 1u);
  server_.restart();
  EXPECT_EQ(metric("hf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"allocated\"}"), "100");
}

TEST_F(DurableServerTest, AnInitializeWithAnotherNumPagesKeepsTheRankAndIsCounted) {
  initialize(0, 10);
  EXPECT_EQ(metric("hf3fs_meta_initialize_num_pages_mismatch_total"), "0");
  const auto r = post("/rank/0/initialize", R"({"num_pages":20})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"message":"Rank 0 initialized with 20 pages"})");  // vLLM's answer
  initialize(0, 10);  // the same count: not a mismatch
  EXPECT_EQ(metric("hf3fs_meta_initialize_num_pages_mismatch_total"), "1");
  EXPECT_EQ(metric("hf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"free\"}"), "10");
}

TEST_F(DurableServerTest, DeletingLockDoesNotLetASecondServerIn) {
  ASSERT_TRUE(fs::remove(data() / "LOCK"));
  const auto second = ServerProcess::run_to_exit({"--port", "0", "--data-dir", data().string()});
  EXPECT_EQ(second.exit_code, 2) << second.output;
  // LOCK is gone; the kernel's list of locks still names the holder.
  EXPECT_THAT(second.output, HasSubstr("in use by process " + std::to_string(server_.pid()) + " ("));
  EXPECT_THAT(second.output, HasSubstr("which names it, was deleted"));
  EXPECT_THAT(second.output, Not(HasSubstr("listening")));
  EXPECT_EQ(get("/healthz").status, 200);  // the first goes on
}

TEST_F(DurableServerTest, StartupRemovesWhatAnInterruptedSnapshotLeftAndSaysSo) {
  initialize(0, 4);
  server_.kill();
  const fs::path left = data() / "snapshot-00000000000000000001.snap.tmp";
  write_bytes(left, "half a snapshot");
  const TempDir logs;
  const std::string log = logs.str() + "/stderr";
  ServerProcess again({"--data-dir", data().string()}, log);
  EXPECT_THAT(read_bytes(log), HasSubstr("removed " + left.string() + ", left by an interrupted snapshot"));
  EXPECT_FALSE(fs::exists(left));
  EXPECT_THAT(raw_request(again.host(), again.port(), "GET", "/metrics").body,
              HasSubstr(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="free"} 4)"));
  EXPECT_EQ(again.terminate(), 0);
}

// The durability metrics (docs/protocol.md, "Metrics"), each against what the test did.
TEST_F(DurableServerTest, TheDurabilityMetricsCountWhatHappened) {
  initialize(0, 8);
  ASSERT_EQ(allocate(0, "a").status, 200);
  const auto journal = files_like(data(), "journal-").back();
  EXPECT_EQ(metric("hf3fs_meta_journal_records_total"), "2");
  // Every record's bytes, the file's header not counted.
  EXPECT_EQ(metric("hf3fs_meta_journal_bytes_total"), std::to_string(fs::file_size(journal) - 16));
  const auto fsyncs = std::stoull(*metric("hf3fs_meta_journal_fsyncs_total"));
  EXPECT_GE(fsyncs, 1u);  // always: a sync before each answer, possibly shared
  EXPECT_LE(fsyncs, 2u);
  const double fsync_total = std::stod(*metric("hf3fs_meta_journal_fsync_seconds_total"));
  const double fsync_max = std::stod(*metric("hf3fs_meta_journal_fsync_seconds_max"));
  EXPECT_GT(fsync_max, 0);
  EXPECT_LE(fsync_max, fsync_total);
  EXPECT_EQ(metric("hf3fs_meta_snapshots_total"), "0");
  EXPECT_EQ(metric("hf3fs_meta_disk_errors_total"), "0");
  EXPECT_EQ(metric("hf3fs_meta_disk_failed"), "0");
  ASSERT_EQ(server_.terminate(), 0);  // the shutdown snapshot
  server_.restart();
  EXPECT_GT(std::stod(*metric("hf3fs_meta_recovery_seconds")), 0);
  EXPECT_EQ(metric("hf3fs_meta_journal_records_total"), "0");  // counted since this process started
}

// A scrape's families: each family's HELP and TYPE lines, then the sorted shapes of its samples (the
// name and its labels' names; the le bounds with their values). Other comment lines are skipped.
std::vector<std::string> families_of(std::istream& text) {
  std::vector<std::string> out;
  std::set<std::string> shapes;
  const auto flush = [&] {
    out.insert(out.end(), shapes.begin(), shapes.end());
    shapes.clear();
  };
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("# HELP ", 0) == 0) flush();
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      out.push_back(line);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string shape;
    const std::string series = line.substr(0, line.rfind(' '));
    for (std::size_t i = 0; i < series.size(); ++i) {
      if (series.compare(i, 2, "=\"") != 0) {
        shape += series[i];
        continue;
      }
      const std::size_t close = series.find('"', i + 2);
      const std::size_t label = shape.find_last_of("{,") + 1;  // the label's name, before its value
      if (shape.compare(label, std::string::npos, "le") == 0) shape += series.substr(i, close + 1 - i);
      i = close;
    }
    shapes.insert(shape);
  }
  flush();
  return out;
}

// The families, their HELP and TYPE lines and their labels are today's (tests/server/metrics_families.txt,
// taken from the server before /metrics was rendered by prometheus-cpp).
TEST_F(DurableServerTest, MetricsKeepTheirFamiliesHelpLinesAndLabels) {
  initialize(0, 8);
  ASSERT_EQ(allocate(0, "a").status, 200);
  const auto scrape = get("/metrics");
  ASSERT_EQ(scrape.status, 200);
  std::istringstream got(scrape.body);
  std::ifstream expected(HF3FS_META_METRICS_FAMILIES);
  ASSERT_TRUE(expected) << HF3FS_META_METRICS_FAMILIES;
  const auto want = families_of(expected);
  EXPECT_GT(want.size(), 100u);  // the file was read
  EXPECT_EQ(families_of(got), want) << scrape.body;
}

TEST_F(DurableServerTest, SigintWritesTheShutdownSnapshotToo) {
  initialize(0, 8);
  ASSERT_EQ(allocate(0, "a").status, 200);
  ASSERT_EQ(confirm(0, "a", 0).status, 204);
  EXPECT_EQ(server_.signal_and_wait(SIGINT), 0);
  EXPECT_EQ(files_like(data(), "snapshot-").size(), 1u);
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", data().string()});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr(": sound. snapshot at change 3, 0 journal records replayed"));
  server_.restart();
  EXPECT_EQ(exists("a").body, R"({"exists":[true]})");
}

// --fsync no: never an fdatasync for a record, and a process crash loses nothing (the records were
// written to the OS before each answer; only an OS crash or power loss can lose the last ones).
class DurableNoFsyncTest : public DurableServerTest {
 protected:
  DurableNoFsyncTest() : DurableServerTest("no") {}
};

TEST_F(DurableNoFsyncTest, NeverSyncsAndLosesNothingToAProcessCrash) {
  initialize(0, 8);
  ASSERT_EQ(allocate(0, "a").status, 200);
  ASSERT_EQ(confirm(0, "a", 0).status, 204);
  EXPECT_EQ(metric("hf3fs_meta_journal_records_total"), "3");
  EXPECT_EQ(metric("hf3fs_meta_journal_fsyncs_total"), "0");
  server_.restart();  // SIGKILL, then the same arguments
  EXPECT_EQ(exists("a").body, R"({"exists":[true]})");
  EXPECT_EQ(allocate(0, "b").body, allocate_answer(0, "b", 1));
}

// A disk that fails on demand (a disk_error fault rule, --enable-fault-injection), so that this runs
// everywhere: a change answered 503 is not applied, nor visible, while degraded or after; once the
// disk is back a repeat of its request id is applied once, as the first would have been.
class DurableDiskFaultTest : protected DataDir,
                             public ServerTestBase,
                             public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {
 protected:
  DurableDiskFaultTest()
      : ServerTestBase({"--threads", "2", "--data-dir", dir_.str() + "/data", "--fsync", std::get<0>(GetParam()),
                        "--enable-fault-injection"}) {}
  fs::path data() const { return dir_.path() / "data"; }
  // The next journal write (or sync) fails with ENOSPC.
  void fail_next(int times = 1) {
    const auto r = post("/_faults", R"({"disk_error":"ENOSPC","disk_op":")" + std::get<1>(GetParam()) +
                                        R"(","times":)" + std::to_string(times) + "}");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // While failed, the server retries a snapshot every second; one that succeeds ends it. Bounded.
  void wait_until_healthy() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (get("/healthz").body != R"({"status":"ok"})" && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(get("/healthz").body, R"({"status":"ok"})");
  }
  std::optional<std::string> pages(std::string_view state) {
    return metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state=")" + std::string(state) + R"("})");
  }
};

TEST_P(DurableDiskFaultTest, AnAllocateAnswered503IsNotAppliedAndItsRepeatIsAppliedOnce) {
  initialize(0, 16);
  ASSERT_EQ(allocate(0, "a").body, allocate_answer(0, "a", 0));
  fail_next();
  const Headers id{{"X-Request-Id", "b-1"}};
  const auto refused = allocate(0, "b", id);
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr(std::strerror(ENOSPC)));
  EXPECT_THAT(refused.body, HasSubstr("not acknowledged, and rolled back"));
  EXPECT_EQ(pages("allocated"), "1");  // "a"'s only, at once (the answer came after the rollback)
  EXPECT_EQ(metric("hf3fs_meta_disk_errors_total"), "1");
  wait_until_healthy();
  EXPECT_EQ(pages("allocated"), "1");
  EXPECT_GE(std::stoull(*metric("hf3fs_meta_snapshots_total")), 1u);
  EXPECT_EQ(allocate(0, "b", id).body, allocate_answer(0, "b", 1));  // the page the first would have had
  EXPECT_EQ(allocate(0, "b", id).body, allocate_answer(0, "b", 1));  // and once
  EXPECT_EQ(pages("allocated"), "2");
  server_.restart();  // SIGKILL, then the same arguments
  EXPECT_EQ(allocate(0, "b", id).body, allocate_answer(0, "b", 1));
  EXPECT_EQ(allocate(0, "c").body, allocate_answer(0, "c", 2));
}

TEST_P(DurableDiskFaultTest, AConfirmAnswered503IsNotVisibleWhileDegradedNorAfter) {
  initialize(0, 4);
  ASSERT_EQ(allocate(0, "k").body, allocate_answer(0, "k", 0));
  fail_next();
  const auto refused = post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})");
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  wait_until_healthy();
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  server_.restart();
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})").status, 204);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[true]})");
}

// Under load: whatever the failure catches, exactly the allocations answered 200 hold a page, now,
// after the rollback and after a restart; no page was answered twice.
TEST_P(DurableDiskFaultTest, UnderLoadExactlyTheAcknowledgedAllocationsHoldPages) {
  initialize(0, 1000);
  std::atomic<int> acknowledged{0};
  std::mutex mutex;
  std::set<std::string> given;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const auto r = allocate(0, std::string("t").append(std::to_string(t * 100 + i)));
        if (r.status != 200) continue;
        ++acknowledged;
        std::lock_guard lock(mutex);
        EXPECT_TRUE(given.insert(r.body.substr(r.body.rfind(','))).second) << r.body;
      }
    });
  }
  fail_next(3);
  for (auto& t : threads) t.join();
  wait_until_healthy();
  EXPECT_EQ(pages("allocated"), std::to_string(acknowledged.load()));
  server_.restart();
  EXPECT_EQ(pages("allocated"), std::to_string(acknowledged.load()));
}

TEST_P(DurableDiskFaultTest, AFailedShutdownSnapshotLosesNothing) {
  initialize(0, 4);
  ASSERT_EQ(allocate(0, "a").status, 200);
  ASSERT_EQ(post("/_faults", R"({"disk_error":"EIO","disk_op":"snapshot_write"})").status, 200);
  EXPECT_EQ(server_.terminate(), 0);
  EXPECT_TRUE(files_like(data(), "snapshot-").empty());  // neither the snapshot nor its .tmp
  server_.restart();
  EXPECT_EQ(pages("allocated"), "1");
}

TEST_P(DurableDiskFaultTest, BadDiskRulesAre400) {
  EXPECT_THAT(post("/_faults", R"({"disk_error":"EPERM","disk_op":"journal_write"})").body,
              HasSubstr("disk_error must be"));
  EXPECT_THAT(post("/_faults", R"({"disk_error":"EIO"})").body, HasSubstr("disk_error and disk_op go together"));
  EXPECT_THAT(post("/_faults", R"({"disk_error":"EIO","disk_op":"read"})").body, HasSubstr("disk_op must be"));
  EXPECT_THAT(post("/_faults", R"({"disk_error":"EIO","disk_op":"journal_write","path":"/x"})").body,
              HasSubstr("takes disk_op and times only"));
  // DELETE ends a pending one: the next change is acknowledged.
  ASSERT_EQ(post("/_faults", R"({"disk_error":"EIO","disk_op":")" + std::get<1>(GetParam()) + R"("})").status, 200);
  ASSERT_EQ(send("DELETE", "/_faults").status, 200);
  EXPECT_EQ(post("/rank/0/initialize", R"({"num_pages":4})").status, 200);
  EXPECT_EQ(metric("hf3fs_meta_disk_errors_total"), "0");
}

INSTANTIATE_TEST_SUITE_P(
    FsyncAndOp, DurableDiskFaultTest,
    ::testing::Values(std::tuple<std::string, std::string>{"always", "journal_sync"},
                      std::tuple<std::string, std::string>{"always", "journal_write"},
                      std::tuple<std::string, std::string>{"everysec", "journal_write"},
                      std::tuple<std::string, std::string>{"no", "journal_write"}),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// A disk that fills up: 503 for state changes, reads go on, nothing acknowledged is lost, nothing
// answered 503 is applied, and once space is back (a snapshot succeeds) changes are accepted again.
// The real-disk check of what DurableDiskFaultTest injects. Needs a tiny tmpfs: root only; ctest runs
// it on its own (server_durable_tmpfs) and reports it skipped elsewhere.
TEST(DurableDiskTest, AFullDiskRefusesChangesAndLosesNothingAcknowledged) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tiny tmpfs needs root";
  TempDir mount_point;
  if (::mount("tmpfs", mount_point.path().c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point.str()};
  const fs::path data = mount_point.path() / "data";
  std::vector<std::string> acknowledged;
  std::string refused_key;  // its allocate or its confirm was answered 503
  {
    ServerProcess server({"--data-dir", data.string(), "--fsync", "always"});
    auto post = [&](std::string_view target, std::string_view body) {
      return raw_request(server.host(), server.port(), "POST", target, body);
    };
    ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":1000})").status, 200);
    // Fill the disk but for a few KiB.
    write_bytes(mount_point.path() / "filler", std::string(200 * 1024, 'x'));
    const std::string long_key(1000, 'k');
    int refused = 0;
    for (int i = 0; i < 200 && refused == 0; ++i) {
      const std::string key = std::string(long_key).append(std::to_string(i));
      const auto a = post("/keys/batch_allocate", R"({"rank":0,"keys":[[")" + key + R"(",""]]})");
      if (a.status == 503) {
        ++refused;
        refused_key = key;
        EXPECT_THAT(a.body, HasSubstr("not acknowledged"));
        break;
      }
      ASSERT_EQ(a.status, 200);
      const auto page = a.body.substr(a.body.rfind(',') + 1, a.body.find(']') - a.body.rfind(',') - 1);
      const auto c = post("/keys/confirm_write", R"({"rank":0,"confirmations":[[")" + key + R"(",)" + page + "]]}");
      if (c.status == 503) {
        ++refused;
        refused_key = key;
        break;
      }
      ASSERT_EQ(c.status, 204);
      acknowledged.push_back(key);
    }
    ASSERT_EQ(refused, 1) << "the disk never filled";
    ASSERT_FALSE(acknowledged.empty());
    const auto next = post("/keys/batch_allocate", R"({"rank":0,"keys":[["x",""]]})");
    EXPECT_EQ(next.status, 503);
    EXPECT_THAT(next.body, HasSubstr("nothing applied"));
    EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[")" + acknowledged.front() + R"("]})").body,
              R"({"exists":[true]})");
    EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[")" + refused_key + R"("]})").body, R"({"exists":[false]})");
    // Rolled back: of the refused key, not even its allocated page is left.
    EXPECT_THAT(raw_request(server.host(), server.port(), "GET", "/metrics").body,
                HasSubstr(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"} 0)"));
    const auto health = raw_request(server.host(), server.port(), "GET", "/healthz");
    EXPECT_THAT(health.body, HasSubstr("degraded"));
    EXPECT_THAT(raw_request(server.host(), server.port(), "GET", "/metrics").body,
                HasSubstr("hf3fs_meta_disk_failed 1"));
    // Space again: the next snapshot lets the journal write.
    fs::remove(mount_point.path() / "filler");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      status = post("/keys/batch_allocate", R"({"rank":0,"keys":[["after",""]]})").status;
      if (status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(status, 200);
    server.kill();
  }
  ServerProcess again({"--data-dir", data.string()});
  for (const auto& key : acknowledged) {
    EXPECT_EQ(raw_request(again.host(), again.port(), "POST", "/keys/batch_exists", R"({"keys":[")" + key + R"("]})").body,
              R"({"exists":[true]})");
  }
  EXPECT_EQ(raw_request(again.host(), again.port(), "POST", "/keys/batch_exists", R"({"keys":[")" + refused_key + R"("]})").body,
            R"({"exists":[false]})");
  // Only "after" is allocated and not confirmed.
  EXPECT_THAT(raw_request(again.host(), again.port(), "GET", "/metrics").body,
              HasSubstr(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"} 1)"));
  EXPECT_EQ(again.terminate(), 0);
}

}  // namespace
}  // namespace hf3fs_meta::testing
