// Request-id deduplication of batch_allocate and confirm_write (X-Request-Id).
#include <chrono>
#include <thread>
#include <vector>

#include "server/server_test_support.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::Optional;

class ServerDedupTest : public ServerTestBase {
 protected:
  ServerDedupTest() : ServerTestBase({"--threads", "2", "--enable-fault-injection"}) {}
  static Headers id(std::string value) { return {{"X-Request-Id", std::move(value)}}; }
  // Until the server holds one request id (the first request's claim, taken as it arrives, before
  // its delay): the event that orders a second request after it, instead of a sleep.
  void await_claim() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (metric("hf3fs_meta_request_id_cache_entries") != "1") {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the first request never reached the server";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

TEST_F(ServerDedupTest, RepeatGetsTheSameAnswerWithoutApplyingAgain) {
  initialize(0, 10);
  auto first = allocate(0, "k1", id("req-1"));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body, allocate_answer(0, "k1", 0));
  auto repeat = allocate(0, "k1", id("req-1"));
  EXPECT_EQ(repeat.status, 200);
  EXPECT_EQ(repeat.body, first.body);
  EXPECT_EQ(repeat.header("content-type"), first.header("content-type"));
  // The header names the window in which a repeat gets the same answer.
  EXPECT_THAT(repeat.header("x-request-id-dedup"), Optional(std::string("60000")));
  // Only one page was taken: the next key gets page 1.
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="free"})"), Optional(std::string("8")));
}

TEST_F(ServerDedupTest, WithoutAnIdEveryRequestIsApplied) {
  initialize(0, 10);
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 0));
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 1));
  EXPECT_EQ(allocate(0, "k1", id("")).body, allocate_answer(0, "k1", 2));
}

TEST_F(ServerDedupTest, SameIdWithAnotherBodyIs400) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).status, 200);
  auto r = allocate(0, "k2", id("req-1"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, R"({"detail":"X-Request-Id req-1 was already used with a different body"})");
  EXPECT_EQ(allocate(0, "k3").body, allocate_answer(0, "k3", 1));
}

TEST_F(ServerDedupTest, TheKeyIsRouteAndId) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("shared")).status, 200);
  auto confirm = post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k1",0]]})", id("shared"));
  EXPECT_EQ(confirm.status, 204);
  auto repeat = post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k1",0]]})", id("shared"));
  EXPECT_EQ(repeat.status, 204);
  EXPECT_EQ(repeat.body, "");
  EXPECT_FALSE(repeat.header("content-length"));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("1")));
}

TEST_F(ServerDedupTest, OtherRoutesAreNotDeduplicated) {
  initialize(0, 10);
  ASSERT_EQ(post("/keys/batch_exists", R"({"keys":["a"]})", id("x")).status, 200);
  ASSERT_EQ(post("/keys/batch_exists", R"({"keys":["a"]})", id("x")).status, 200);
  ASSERT_EQ(post("/keys/batch_exists", R"({"keys":["b"]})", id("x")).status, 200);
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("0")));
}

TEST_F(ServerDedupTest, ErrorsAreNotCachedSoARepeatAfterInitializeIsApplied) {
  auto failed = allocate(5, "k1", id("req-1"));
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(failed.body, R"({"detail":"Allocation failed: Rank 5 not initialized"})");
  initialize(5, 10);
  auto retried = allocate(5, "k1", id("req-1"));
  EXPECT_EQ(retried.status, 200);
  EXPECT_EQ(retried.body, allocate_answer(5, "k1", 0));
}

// /clear took every page back: a repeat of an id from before it is 409, neither the old pages
// (page 0 is "other"'s now) nor executed afresh.
TEST_F(ServerDedupTest, ARepeatAfterClearIs409) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/clear", "").status, 204);
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "other").body, allocate_answer(0, "other", 0));
  EXPECT_EQ(allocate(0, "k1", id("req-1")).status, 409);
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));  // nothing was taken for it
  // An id whose answer took no page still stands.
  ASSERT_EQ(post("/clear", "").status, 204);
  EXPECT_EQ(allocate(0, "k1", id("req-2")).status, 500);  // no rank: an error, not kept
  initialize(0, 1);
  ASSERT_EQ(allocate(0, "a").body, allocate_answer(0, "a", 0));
  const auto none = allocate(0, "b", id("req-3"));
  ASSERT_EQ(none.body, allocate_answer(0, "b", -1));
  ASSERT_EQ(post("/clear", "").status, 204);
  EXPECT_EQ(allocate(0, "b", id("req-3")).body, none.body);
}

