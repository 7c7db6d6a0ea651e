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
  EXPECT_THAT(repeat.header("x-request-id-dedup"), Optional(std::string("1")));
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

class ServerDedupBoundsTest : public ServerTestBase {
 protected:
  ServerDedupBoundsTest() : ServerTestBase({"--threads", "2", "--dedup-capacity", "1", "--dedup-ttl-ms", "200"}) {}
};

TEST_F(ServerDedupBoundsTest, TheOldestAnswerIsDroppedBeyondTheCapacity) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "a", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "a", 0));
  ASSERT_EQ(allocate(0, "b", {{"X-Request-Id", "B"}}).body, allocate_answer(0, "b", 1));
  // B is kept, A was dropped: A is applied again.
  EXPECT_EQ(allocate(0, "b", {{"X-Request-Id", "B"}}).body, allocate_answer(0, "b", 1));
  EXPECT_EQ(allocate(0, "a", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "a", 2));
}

TEST_F(ServerDedupBoundsTest, AnswersExpireAfterTheTtl) {
  initialize(0, 10);
  ASSERT_EQ(allocate(0, "a", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "a", 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(allocate(0, "a", {{"X-Request-Id", "A"}}).body, allocate_answer(0, "a", 1));
}

}  // namespace
}  // namespace hf3fs_meta::testing
