// A client of several endpoints (docs/design.md "Endpoints"): a member that is not the
// leader sends the call to the leader it names, or to the next endpoint, as a failure with no answer
// does; such an answer applied nothing, so any call is repeated, within its deadline. A scripted
// transport that records each attempt's endpoint, a fake clock, a sleeper that only advances it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/routes.hpp"
#include "client/endpoints.hpp"
#include "internal/endpoint_url.hpp"
#include "support/fakes.hpp"
#include "support/scripted_client.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace hf3fs_meta::testing;
using namespace std::chrono_literals;

const std::string kA = "http://127.0.0.1:18001";
const std::string kB = "http://127.0.0.1:18002";
const std::string kC = "http://127.0.0.1:18003";
const std::string kElsewhere = "http://127.0.0.1:18009";

// A policy under which a 503 may have been applied: an ordinary one repeats only what is safe to.
class Ambiguous503Policy final : public RetryPolicy {
 public:
  std::unique_ptr<RetryPolicy> clone() const override { return std::make_unique<Ambiguous503Policy>(); }
  int max_attempts() const override { return 4; }
  std::chrono::milliseconds deadline() const override { return 10s; }
  RetryClass classify(const Error& e) const override {
    return e.status == 503 ? RetryClass::ambiguous : default_retry_class(e);
  }
};

TransportResult ok_allocate() { return http_answer(200, R"({"rank":3,"results":[["k",7]]})"); }
TransportResult ok_exists() { return http_answer(200, R"({"exists":[true]})"); }

// The client over three members, unless a test names others.
class ClientEndpointsTest : public ScriptedClientTest {
 protected:
  std::unique_ptr<Client> make_client(ClientOptions options = {}) {
    if (options.endpoints.empty()) options.endpoints = {kA, kB, kC};
    return ScriptedClientTest::make_client(std::move(options));
  }
};

// ---- Where the next attempt goes ----

TEST_F(ClientEndpointsTest, ANamedLeaderGetsTheCallAtOnceAndTheCallsAfterIt) {
  auto client = make_client();
  transport->then(not_leader_answer(kC));
  transport->then(ok_exists());
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_TRUE(sleeper->sleeps().empty());  // a hop to the leader waits no backoff
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kC, kC));
  EXPECT_EQ(observer->trace(observer->events().front().request_id),
            (std::vector<std::string>{"attempt 1", "retry 1", "attempt 2", "success 2"}));
}

TEST_F(ClientEndpointsTest, ALeaderNeedNotBeConfiguredAndATrailingSlashIsNotPartOfIt) {
  const std::string elsewhere = "http://10.0.0.9:18000";
  ClientOptions options;
  options.endpoints = {kA + "/"};
  auto client = make_client(options);
  transport->then(not_leader_answer(elsewhere + "/"));
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, elsewhere));
}

TEST_F(ClientEndpointsTest, NotTheLeaderWithoutANameGoesToTheNextEndpointRoundRobin) {
  auto client = make_client();
  transport->then(not_leader_answer());
  transport->then(not_leader_answer());
  transport->then(not_leader_answer());
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kB, kC, kA));
  EXPECT_EQ(sleeper->sleeps().size(), 3u);  // no word of a leader: each waits its backoff
}

TEST_F(ClientEndpointsTest, AFailureWithNoAnswerGoesToTheNextEndpoint) {
  auto client = make_client();
  transport->then(refused_connection());
  transport->then(transport_failure(errc::timeout, true));  // batch_exists is safe to repeat
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kB, kC));
}

TEST_F(ClientEndpointsTest, AnOrdinaryFailureStaysAtTheEndpoint) {
  auto client = make_client();
  transport->then(detail_answer(503, "the data dir failed: nothing applied"));
  transport->then(detail_answer(502, "Bad Gateway"));
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kA, kA));
}

TEST_F(ClientEndpointsTest, ALeaderThatFailsInTurnHandsOverToTheConfiguredEndpointAfterTheOneThatNamedIt) {
  auto client = make_client();
  transport->then(not_leader_answer());  // A
  transport->then(not_leader_answer(kElsewhere));  // B names an endpoint that is not configured
  transport->then(refused_connection());  // ... and gone
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kB, kElsewhere, kC));
}

TEST_F(ClientEndpointsTest, ANameThatIsNoEndpointOrWouldDropTlsIsNotFollowed) {
  const std::string secure_a = "https://127.0.0.1:18001";
  const std::string secure_b = "https://127.0.0.1:18002";
  ClientOptions options;
  options.endpoints = {secure_a, secure_b};
  auto client = make_client(options);
  transport->then(not_leader_answer("http://127.0.0.1:18009"));  // the token would travel in clear
  transport->then(not_leader_answer("not a url"));
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(secure_a, secure_b, secure_a));
}