TEST_F(ServerDedupTest, ForgetStateEmptiesTheCache) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/_faults", R"({"forget_state":true})").status, 200);
  EXPECT_EQ(allocate(0, "k1", id("req-1")).status, 500);
}

TEST_F(ServerDedupTest, RepeatWhileTheFirstIsInFlightWaitsForItsAnswer) {
  initialize(0, 10);
  // The delay only has to outlast the wait below for the first request's claim and the second's
  // trip: wide, since two loaded cores may stall either.
  ASSERT_EQ(post("/_faults", R"({"path":"/keys/batch_allocate","delay_ms":2000})").status, 200);
  const std::string body = R"({"rank":0,"keys":[["k1",""]]})";
  RawConnection first(server_.host(), server_.port());
  RawConnection second(server_.host(), server_.port());
  first.send(format_request("POST", "/keys/batch_allocate", first.host_header(), body, id("slow")));
  await_claim();
  second.send(format_request("POST", "/keys/batch_allocate", second.host_header(), body, id("slow")));
  auto a = first.read_response();
  auto b = second.read_response();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, allocate_answer(0, "k1", 0));
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(b.body, a.body);
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("1")));
}

TEST_F(ServerDedupTest, ADifferentBodyWhileTheFirstIsInFlightIs400AtOnce) {
  initialize(0, 10);
  ASSERT_EQ(post("/_faults", R"({"path":"/keys/batch_allocate","delay_ms":2000})").status, 200);
  RawConnection first(server_.host(), server_.port());
  first.send(format_request("POST", "/keys/batch_allocate", first.host_header(), R"({"rank":0,"keys":[["k1",""]]})",
                            id("slow")));
  await_claim();
  auto conflicting = allocate(0, "k2", id("slow"));
  EXPECT_EQ(conflicting.status, 400);
  EXPECT_EQ(first.read_response().body, allocate_answer(0, "k1", 0));
}

TEST_F(ServerDedupTest, ARetryAfterTheConnectionDroppedGetsTheAnswerThatWasLost) {
  initialize(0, 10);
  ASSERT_EQ(post("/_faults", R"({"close_connection":"after"})").status, 200);
  RawConnection lost(server_.host(), server_.port());
  lost.send(format_request("POST", "/keys/batch_allocate", lost.host_header(), R"({"rank":0,"keys":[["k1",""]]})",
                           id("retry-me")));
  EXPECT_TRUE(lost.peer_closed(std::chrono::seconds(5)));
  EXPECT_EQ(allocate(0, "k1", id("retry-me")).body, allocate_answer(0, "k1", 0));
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
}

TEST_F(ServerDedupTest, ConcurrentRepeatsOfOneIdApplyOnce) {
  initialize(0, 100);
  constexpr int kClients = 8;
  std::vector<RawResponse> answers(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] { answers[i] = allocate(0, "k1", id("same")); });
  }
  for (auto& client : clients) client.join();
  for (const auto& answer : answers) {
    EXPECT_EQ(answer.status, 200);
    EXPECT_EQ(answer.body, allocate_answer(0, "k1", 0));
  }
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::to_string(kClients - 1)));
}

TEST_F(ServerDedupTest, IdsMustBeShortVisibleAscii) {
  initialize(0, 10);
  const std::string expected = R"({"detail":"X-Request-Id must be at most 128 visible ASCII characters"})";
  auto too_long = allocate(0, "k1", id(std::string(129, 'x')));
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.body, expected);
  // Raw bytes are never echoed: the answer stays valid JSON (and valid UTF-8).
  auto raw = allocate(0, "k1", id("caf\xe9\xff\"x"));
  EXPECT_EQ(raw.status, 400);
  EXPECT_EQ(raw.body, expected);
  auto confirm = post("/keys/confirm_write", R"({"rank":0,"confirmations":[]})", id("tab\tinside"));
  EXPECT_EQ(confirm.status, 400);
  // Nothing was applied: the first page is still free.
  EXPECT_EQ(allocate(0, "k1", id(std::string(128, 'x'))).body, allocate_answer(0, "k1", 0));
  // A reused id is echoed in the 400, and only ever as the visible ASCII it is.
  auto reused = allocate(0, "k2", id(std::string(128, 'x')));
  EXPECT_EQ(reused.status, 400);
  EXPECT_EQ(reused.body, R"({"detail":"X-Request-Id )" + std::string(128, 'x') +
                             R"( was already used with a different body"})");
}

