// Fault injection: POST/DELETE /_faults, only with --enable-fault-injection.
#include <chrono>

#include "server/server_test_support.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

class ServerFaultsTest : public ServerTestBase {
 protected:
  ServerFaultsTest() : ServerTestBase({"--threads", "2", "--enable-fault-injection"}) {}

  void add_rule(std::string_view rule) {
    auto r = post("/_faults", rule);
    ASSERT_EQ(r.status, 200) << r.body;
  }
};

TEST_F(ServerFaultsTest, StatusRuleAnswersInjectedFaultAndAppliesNothing) {
  initialize(0, 10);
  add_rule(R"({"status":503,"times":2})");
  for (int i = 0; i < 2; ++i) {
    auto r = allocate(0, "k1");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.body, R"({"detail":"injected fault"})");
    EXPECT_THAT(r.header("content-type"), Optional(std::string("application/json")));
    EXPECT_THAT(r.header("x-request-id-dedup"), Optional(std::string("60000")));
  }
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 0));
}

TEST_F(ServerFaultsTest, RuleWithoutPathSparesTheServerRoutes) {
  add_rule(R"({"status":500})");
  EXPECT_EQ(get("/healthz").status, 200);
  EXPECT_EQ(get("/metrics").status, 200);
  // Still armed: the next protocol request takes it.
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 500);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 200);
}

TEST_F(ServerFaultsTest, RuleWithPathMatchesOnlyThatPath) {
  initialize(0, 10);
  add_rule(R"({"path":"/keys/batch_exists","status":502})");
  EXPECT_EQ(allocate(0, "k1").status, 200);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 502);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 200);
}

TEST_F(ServerFaultsTest, FirstMatchingRuleInTheOrderAddedWins) {
  add_rule(R"({"path":"/keys/batch_exists","status":504})");
  add_rule(R"({"status":503})");
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 504);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 503);
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 200);
}

TEST_F(ServerFaultsTest, DelayRuleAnswersNormallyAndDoesNotBlockOthers) {
  initialize(0, 10);
  FaultRules faults(server_);
  faults.add(R"({"delay_ms":3000,"times":1})");
  RawConnection slow(server_.host(), server_.port());
  slow.send(format_request("POST", "/keys/batch_allocate", slow.host_header(), R"({"rank":0,"keys":[["k1",""]]})"));
  // The rule is used up: the server has taken the slow request and waits 3 s before answering it.
  ASSERT_TRUE(faults.wait_until_armed(0));
  // The server has two I/O threads, and gives a connection to the one with fewer: of three made now,
  // one at least shares the slow one's. They are served while it waits, and it is still waiting: a
  // delay that held a thread would have answered it before the connections behind it.
  RawConnection a(server_.host(), server_.port());
  RawConnection b(server_.host(), server_.port());
  RawConnection c(server_.host(), server_.port());
  for (RawConnection* other : {&a, &b, &c, &a, &b, &c}) EXPECT_EQ(other->request("GET", "/healthz").status, 200);
  EXPECT_FALSE(slow.has_input());
  auto r = slow.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, allocate_answer(0, "k1", 0));
}

TEST_F(ServerFaultsTest, CloseBeforeDropsTheConnectionWithoutApplying) {
  initialize(0, 10);
  add_rule(R"({"close_connection":"before"})");
  RawConnection connection(server_.host(), server_.port());
  connection.send(format_request("POST", "/keys/batch_allocate", connection.host_header(),
                                 R"({"rank":0,"keys":[["k1",""]]})"));
  EXPECT_TRUE(connection.peer_closed(std::chrono::seconds(5)));
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 0));
}

TEST_F(ServerFaultsTest, CloseAfterAppliesThenDropsTheConnection) {
  initialize(0, 10);
  add_rule(R"({"close_connection":"after","times":1})");
  RawConnection connection(server_.host(), server_.port());
  connection.send(format_request("POST", "/keys/batch_allocate", connection.host_header(),
                                 R"({"rank":0,"keys":[["k1",""]]})"));
  EXPECT_TRUE(connection.peer_closed(std::chrono::seconds(5)));
  EXPECT_EQ(allocate(0, "k2").body, allocate_answer(0, "k2", 1));
}

