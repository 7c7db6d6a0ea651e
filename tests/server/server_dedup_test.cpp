// Request-id deduplication of batch_allocate and confirm_write (X-Request-Id).
#include <chrono>
#include <thread>
#include <vector>

#include "server/server_test_support.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::Optional;

class ServerDedupTest : public ServerTestBase {
 protected:
  ServerDedupTest() : ServerTestBase({"--threads", "2", "--enable-fault-injection"}) {}
  static Headers id(std::string value) { return {{"X-Request-Id", std::move(value)}}; }
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
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{rank="0",state="free"})"), Optional(std::string("8")));
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

TEST_F(ServerDedupTest, ClearEmptiesTheCache) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/clear", "").status, 204);
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "other").body, allocate_answer(0, "other", 0));
  // Applied again, not answered from before the clear.
  EXPECT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 1));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("0")));
}

TEST_F(ServerDedupTest, ForgetStateEmptiesTheCache) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "k1", id("req-1")).body, allocate_answer(0, "k1", 0));
  ASSERT_EQ(post("/_faults", R"({"forget_state":true})").status, 200);
  EXPECT_EQ(allocate(0, "k1", id("req-1")).status, 500);
}

TEST_F(ServerDedupTest, RepeatWhileTheFirstIsInFlightWaitsForItsAnswer) {
  initialize(0, 10);
  ASSERT_EQ(post("/_faults", R"({"path":"/keys/batch_allocate","delay_ms":500})").status, 200);
  const std::string body = R"({"rank":0,"keys":[["k1",""]]})";
  RawConnection first(server_.host(), server_.port());
  RawConnection second(server_.host(), server_.port());
  first.send(format_request("POST", "/keys/batch_allocate", first.host_header(), body, id("slow")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
  ASSERT_EQ(post("/_faults", R"({"path":"/keys/batch_allocate","delay_ms":1000})").status, 200);
  RawConnection first(server_.host(), server_.port());
  first.send(format_request("POST", "/keys/batch_allocate", first.host_header(), R"({"rank":0,"keys":[["k1",""]]})",
                            id("slow")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
  // reserves a page per 7 body bytes until answered).
  ServerDedupBoundsTest()
      : ServerTestBase({"--threads", "2", "--dedup-max-bytes", "1000", "--dedup-ttl-ms", "2000"}) {}
};

TEST_F(ServerDedupBoundsTest, AFullBudgetRefusesNewIdsWith503AndForgetsNoPromise) {
  initialize(0, 10);
  for (const char* name : {"A", "B", "C"}) {
    auto r = allocate(0, name, {{"X-Request-Id", name}});
    ASSERT_EQ(r.status, 200);
    EXPECT_THAT(r.header("x-request-id-dedup"), Optional(std::string("2000")));
  }
  auto refused = allocate(0, "d", {{"X-Request-Id", "D"}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.body,
            R"({"detail":"Request-id deduplication is full: every kept answer is inside its 2000 ms window; nothing )"
            R"(was applied, retry later"})");
  // Until the oldest answer leaves its window (--dedup-ttl-ms 2000): the window the server keeps.
  ASSERT_TRUE(refused.header("retry-after"));
  EXPECT_GE(std::stoi(*refused.header("retry-after")), 1);
  EXPECT_LE(std::stoi(*refused.header("retry-after")), 2);
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_refused_total"), Optional(std::string("1")));
  EXPECT_LE(std::stoull(metric("hf3fs_meta_request_id_cache_bytes").value_or("0")), 1000u);
  // Nothing applied for D, and every promise kept: A, B, C still get their pages.
  EXPECT_EQ(allocate(0, "A", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "A", 0));
  EXPECT_EQ(allocate(0, "C", {{"X-Request-Id", "C"}}).body, allocate_answer(0, "C", 2));
  // Without an id there is nothing to promise: applied.
  EXPECT_EQ(allocate(0, "e").body, allocate_answer(0, "e", 3));
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
