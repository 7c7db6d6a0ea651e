// Every row of docs/protocol.md's "vLLM's defects" and "Deviations",
// sent as raw HTTP: the reference server's answer, and the state afterwards (for a
// refusal: exactly the state before, down to the order of the free pool).
#include <string>

#include "contract/contract_support.hpp"
#include "contract/wire_rows.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::StartsWith;

// Ranks 0 and 1 with 8 pages each. "done" is complete (page 0 on both ranks); "pending" holds
// page 1 on rank 0, allocated and not confirmed. Rank 0's pool is 2..7, rank 1's is 1..7.
class WireTest : public ContractTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":8})").status, 200);
    ASSERT_EQ(post("/rank/1/initialize", R"({"num_pages":8,"role":"worker"})").status, 200);
    ASSERT_EQ(post("/keys/batch_allocate", R"({"rank":0,"keys":[["done",""],["pending",""]]})").body,
              R"({"rank":0,"results":[["done",0],["pending",1]]})");
    ASSERT_EQ(post("/keys/batch_allocate", R"({"rank":1,"keys":[["done",""]]})").body,
              R"({"rank":1,"results":[["done",0]]})");
    ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["done",0]]})").status, 204);
    ASSERT_EQ(post("/keys/confirm_write", R"({"rank":1,"confirmations":[["done",0]],"pages_to_release":[]})").status,
              204);
    ASSERT_EQ(snapshot(), initial());
  }

  static StateSnapshot initial() {
    return StateSnapshot{{{0, RankPages{6, 1, 1, 0, 0}}, {1, RankPages{7, 0, 1, 0, 0}}}, 1};
  }

  // The state the set-up made, seen every way a client can see it; ends with allocations that
  // show the pools' order (so call it last).
  void expect_initial_state() {
    EXPECT_EQ(snapshot(), initial());
    EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["done","pending","k","x","other"]})").body,
              R"({"exists":[true,false,false,false,false]})");
    EXPECT_EQ(post("/keys/get_locations", R"({"rank":0,"keys":["done","pending"]})").body,
              R"({"locations":[0,null]})");
    EXPECT_EQ(post("/keys/get_locations", R"({"rank":1,"keys":["done"]})").body, R"({"locations":[0]})");
    // "pending" can still be confirmed at its page: its allocation survived.
    EXPECT_EQ(post("/keys/batch_allocate", R"({"rank":0,"keys":[["probe",""]]})").body,
              R"({"rank":0,"results":[["probe",2]]})");
    EXPECT_EQ(post("/keys/batch_allocate", R"({"rank":1,"keys":[["probe",""]]})").body,
              R"({"rank":1,"results":[["probe",1]]})");
    EXPECT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["pending",1]]})").status, 204);
  }
};

class WireRowTest : public WireTest, public ::testing::WithParamInterface<Row> {};

TEST_P(WireRowTest, AnswersAsTheTableSaysAndChangesNothing) {
  const Row& row = GetParam();
  const auto r = post(row.target, row.body);
  EXPECT_EQ(r.status, row.status) << r.body;
  EXPECT_THAT(r.header("content-type"), Optional(std::string("application/json")));
  EXPECT_THAT(r.header("x-request-id-dedup"), Optional(std::string("60000")));
  if (row.whole) {
    EXPECT_EQ(r.body, row.answer);
  } else if (row.prefix) {
    EXPECT_THAT(r.body, StartsWith(R"({"detail":")" + row.answer)) << r.body;
  } else {
    EXPECT_EQ(r.body, detail_body(row.answer));
  }
  // The connection-level behaviour is not part of the refusal: the server keeps serving.
  expect_initial_state();
}

std::string row_name(const ::testing::TestParamInfo<Row>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Defects, WireRowTest, ::testing::ValuesIn(kDefectRows), row_name);
INSTANTIATE_TEST_SUITE_P(Deviations, WireRowTest, ::testing::ValuesIn(kDeviationRows), row_name);

// ---- Rows whose answer changes the state on purpose ----

// Deviation: a released page that a key maps to is kept, the others released; 204; counted.
TEST_F(WireTest, ReleasingAMappedPageKeepsItAndReleasesTheOthers) {
  const auto r = post(kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":[0,1]})");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{7, 0, 1, 0, 1}}, {1, RankPages{7, 0, 1, 0, 0}}}, 1}));
  EXPECT_EQ(metric_series(metrics_body(), "hf3fs_meta_releases_kept_mapped_total")["namespace=\"default\",rank=\"0\""], "1");
  EXPECT_EQ(post(kLocations, R"({"rank":0,"keys":["done"]})").body, R"({"locations":[0]})");
  // Page 1 went to the back of the pool, behind 2..7; page 0 never re-enters it.
  std::string keys;
  for (int i = 0; i < 7; ++i) keys += std::string(i ? "," : "") + R"([")" + std::to_string(i) + R"(",""])";
  EXPECT_EQ(post(kAllocate, R"({"rank":0,"keys":[)" + keys + "]}").body,
            R"({"rank":0,"results":[["0",2],["1",3],["2",4],["3",5],["4",6],["5",7],["6",1]]})");
}