// An exception in one session (out of memory, a bug) closes that connection and is logged and
// counted; the server, and every other connection, go on.
TEST_F(ServerFaultsTest, AnExceptionInASessionClosesOnlyThatConnection) {
  initialize(0, 10);
  RawConnection bystander(server_.host(), server_.port());
  ASSERT_EQ(bystander.request("GET", "/healthz").status, 200);
  add_rule(R"({"exception":true,"times":1})");
  RawConnection failing(server_.host(), server_.port());
  failing.send(format_request("POST", "/keys/batch_allocate", failing.host_header(), R"({"rank":0,"keys":[["k1",""]]})"));
  EXPECT_TRUE(failing.peer_closed(std::chrono::seconds(5)));
  EXPECT_EQ(bystander.request("GET", "/healthz").status, 200);
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 0));  // nothing was applied
  EXPECT_THAT(metric("hf3fs_meta_session_failures_total"), Optional(std::string("1")));
}

TEST_F(ServerFaultsTest, DeleteRemovesEveryRule) {
  add_rule(R"({"status":503,"times":5})");
  add_rule(R"({"delay_ms":10})");
  auto r = send("DELETE", "/_faults");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"removed":2})");
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 200);
}

TEST_F(ServerFaultsTest, ForgetStateForgetsEveryRankAndKey) {
  initialize(0, 10);
  initialize(1, 10);
  ASSERT_EQ(allocate(0, "k1").status, 200);
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k1",0]]})").status, 204);
  auto r = post("/_faults", R"({"forget_state":true})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"forgotten":true})");
  EXPECT_EQ(allocate(0, "k1").body, R"({"detail":"Allocation failed: Rank 0 not initialized"})");
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k1"]})").body, R"({"exists":[false]})");
  EXPECT_THAT(metric(R"(hf3fs_meta_keys{namespace="default"})"), Optional(std::string("0")));
  EXPECT_THAT(metric(R"(hf3fs_meta_ranks{namespace="default"})"), Optional(std::string("0")));
}

TEST_F(ServerFaultsTest, StatusRuleCanCarryADetailOrAWholeBody) {
  initialize(0, 10);
  // Another server's 500, as vLLM words it.
  add_rule(R"j({"path":"/keys/batch_allocate","status":500,"detail":"Allocation failed: too many values to unpack (expected 2)"})j");
  auto r = allocate(0, "k1");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, R"j({"detail":"Allocation failed: too many values to unpack (expected 2)"})j");
  // A malformed success, for clients' answer validation.
  add_rule(R"({"path":"/keys/batch_exists","status":200,"body":"{\"exists\":[true,true]}"})");
  auto e = post("/keys/batch_exists", R"({"keys":["k1"]})");
  EXPECT_EQ(e.status, 200);
  EXPECT_EQ(e.body, R"({"exists":[true,true]})");
  EXPECT_THAT(e.header("content-type"), Optional(std::string("application/json")));
  // Nothing was applied: k1's page is still the first one.
  EXPECT_EQ(allocate(0, "k1").body, allocate_answer(0, "k1", 0));
}

TEST_F(ServerFaultsTest, BadRulesAre400) {
  for (std::string_view body : {R"(not json)", R"([])", R"({})", R"({"status":200})", R"({"status":503,"delay_ms":5})",
                                R"({"close_connection":"during"})", R"({"status":503,"times":0})",
                                R"({"status":503,"path":"keys"})", R"({"status":503,"colour":"red"})",
                                R"({"status":500,"detail":5})", R"({"delay_ms":5,"detail":"x"})",
                                R"({"status":500,"detail":"a","body":"{}"})", R"({"status":199,"body":"{}"})"}) {
    auto r = post("/_faults", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_THAT(r.body, HasSubstr("\"detail\"")) << body;
  }
  // None of them was added.
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 200);
}

TEST_F(ServerFaultsTest, OtherMethodsOnFaultsAre405) {
  auto r = get("/_faults");
  EXPECT_EQ(r.status, 405);
  EXPECT_THAT(r.header("allow"), Optional(std::string("DELETE, POST")));
}

TEST_F(ServerFaultsTest, InjectedFaultsAreCountedInMetrics) {
  add_rule(R"({"status":503})");
  ASSERT_EQ(post("/keys/batch_exists", R"({"keys":[]})").status, 503);
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="/keys/batch_exists",status="503"})"),
              Optional(std::string("1")));
}

}  // namespace
}  // namespace hf3fs_meta::testing
