// The cache-lifecycle extensions over HTTP: POST /keys/delete and GET /stats (always served), their
// figures in /metrics, and --eviction lru. Leases and reclaim are timed by the state model's clock
// and tested there with a fake one (tests/state/state_lifecycle_test.cpp); here what needs no
// waiting, and one allocation TTL through the server's own clock.
#include <chrono>
#include <thread>

#include "server/server_test_support.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;

class ServerExtensionsTest : public ServerTestBase {
 protected:
  explicit ServerExtensionsTest(std::vector<std::string> args = {"--threads", "2"}) : ServerTestBase(std::move(args)) {}
  void save(int rank, const std::string& key, int page) {
    ASSERT_EQ(allocate(rank, key).body, allocate_answer(rank, key, page));
    auto r = post("/keys/confirm_write", R"({"rank":)" + std::to_string(rank) + R"(,"confirmations":[[")" + key +
                                             R"(",)" + std::to_string(page) + "]]}");
    ASSERT_EQ(r.status, 204) << r.body;
  }
};

TEST_F(ServerExtensionsTest, DeleteAndStatsOverHttp) {
  initialize(0, 4);
  save(0, "a", 0);
  ASSERT_EQ(allocate(0, "b").status, 200);
  auto r = post("/keys/delete", R"({"keys":["a","zz"]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"deleted":[true,false]})");
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["a"]})").body, R"({"exists":[false]})");
  r = get("/stats");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_THAT(r.body, HasSubstr(R"({"ranks":[{"rank":0,"num_pages":4,"free":3,"allocated":1,"mapped":0,)"));
  EXPECT_THAT(r.body, HasSubstr(R"("deleted_keys":1,)"));
  // The same figures in /metrics, and the requests counted under their routes.
  EXPECT_EQ(metric(R"(hf3fs_meta_deleted_keys_total{namespace="default"})"), "1");
  EXPECT_EQ(metric(R"(hf3fs_meta_keys_complete{namespace="default"})"), "0");
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "0");
  EXPECT_EQ(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="draining"})"), "0");
  EXPECT_EQ(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="allocated"})"), "1");
  EXPECT_EQ(metric(R"(hf3fs_meta_requests_total{route="/keys/delete",status="200"})"), "1");
  EXPECT_EQ(metric(R"(hf3fs_meta_requests_total{route="/stats",status="200"})"), "1");
}

TEST_F(ServerExtensionsTest, EachExtensionRouteHasItsMethod) {
  auto r = post("/stats", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "GET");
  r = get("/keys/delete");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST");
  EXPECT_EQ(get("/stats/").status, 307);
}

TEST_F(ServerExtensionsTest, WithoutEvictionAFullRankAnswersAsVllm) {
  initialize(0, 1);
  save(0, "a", 0);
  EXPECT_EQ(allocate(0, "b").body, allocate_answer(0, "b", -1));
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["a"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "0");
}

class ServerEvictionTest : public ServerExtensionsTest {
 protected:
  ServerEvictionTest() : ServerExtensionsTest({"--threads", "2", "--eviction", "lru", "--read-lease-ms", "0"}) {}
};

TEST_F(ServerEvictionTest, AFullRankEvictsTheLeastRecentlyUsedKeyOnEveryRank) {
  initialize(0, 2);
  initialize(1, 2);
  for (const std::string key : {"a", "b"}) {
    for (int rank : {0, 1}) save(rank, key, key == "a" ? 0 : 1);
  }
  // a is used after b: b is the least recently used.
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["a"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(allocate(0, "c").body, allocate_answer(0, "c", 1));
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["a","b"]})").body, R"({"exists":[true,false]})");
  // b's page on rank 1 went back to the pool too.
  EXPECT_EQ(allocate(1, "c").body, allocate_answer(1, "c", 1));
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "1");
}

// With the default lease (5 s), a key just looked up is not evicted: the allocate answers -1 as vLLM
// does on a full pool.
class ServerLeaseTest : public ServerExtensionsTest {
 protected:
  ServerLeaseTest() : ServerExtensionsTest({"--threads", "2", "--eviction", "lru"}) {}
};

TEST_F(ServerLeaseTest, AKeyFoundByALookupIsNotEvictedWithinItsLease) {
  initialize(0, 1);
  save(0, "a", 0);
  EXPECT_EQ(post("/keys/get_locations", R"({"rank":0,"keys":["a"]})").body, R"({"locations":[0]})");
  EXPECT_EQ(allocate(0, "b").body, allocate_answer(0, "b", -1));
  EXPECT_EQ(metric(R"(hf3fs_meta_keys_leased{namespace="default"})"), "1");
  EXPECT_EQ(metric(R"(hf3fs_meta_evicted_keys_total{namespace="default"})"), "0");
  // Deleted under its lease, its page drains: not free until the lease ends.
  EXPECT_EQ(post("/keys/delete", R"({"keys":["a"]})").body, R"({"deleted":[true]})");
  EXPECT_EQ(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="0",state="draining"})"), "1");
  EXPECT_EQ(allocate(0, "b").body, allocate_answer(0, "b", -1));
}

// --allocation-ttl-ms through the server. The state model times it on a fake clock
// (state_lifecycle_test); the server has only its own clock, so here a real TTL of 1 s: the reclaim
// is awaited by polling /stats (bounded), and is never seen before the TTL has passed.
class ServerAllocationTtlTest : public ServerExtensionsTest {
 protected:
  ServerAllocationTtlTest() : ServerExtensionsTest({"--threads", "2", "--allocation-ttl-ms", "1000"}) {}
};

TEST_F(ServerAllocationTtlTest, APageAllocatedAndNotConfirmedReturnsToItsPool) {
  initialize(0, 2);
  save(0, "kept", 0);  // confirmed at once: its page stays
  const auto allocated_at = std::chrono::steady_clock::now();
  ASSERT_EQ(allocate(0, "stalled").body, allocate_answer(0, "stalled", 1));
  constexpr std::string_view kReclaimed = R"("reclaimed_allocated_pages":1)";
  std::string stats;
  for (const auto deadline = allocated_at + std::chrono::seconds(20);;) {
    stats = get("/stats").body;
    if (stats.find(kReclaimed) != std::string::npos || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // between polls; orders nothing
  }
  const auto reclaimed_after = std::chrono::steady_clock::now() - allocated_at;
  ASSERT_THAT(stats, HasSubstr(kReclaimed));
  // The server's clock counts whole milliseconds: the allocation is stamped with the millisecond it
  // began in, so the TTL may end up to 1 ms before 1000 ms of this clock have passed (999.94 seen).
  EXPECT_GE(reclaimed_after, std::chrono::milliseconds(999));
  EXPECT_THAT(stats, HasSubstr(R"({"rank":0,"num_pages":2,"free":1,"allocated":0,"mapped":1,)"));
  // The stalled writer's confirm comes too late; its page goes to the next key.
  EXPECT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["stalled",1]]})").status, 409);
  EXPECT_EQ(allocate(0, "next").body, allocate_answer(0, "next", 1));
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["kept","stalled"]})").body, R"({"exists":[true,false]})");
}

}  // namespace
}  // namespace hf3fs_meta::testing