// Deviation: the confirmed page was released before: stale.
TEST_F(WireTest, ConfirmingAReleasedPageIsStale) {
  ASSERT_EQ(post(kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":[1]})").status, 204);
  const auto before = snapshot();
  const auto r = post(kConfirm, R"({"rank":0,"confirmations":[["pending",1]]})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body, detail_body("Confirmation failed: page 1 of key pending is not allocated on rank 0"));
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(snapshot().keys, 1);
}

// Deviation: the confirmed page was allocated before a clear (as before a restart): stale.
TEST_F(WireTest, ConfirmingAPageAllocatedBeforeAClearIsStale) {
  ASSERT_EQ(post("/clear", "whatever, never read").status, 204);
  ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":8})").status, 200);
  const auto r = post(kConfirm, R"({"rank":0,"confirmations":[["pending",1]]})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body, detail_body("Confirmation failed: page 1 of key pending is not allocated on rank 0"));
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{8, 0, 0, 0, 0}}}, 0}));
}

// Kept for compatibility: the same key twice in one confirm_write, applied in order, the last page
// wins and the first is orphaned.
TEST_F(WireTest, TheSameKeyTwiceInOneConfirmOrphansTheFirstPage) {
  ASSERT_EQ(post(kAllocate, R"({"rank":0,"keys":[["pending",""]]})").body,
            R"({"rank":0,"results":[["pending",2]]})");
  const auto r = post(kConfirm, R"({"rank":0,"confirmations":[["pending",1],["pending",2]]})");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{5, 0, 2, 1, 0}}, {1, RankPages{7, 0, 1, 0, 0}}}, 2}));
}

// Kept for compatibility: completeness is an exact count. "done" was first confirmed while two ranks
// existed; confirmed on a third that joined later, it stops being complete.
TEST_F(WireTest, AKeyConfirmedOnMoreRanksThanItsWorldSizeStopsBeingComplete) {
  ASSERT_EQ(post("/rank/2/initialize", R"({"num_pages":8})").status, 200);
  ASSERT_EQ(post(kAllocate, R"({"rank":2,"keys":[["done",""]]})").body, R"({"rank":2,"results":[["done",0]]})");
  ASSERT_EQ(post(kConfirm, R"({"rank":2,"confirmations":[["done",0]]})").status, 204);
  EXPECT_EQ(post(kExists, R"({"keys":["done"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(post(kLocations, R"({"rank":0,"keys":["done"]})").body, R"({"locations":[null]})");
  // No longer complete, so an allocate on rank 0 takes a fresh page for it.
  EXPECT_EQ(post(kAllocate, R"({"rank":0,"keys":[["done",""]]})").body, R"({"rank":0,"results":[["done",2]]})");
}

// Defect: releasing many pages into a big pool is O(n k) in vLLM; here it is an ordinary request
// whose pages all return to the pool, in order, behind the ones that never left it.
TEST_F(WireTest, ReleasingAThousandPagesIntoAMillionPageRank) {
  constexpr int kPages = 1 << 20;
  constexpr int kReleased = 1000;
  ASSERT_EQ(post("/rank/5/initialize", R"({"num_pages":)" + std::to_string(kPages) + "}").status, 200);
  std::string releases;
  for (int batch = 0; batch < kReleased / 125; ++batch) {
    std::string keys;
    for (int i = 0; i < 125; ++i) keys += std::string(i ? "," : "") + R"(["b)" + std::to_string(batch * 125 + i) + R"(",""])";
    const auto r = post(kAllocate, R"({"rank":5,"keys":[)" + keys + "]}");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  for (int p = 0; p < kReleased; ++p) releases += std::string(p ? "," : "") + std::to_string(p);
  EXPECT_EQ(snapshot().ranks[5], (RankPages{kPages - kReleased, kReleased, 0, 0, 0}));

  const auto r = post(kConfirm, R"({"rank":5,"confirmations":[],"pages_to_release":[)" + releases + "]}");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(snapshot().ranks[5], (RankPages{kPages, 0, 0, 0, 0}));
  EXPECT_EQ(post(kAllocate, R"({"rank":5,"keys":[["next",""]]})").body,
            R"({"rank":5,"results":[["next",)" + std::to_string(kReleased) + "]]}");
  // The other ranks were not touched.
  auto s = snapshot();
  s.ranks.erase(5);
  EXPECT_EQ(s, initial());
}

// Deviation: confirm_write on a rank not initialized with nothing to do is answered as vLLM does.
TEST_F(WireTest, AnEmptyConfirmOnARankNotInitializedDoesNothing) {
  const auto r = post(kConfirm, R"({"rank":7})");
  EXPECT_EQ(r.status, 204);
  expect_initial_state();
}

// Deviation: the extra routes.
TEST_F(WireTest, ExtraRoutesAnswerAndChangeNothing) {
  const auto health = get("/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");
  const auto metrics = get("/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.header("content-type"), Optional(StartsWith("text/plain")));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"free\"} 6\n"));
  const auto faults = post("/_faults", R"({"status":503,"times":1})");
  EXPECT_EQ(faults.status, 200);  // this server runs with fault injection
  ASSERT_EQ(testing::raw_request(server_.host(), server_.port(), "DELETE", "/_faults").status, 200);
  expect_initial_state();
}

TEST(WireWithoutFaultInjectionTest, FaultsRouteIsNotFound) {
  ServerProcess server({"--threads", "1"});
  const auto r = testing::raw_request(server.host(), server.port(), "POST", "/_faults", R"({"forget_state":true})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"detail":"Not Found"})");
  EXPECT_EQ(testing::raw_request(server.host(), server.port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(testing::raw_request(server.host(), server.port(), "GET", "/metrics").status, 200);
}

}  // namespace
}  // namespace hf3fs_meta::contract