// ---- What may be repeated ----

TEST_F(ClientEndpointsTest, NotTheLeaderRepeatsCallsThatAreNeverSafeToRepeat) {
  auto client = make_client();
  transport->then(not_leader_answer(kB));
  transport->then(no_content());
  ASSERT_TRUE(client->clear());  // Repeat::never
  EXPECT_EQ(transport->count(path_of(Route::clear)), 2u);
}

// A policy that takes an ordinary 503 as ambiguous does not repeat an allocate after it (no request-id
// deduplication declared), but does after "not the leader": that member applied nothing.
TEST_F(ClientEndpointsTest, NotTheLeaderRepeatsAnAllocateThatAnOrdinary503UnderThePolicyDoesNot) {
  ClientOptions options;
  options.retry_policy = std::make_shared<Ambiguous503Policy>();
  auto client = make_client(options);
  transport->then(detail_answer(503, "the change was written but not synced to disk"));
  auto refused = client->allocate(3, {"k"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::unavailable);
  EXPECT_EQ(refused.error().attempts, 1);
  EXPECT_THAT(refused.error().stop_reason, HasSubstr("not safe to repeat allocate"));

  transport->then(not_leader_answer(kB));
  transport->then(ok_allocate());
  auto pages = client->allocate(3, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  EXPECT_EQ(pages.value(), std::vector<Page>{7});
  EXPECT_EQ(transport->count(path_of(Route::batch_allocate)), 3u);
}

// A failover takes longer than four attempts: answers of members that are not the leader are ridden
// out to the deadline, as refused connections are, without spending the retry budget.
TEST_F(ClientEndpointsTest, AFailoverIsRiddenOutPastTheAttemptCountWithoutSpendingTheBudget) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  options.retry_budget.max_tokens = 2;  // one spent token would stop retries
  auto client = make_client(options);
  for (int i = 0; i < 9; ++i) transport->then(i % 3 == 0 ? TransportResult(refused_connection()) : not_leader_answer());
  transport->then(ok_allocate());
  auto pages = client->allocate(3, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  EXPECT_EQ(transport->posted().size(), 10u);
}

// vLLM's urllib3 Retry counts every attempt (the Python drop-in's policy): so do these answers.
TEST_F(ClientEndpointsTest, APolicyThatCountsRefusedConnectionsCountsTheseAnswersToo) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(3, 10s, Unreachable::count);
  auto client = make_client(options);
  transport->otherwise([](const HttpRequest&, const AttemptTimeouts&) -> TransportResult { return not_leader_answer(); });
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 3);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("retry policy exhausted after 3 attempts"));
}

// ---- Loops, and the error that ends them ----

// Two members that name each other (a failover that has not settled): every other hop waits its
// backoff, and the call ends by its deadline saying where it went and what each member said.
TEST_F(ClientEndpointsTest, MembersNamingEachOtherDoNotSpinAndTheDeadlineSaysWhy) {
  ClientOptions options;
  options.endpoints = {kA, kB};
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  transport->otherwise([](const HttpRequest& request, const AttemptTimeouts&) -> TransportResult {
    return not_leader_answer(request.endpoint == kA ? kB : kA);
  });
  auto r = client->allocate(3, {"k"}, CallOptions{1s});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().status, 503);
  // Attempts in pairs, a hop at once then a hop after 100 ms, until the next would start at 1 s.
  EXPECT_EQ(r.error().attempts, 20);
  EXPECT_EQ(sleeper->sleeps(), std::vector<std::chrono::nanoseconds>(9, 100ms));
  EXPECT_EQ(r.error().stop_reason,
            "stopped after 20 attempts in 0.9 s: the next attempt, after a 0.1 s backoff, could not start within "
            "the deadline of 1 s; no endpoint answered as the leader: " +
                kA + " (503 not the leader, naming " + kB + "), " + kB + " (503 not the leader, naming " + kA + ")");
  EXPECT_THAT(r.error().message(), HasSubstr("not the leader: nothing applied"));
}

TEST_F(ClientEndpointsTest, AllEndpointsDownEndsAtTheDeadlineNamingEach) {
  ClientOptions options;
  options.endpoints = {kA, kB};
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  transport->otherwise([&](const HttpRequest& request, const AttemptTimeouts&) -> TransportResult {
    if (request.endpoint == kA) return refused_connection();
    return not_leader_answer();
  });
  auto r = client->batch_exists({"k"}, CallOptions{350ms});
  ASSERT_FALSE(r);
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kB, kA, kB));
  EXPECT_THAT(r.error().stop_reason,
              HasSubstr("; no endpoint answered as the leader: " + kA + " (nothing accepted the connection), " + kB +
                        " (503 not the leader)"));
}