// The attack of the issue: allocates of many long keys with unique ids. What the cache keeps is
// the pages (4 bytes each) and a small entry, never the rendered answer; measured by the server's
// own accounting.
TEST_F(ServerDedupTest, KeptAnswersWeighTheirPagesNotTheirKeys) {
  initialize(0, 100000);
  constexpr int kRequests = 4;
  constexpr int kKeys = 10000;
  for (int r = 0; r < kRequests; ++r) {
    std::string body = R"({"rank":0,"keys":[)";
    for (int k = 0; k < kKeys; ++k) {
      if (k) body += ',';
      std::string key = std::to_string(r) + "-" + std::to_string(k) + "-";
      key.resize(1000, 'k');  // under --max-key-bytes (1024)
      body += "[\"" + key + "\",\"\"]";
    }
    body += "]}";
    auto answer = post("/keys/batch_allocate", body, id("big-" + std::to_string(r)));
    ASSERT_EQ(answer.status, 200);
    ASSERT_GT(answer.body.size(), std::size_t{kKeys} * 1000);
  }
  const auto bytes = std::stoull(metric("hf3fs_meta_request_id_cache_bytes").value_or("0"));
  EXPECT_GE(bytes, std::uint64_t{kRequests} * kKeys * 4);
  EXPECT_LE(bytes, std::uint64_t{kRequests} * (kKeys * 4 + 1024));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_entries"), Optional(std::to_string(kRequests)));
}

class ServerDedupBoundsTest : public ServerTestBase {
 protected:
  // Room for three one-key allocate answers (each entry weighs about 256 bytes plus its id, and
  // reserves a page per '[' of its body until answered). The window is far longer than the test:
  // nothing here may leave it (the window's end is tested with a fake clock in dedup_cache_test).
  // The one namespace may hold all of it (by default it would hold a quarter).
  ServerDedupBoundsTest()
      : ServerTestBase({"--threads", "2", "--dedup-max-bytes", "1000", "--namespace-dedup-max-bytes", "1000",
                        "--dedup-ttl-ms", "600000"}) {}
};

// A namespace's share: a quarter of the budget by default, room for two one-key answers here; a
// namespace that fills it is refused while another still keeps its answers.
class ServerDedupShareTest : public ServerTestBase {
 protected:
  ServerDedupShareTest() : ServerTestBase({"--threads", "2", "--dedup-max-bytes", "2400", "--dedup-ttl-ms", "600000"}) {}
};

TEST_F(ServerDedupShareTest, ANamespaceThatFillsItsShareIsRefusedAndTheOthersAreNot) {
  initialize(0, 10);
  for (const char* name : {"A", "B"}) ASSERT_EQ(allocate(0, name, {{"X-Request-Id", name}}).status, 200);
  auto refused = allocate(0, "c", {{"X-Request-Id", "C"}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.body,
            R"({"detail":"Request-id deduplication is full for this namespace: every answer it keeps is inside )"
            R"(its 600000 ms window; nothing was applied, retry later"})");
  EXPECT_TRUE(refused.header("retry-after"));
  const Headers b{{"X-Hf3fs-Namespace", "model-b"}};
  ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":10})", b).status, 200);
  Headers b_id = b;
  b_id.emplace_back("X-Request-Id", "C");
  const auto other = post("/keys/batch_allocate", R"({"rank":0,"keys":[["c",""]]})", b_id);
  EXPECT_EQ(other.status, 200) << other.body;
  // And its answer is kept: a repeat gets the same page, applied once.
  EXPECT_EQ(post("/keys/batch_allocate", R"({"rank":0,"keys":[["c",""]]})", b_id).body, other.body);
  // The refused one took nothing: the default namespace's next key gets the next page.
  EXPECT_EQ(allocate(0, "d").body, allocate_answer(0, "d", 2));
}