TEST_F(ClientEndpointsTest, AnEndpointThatAnsweredOtherwiseIsNamedWithItsStatus) {
  ClientOptions options;
  options.endpoints = {kA, kB};
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(2, 10s);
  auto client = make_client(options);
  transport->then(not_leader_answer(kB));
  transport->then(detail_answer(503, "the data dir failed: nothing applied"));
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().detail, "the data dir failed: nothing applied");
  EXPECT_THAT(r.error().stop_reason, HasSubstr("retry policy exhausted after 2 attempts"));
  EXPECT_THAT(r.error().stop_reason, HasSubstr("; endpoints tried, each with its last failure: " + kA +
                                               " (503 not the leader, naming " + kB + "), " + kB +
                                               " (503 unavailable)"));
}

// One endpoint and no member that is not the leader: the reasons are as before there were lists.
TEST_F(ClientEndpointsTest, OneEndpointAddsNothingToTheReason) {
  ClientOptions options;
  options.endpoints = {kA};
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(2, 10s);
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  transport->then(detail_answer(503, "x"));
  transport->then(detail_answer(503, "x"));
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().stop_reason, "retry policy exhausted after 2 attempts in 0.1 s");
}

// A member that is not the leader speaks for no server's features: its answer, without the headers,
// does not withdraw the deduplication window the leader declared.
TEST_F(ClientEndpointsTest, ANotTheLeaderAnswerDoesNotWithdrawTheLeadersDeduplication) {
  auto client = make_client();
  transport->then(http_answer(200, R"({"exists":[true]})", "application/json", {{"X-Request-Id-Dedup", "60000"}}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  transport->then(not_leader_answer(kB));
  transport->then(transport_failure(errc::timeout, true));  // ambiguous: safe only while the window holds
  transport->then(ok_allocate());
  auto pages = client->allocate(3, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  EXPECT_THAT(transport->endpoints(), ElementsAre(kA, kA, kB, kC));
}

// A fresh client's first answer is a standby's: its window (the cluster's request-id answers are in
// the replicated log) lets an allocate cut at the leader be repeated under its id, as it would be
// had the client talked to the leader first.
TEST_F(ClientEndpointsTest, AStandbysWindowLetsAFreshClientRepeatAnAllocateAcrossAFailover) {
  auto client = make_client();
  transport->then(http_answer(503, R"({"detail":"not the leader"})", "application/json",
                              {{"X-Hf3fs-Leader", kB}, {"X-Request-Id-Dedup", "60000"}}));
  transport->then(transport_failure(errc::connection_failed, true));  // sent: ambiguous
  transport->then(ok_allocate());
  auto pages = client->allocate(3, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  EXPECT_EQ(pages.value(), std::vector<Page>{7});
  // One request id for all three attempts: the repeat is the same request.
  const auto posted = transport->posted();
  ASSERT_EQ(posted.size(), 3u);
  EXPECT_FALSE(posted[0].request_id.empty());
  EXPECT_EQ(posted[1].request_id, posted[0].request_id);
  EXPECT_EQ(posted[2].request_id, posted[0].request_id);
  // Without a window declared anywhere, the same cut stops the call.
  auto other = make_client();
  transport->then(not_leader_answer(kB));
  transport->then(transport_failure(errc::connection_failed, true));
  auto refused = other->allocate(3, {"k"});
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.error().stop_reason, HasSubstr("not safe to repeat allocate"));
}

// ---- Options ----

TEST_F(ClientEndpointsTest, AnInvalidEndpointRefusesEveryCallNamingItsIndex) {
  ClientOptions options;
  options.endpoints = {kA, "ftp://127.0.0.1:18002"};
  auto client = make_client(options);
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_EQ(r.error().detail,
            "ClientOptions::endpoints[1]: 'ftp://127.0.0.1:18002' is not an http:// or https:// URL");
  EXPECT_TRUE(transport->posted().empty());
}

TEST_F(ClientEndpointsTest, AnInvalidBaseUrlRefusesEveryCallNamingIt) {
  ClientOptions options;
  options.base_url = "127.0.0.1:18000";
  options.transport = transport;
  Client client(options);
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().detail, "ClientOptions::base_url: '127.0.0.1:18000' is not an http:// or https:// URL");
  EXPECT_TRUE(transport->posted().empty());
}

TEST_F(ClientEndpointsTest, TheBaseUrlIsTheOneEndpointWithoutAList) {
  ClientOptions options;
  options.base_url = kB;
  options.transport = transport;
  Client client(options);
  transport->then(ok_exists());
  ASSERT_TRUE(client.batch_exists({"k"}));
  EXPECT_THAT(transport->endpoints(), ElementsAre(kB));
}

TEST(EndpointUrlTest, WhatIsAnEndpoint) {
  using internal::endpoint_problem;
  for (const char* good : {"http://127.0.0.1:18000", "https://meta.example:443/prefix/", "HTTP://h", "http://[::1]:8",
                           "http://h:65535"}) {
    EXPECT_EQ(endpoint_problem(good), std::nullopt) << good;
  }
  EXPECT_EQ(endpoint_problem(""), "empty: an endpoint is a URL such as http://127.0.0.1:18000");
  EXPECT_EQ(endpoint_problem("http://a:1,http://b:2"),
            "'http://a:1,http://b:2' has ',' at offset 10: an endpoint is a base URL without a query, fragment or "
            "user info (several endpoints are a list, not one URL)");
  EXPECT_EQ(endpoint_problem("http://h:1 "),
            "byte 0x20 at offset 10 is not visible ASCII: an endpoint is a URL such as http://127.0.0.1:18000");
  EXPECT_EQ(endpoint_problem("http://:18000"), "'http://:18000' has no host");
  EXPECT_EQ(endpoint_problem("http://"), "'http://' has no host");
  EXPECT_EQ(endpoint_problem("http://h:"), "'http://h:' has ':' without a port");
  EXPECT_EQ(endpoint_problem("http://h:0"), "'http://h:0' has port '0': a port is 1 to 65535");
  EXPECT_EQ(endpoint_problem("http://h:65536"), "'http://h:65536' has port '65536': a port is 1 to 65535");
  EXPECT_EQ(endpoint_problem("http://h:8x"), "'http://h:8x' has port '8x': a port is 1 to 65535");
  EXPECT_EQ(endpoint_problem("http://[::1"), "'http://[::1' has an IPv6 host without its closing ']'");
  EXPECT_EQ(endpoint_problem("http://user@h:1"),
            "'http://user@h:1' has '@' at offset 11: an endpoint is a base URL without a query, fragment or user "
            "info");
  EXPECT_EQ(endpoint_problem("http://h:1/?x"),
            "'http://h:1/?x' has '?' at offset 11: an endpoint is a base URL without a query, fragment or user info");
  EXPECT_EQ(endpoint_problem(std::string(3000, 'h')), "longer than 2048 bytes");
  EXPECT_EQ(endpoint_problem(std::string("http://h\r\n:1")),
            "byte 0x0D at offset 8 is not visible ASCII: an endpoint is a URL such as http://127.0.0.1:18000");
}

TEST(EndpointUrlTest, SplitEndpointsKeepsEmptyEntriesForTheCheckToName) {
  EXPECT_THAT(split_endpoints(" http://a:1 ,\thttp://b:2"), ElementsAre("http://a:1", "http://b:2"));
  EXPECT_THAT(split_endpoints("http://a:1"), ElementsAre("http://a:1"));
  EXPECT_THAT(split_endpoints("http://a:1,,http://b:2,"), ElementsAre("http://a:1", "", "http://b:2", ""));
  EXPECT_EQ(internal::endpoint_list_problem(split_endpoints("http://a:1,,http://b:2"), "--url"),
            "--url[1]: empty: an endpoint is a URL such as http://127.0.0.1:18000");
  EXPECT_EQ(internal::endpoint_list_problem({}, "--url"), "--url: no endpoint: give at least one URL");
  EXPECT_EQ(internal::endpoint_list_problem({"x"}, "--url"), "--url: 'x' is not an http:// or https:// URL");
}

// Calls that met stale news must not undo newer: only the call that met the current endpoint moves it.
TEST(EndpointsTest, OnlyNewsAboutTheCurrentEndpointMovesIt) {
  internal::Endpoints endpoints({kA, kB, kC});
  std::string at;
  endpoints.current(at);
  EXPECT_EQ(at, kA);
  endpoints.go_to_next(kA);  // A gave no answer: B
  endpoints.go_to_leader(kA, kC);  // a late answer from A, sent before the move: ignored
  endpoints.go_to_next(kA);  // likewise
  endpoints.current(at);
  EXPECT_EQ(at, kB);
  endpoints.go_to_leader(kB, kA);  // B names A: A, and round robin goes on from A
  endpoints.current(at);
  EXPECT_EQ(at, kA);
  endpoints.go_to_next(kA);
  endpoints.current(at);
  EXPECT_EQ(at, kB);
  endpoints.go_to_next(kB);
  endpoints.go_to_next(kC);
  endpoints.current(at);
  EXPECT_EQ(at, kA);  // round robin wraps
}

}  // namespace
}  // namespace hf3fs_meta