// An answer larger than a namespace's share, though not than the whole budget, could never be kept:
// 413 at once naming the share (600 bytes: a quarter of 2400), nothing applied.
TEST_F(ServerDedupShareTest, AnAnswerLargerThanTheShareIs413NamingIt) {
  initialize(0, 200);
  std::string body = R"({"rank":0,"keys":[)";
  for (int k = 0; k < 100; ++k) body += (k ? ",[\"k" : "[\"k") + std::to_string(k) + "\",\"\"]";
  body += "]}";
  const auto refused = post("/keys/batch_allocate", body, {{"X-Request-Id", "big"}});
  EXPECT_EQ(refused.status, 413);
  EXPECT_EQ(refused.body,
            R"({"detail":"the answer to this X-Request-Id could never fit a namespace's share of request-id )"
            R"(memory (600 bytes); nothing was applied: send it without X-Request-Id or in smaller batches"})");
  EXPECT_EQ(allocate(0, "k0").body, allocate_answer(0, "k0", 0));  // nothing was taken
}

TEST_F(ServerDedupBoundsTest, AFullBudgetRefusesNewIdsWith503AndForgetsNoPromise) {
  initialize(0, 10);
  for (const char* name : {"A", "B", "C"}) {
    auto r = allocate(0, name, {{"X-Request-Id", name}});
    ASSERT_EQ(r.status, 200);
    EXPECT_THAT(r.header("x-request-id-dedup"), Optional(std::string("600000")));
  }
  auto refused = allocate(0, "d", {{"X-Request-Id", "D"}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.body,
            R"({"detail":"Request-id deduplication is full: every kept answer is inside its 600000 ms window; )"
            R"(nothing was applied, retry later"})");
  // Until the oldest answer leaves its window (--dedup-ttl-ms 600000): the window the server keeps.
  ASSERT_TRUE(refused.header("retry-after"));
  EXPECT_GE(std::stoi(*refused.header("retry-after")), 1);
  EXPECT_LE(std::stoi(*refused.header("retry-after")), 600);
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_refused_total"), Optional(std::string("1")));
  EXPECT_LE(std::stoull(metric("hf3fs_meta_request_id_cache_bytes").value_or("0")), 1000u);
  // Nothing applied for D, and every promise kept: A, B, C still get their pages.
  EXPECT_EQ(allocate(0, "A", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "A", 0));
  EXPECT_EQ(allocate(0, "C", {{"X-Request-Id", "C"}}).body, allocate_answer(0, "C", 2));
  // Without an id there is nothing to promise: applied.
  EXPECT_EQ(allocate(0, "e").body, allocate_answer(0, "e", 3));
}

// An answer larger than the whole budget can never be kept: 413 at once, naming the flag, nothing
// applied (not the 503 of a budget full for now, which a client would retry forever).
TEST_F(ServerDedupBoundsTest, AnAnswerThatCouldNeverFitIs413AndNothingIsApplied) {
  initialize(0, 300);
  std::string body = R"({"rank":0,"keys":[)";
  for (int k = 0; k < 200; ++k) body += (k ? ",[\"k" : "[\"k") + std::to_string(k) + "\",\"\"]";
  body += "]}";
  auto refused = post("/keys/batch_allocate", body, {{"X-Request-Id", "huge"}});
  EXPECT_EQ(refused.status, 413);
  EXPECT_EQ(refused.body,
            R"({"detail":"the answer to this X-Request-Id could never fit --dedup-max-bytes (1000 bytes); nothing )"
            R"(was applied: send it without X-Request-Id or in smaller batches"})");
  EXPECT_FALSE(refused.header("retry-after"));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_refused_total"), Optional(std::string("0")));
  EXPECT_EQ(allocate(0, "k0").body, allocate_answer(0, "k0", 0));  // nothing was taken
  // The budget is untouched: small answers are still kept.
  EXPECT_EQ(allocate(0, "A", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "A", 1));
  EXPECT_EQ(allocate(0, "A", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "A", 1));
  // Without an id it is applied.
  EXPECT_EQ(post("/keys/batch_allocate", body).status, 200);
}

// A repeated id never hands out a page that was taken back since its first answer: the rank was
// dropped and initialized again, and the page now belongs to another key.
TEST_F(ServerDedupTest, ARepeatWhosePagesWereDroppedIs409NeverTheOldPages) {
  initialize(0, 4);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/rank/0/drop", "").status, 200);
  initialize(0, 4);
  ASSERT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 0));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k2",0]]})").status, 204);
  auto repeat = allocate(0, "k1", id("req-1"));
  EXPECT_EQ(repeat.status, 409);
  EXPECT_EQ(repeat.body,
            R"({"detail":"X-Request-Id req-1: the pages of its answer were taken back since (reclaimed, dropped, )"
            R"(deleted, evicted or cleared); allocate again under a new request id, on rank 0"})");
  // Not applied again either: the next key gets the next page, and "k2" keeps page 0.
  EXPECT_EQ(allocate(0, "k3").body, allocate_answer(0, "k3", 1));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="mapped"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"})"), Optional(std::string("1")));
  // Still 409 on the rank being dropped again with nothing on it.
  ASSERT_EQ(post("/rank/0/drop", "").status, 200);
  EXPECT_EQ(allocate(0, "k1", id("req-1")).status, 409);
}

// Deleted: the same. A page still mapped to its key (confirmed since) is still the key's: answered.
TEST_F(ServerDedupTest, ARepeatIsAnsweredWhileItsPagesAreTheKeysAnd409OnceDeleted) {
  initialize(0, 4);
  const auto first = allocate(0, "k1", id("req-1"));
  ASSERT_EQ(first.body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k1",0]]})").status, 204);
  EXPECT_EQ(allocate(0, "k1", id("req-1")).body, first.body);  // mapped to k1: still its
  ASSERT_EQ(post("/keys/delete", R"({"keys":["k1"]})").body, R"({"deleted":[true]})");
  EXPECT_EQ(allocate(0, "k1", id("req-1")).status, 409);
}

// Constructed before ServerTestBase, which starts the server on it.
struct DedupDataDir {
  TempDir dir_;
};

// Through the real server: request ids survive a clean restart (SIGTERM, the
// snapshot) as they survive in memory. Each answer weighs 8 kB as the cache keeps it, its record
// 3 MB: the snapshot used to keep whole records within --dedup-max-bytes, so it kept one of five.
class ServerDedupRestartTest : protected DedupDataDir, public ServerTestBase {
 protected:
  ServerDedupRestartTest()
      : ServerTestBase({"--threads", "2", "--data-dir", dir_.str() + "/data", "--dedup-max-bytes",
                        std::to_string(4 << 20), "--max-key-bytes", "2048"}) {}  // 1.5 kB keys
};

TEST_F(ServerDedupRestartTest, EveryIdKeptInMemoryIsKeptAcrossACleanRestart) {
  constexpr int kRequests = 5;
  constexpr int kKeys = 2000;
  initialize(0, kRequests * kKeys + 10);
  std::vector<std::string> bodies;
  std::vector<std::string> answers;
  for (int r = 0; r < kRequests; ++r) {
    std::string body = R"({"rank":0,"keys":[)";
    for (int k = 0; k < kKeys; ++k) {
      std::string key = std::to_string(r) + "-" + std::to_string(k) + "-";
      key.resize(1500, 'k');
      body += (k ? ",[\"" : "[\"") + key + "\",\"\"]";
    }
    body += "]}";
    auto answer = post("/keys/batch_allocate", body, {{"X-Request-Id", "big-" + std::to_string(r)}});
    ASSERT_EQ(answer.status, 200);
    bodies.push_back(std::move(body));
    answers.push_back(std::move(answer.body));
  }
  ASSERT_EQ(server_.terminate(), 0);  // SIGTERM: the clean-shutdown snapshot
  server_.restart();
  for (int r = 0; r < kRequests; ++r) {
    auto repeat = post("/keys/batch_allocate", bodies[r], {{"X-Request-Id", "big-" + std::to_string(r)}});
    ASSERT_EQ(repeat.status, 200) << r;
    EXPECT_EQ(repeat.body, answers[r]) << r;
  }
  // Every repeat answered from the cache, nothing applied twice.
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::to_string(kRequests)));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"})"),
              Optional(std::to_string(kRequests * kKeys)));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="free"})"), Optional(std::string("10")));
}

class ServerNoDedupTest : public ServerTestBase {
 protected:
  ServerNoDedupTest() : ServerTestBase({"--threads", "2", "--dedup-max-bytes", "0"}) {}
};

TEST_F(ServerNoDedupTest, ZeroBytesTurnsDeduplicationAndItsHeaderOff) {
  initialize(0, 10);
  auto first = allocate(0, "k", {{"X-Request-Id", "same"}});
  EXPECT_EQ(first.body, allocate_answer(0, "k", 0));
  EXPECT_FALSE(first.header("x-request-id-dedup"));
  auto second = allocate(0, "k", {{"X-Request-Id", "same"}});
  EXPECT_EQ(second.body, allocate_answer(0, "k", 1));  // applied again, as the missing header says
  EXPECT_FALSE(get("/healthz").header("x-request-id-dedup"));
}

}  // namespace
}  // namespace hf3fs_meta::testing
