// The retry loop (docs/design.md "Retries"): a scripted transport, a fake clock and a sleeper that
// only advances it. Nothing really sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "support/fakes.hpp"
#include "support/scripted_client.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace hf3fs_meta::testing;
using namespace std::chrono_literals;

constexpr std::string_view kAllocate = path_of(Route::batch_allocate);
constexpr std::string_view kConfirm = path_of(Route::confirm_write);
constexpr std::string_view kExists = path_of(Route::batch_exists);
constexpr std::string_view kLocations = path_of(Route::get_locations);
constexpr std::string_view kClear = path_of(Route::clear);

TransportResult ok_allocate(std::string_view key = "k", Page page = 0) {
  return http_answer(200, R"({"rank":3,"results":[[")" + std::string(key) + "\"," + std::to_string(page) + "]]}");
}
TransportResult ok_exists() { return http_answer(200, R"({"exists":[true]})"); }
TransportResult ok_locations() { return http_answer(200, R"({"locations":[4]})"); }
TransportResult ok_init() { return http_answer(200, R"({"message":"Rank 3 initialized with 64 pages"})"); }
TransportResult status_answer(int status) {
  if (status == 500) return http_answer(500, "Internal Server Error", "text/plain; charset=utf-8");
  return detail_answer(status, "x");
}
TransportResult allocate_not_initialized(Rank rank = 3) {
  return detail_answer(500, "Allocation failed: Rank " + std::to_string(rank) + " not initialized");
}

class ClientRetryTest : public ScriptedClientTest {};

// ---- Row 1: 503, and failures before the request left, are repeated after backoff, for any call ----

TEST_F(ClientRetryTest, Unavailable503IsRepeatedEvenForAllocate) {
  auto client = make_client();
  transport->then(status_answer(503));
  transport->then(status_answer(503));
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kAllocate), 3u);
  EXPECT_EQ(sleeper->sleeps().size(), 2u);
  EXPECT_EQ(observer->trace(), (std::vector<std::string>{"attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3",
                                                         "success 3"}));
}

TEST_F(ClientRetryTest, UnsentTransportFailuresAreRepeatedEvenForClear) {
  auto client = make_client();
  transport->then(transport_failure(errc::connection_failed, false));
  transport->then(transport_failure(errc::timeout, false));
  transport->then(no_content());
  auto r = client->clear();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kClear), 3u);
  EXPECT_EQ(sleeper->sleeps().size(), 2u);
}

TEST_F(ClientRetryTest, GiveUpKeepsLastCodeAttemptsAndReason) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  // Not sent, but not a refused connection either (a TLS or resolve failure): the attempt count applies.
  for (int i = 0; i < 4; ++i) transport->then(transport_failure(errc::connection_failed, false, "TLS handshake failed"));
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_EQ(r.error().attempts, 4);
  EXPECT_FALSE(r.error().sent);
  EXPECT_EQ(r.error().stop_reason, "retry policy exhausted after 4 attempts in 0.3 s");
  EXPECT_THAT(r.error().message(), HasSubstr("retry policy exhausted after 4 attempts in 0.3 s; last error: "
                                             "connection_failed"));
  EXPECT_EQ(transport->count(kExists), 4u);
}

// Refused connections are repeated past the attempt count without spending the budget, but not
// once other failures have drained it: the budget is consulted.
TEST_F(ClientRetryTest, RefusedConnectionsStopWhenOtherFailuresDrainedTheBudget) {
  auto client = make_client();
  for (int i = 0; i < 5; ++i) transport->then(status_answer(503));  // 5 tokens spent: none left to spend
  ASSERT_FALSE(client->batch_exists({"k"}));
  transport->then(refused_connection());
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().stop_reason, "retry budget exhausted");
}

// A call rides out a server restart. Connection refused (the request never left) is
// repeated until the call's deadline, not until an attempt count.
TEST_F(ClientRetryTest, RefusedConnectionsAreRepeatedPastTheAttemptCountUntilTheDeadline) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  transport->otherwise([](const HttpRequest&, const AttemptTimeouts&) -> TransportResult {
    return refused_connection();
  });
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_EQ(r.error().attempts, 100);  // 0, 0.1, ... 9.9 s: the next would leave at the deadline
  EXPECT_EQ(r.error().stop_reason,
            "stopped after 100 attempts in 9.9 s: the next attempt, after a 0.1 s backoff, could not start within the "
            "deadline of 10 s");
  EXPECT_LE(clock->elapsed(), 10s);
}

TEST_F(ClientRetryTest, AServerBackAfterMoreThanTheAttemptCountIsReachedAndNoTokenWasSpent) {
  auto client = make_client();
  for (int i = 0; i < 6; ++i) transport->then(refused_connection());
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kAllocate), 7u);
  // Failures after sending still stop at the attempt count (4), and the budget is whole: had the
  // six refusals spent a token each, 4 would be left and the first 503 would not be repeated.
  for (int i = 0; i < 4; ++i) transport->then(status_answer(503));
  auto unavailable = client->allocate(3, {"k"});
  ASSERT_FALSE(unavailable);
  EXPECT_EQ(unavailable.error().attempts, 4);
}

TEST_F(ClientRetryTest, ExhaustedMessageNamesLastServerStatus) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_client(options);
  for (int i = 0; i < 4; ++i) transport->then(status_answer(503));
  auto r = client->get_locations(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().status, 503);
  EXPECT_EQ(r.error().detail, "x");
  EXPECT_THAT(r.error().message(),
              HasSubstr("retry policy exhausted after 4 attempts in 0.3 s; last error: unavailable (503)"));
}

// ---- Row 2: ambiguous failures (the request may have been applied) are repeated only when safe ----

struct Ambiguous {
  const char* name;
  TransportResult (*make)();
  const char* after;  // how the stop reason names it
};
const Ambiguous kAmbiguous[] = {
    {"bad_gateway", [] { return status_answer(502); }, "unavailable (502)"},
    {"gateway_timeout", [] { return status_answer(504); }, "unavailable (504)"},
    {"server_error", [] { return status_answer(500); }, "server_error (500)"},
    {"timeout_sent", [] { return TransportResult(transport_failure(errc::timeout, true)); }, "timeout (request sent)"},
    {"connection_failed_sent", [] { return TransportResult(transport_failure(errc::connection_failed, true)); },
     "connection_failed (request sent)"},
};

class ClientAmbiguousTest : public ClientRetryTest, public ::testing::WithParamInterface<Ambiguous> {};

TEST_P(ClientAmbiguousTest, SafeCallsAreRepeated) {
  auto client = make_client();
  transport->then(GetParam().make());
  transport->then(ok_exists());
  transport->then(GetParam().make());
  transport->then(ok_locations());
  transport->then(GetParam().make());
  transport->then(no_content());
  transport->then(GetParam().make());
  transport->then(ok_init());
  EXPECT_TRUE(client->batch_exists({"k"}));
  EXPECT_TRUE(client->get_locations(3, {"k"}));
  EXPECT_TRUE(client->confirm_write(3, {{"k", 1}}));  // no releases: applying it twice is harmless
  EXPECT_TRUE(client->initialize(3, 64));
  EXPECT_EQ(transport->remaining(), 0u);
  EXPECT_EQ(sleeper->sleeps().size(), 4u);
}

TEST_P(ClientAmbiguousTest, UnsafeCallsAreNotRepeated) {
  auto client = make_client();
  const auto check = [&](auto result, std::string op) {
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().attempts, 1);
    EXPECT_EQ(result.error().stop_reason, "not safe to repeat " + op + " after " + GetParam().after);
  };
  transport->then(GetParam().make());
  check(client->allocate(3, {"k"}), "allocate");
  transport->then(GetParam().make());
  check(client->clear(), "clear");
  transport->then(GetParam().make());
  check(client->confirm_write(3, {{"k", 1}}, {2}), "confirm_write");
  transport->then(GetParam().make());
  check(client->confirm_write(3, {}, {2}), "confirm_write");
  transport->then(GetParam().make());
  check(client->raw("/keys/batch_exists", "{}"), "raw");
  EXPECT_EQ(transport->posted().size(), 5u);
  EXPECT_TRUE(sleeper->sleeps().empty());
}

TEST_P(ClientAmbiguousTest, AllocateRepeatedWithOptIn) {
  ClientOptions options;
  options.idempotency_policy = std::make_shared<DefaultIdempotencyPolicy>(/*repeat_allocate=*/true);
  auto client = make_client(options);
  transport->then(GetParam().make());
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kAllocate), 2u);
}

INSTANTIATE_TEST_SUITE_P(Failures, ClientAmbiguousTest, ::testing::ValuesIn(kAmbiguous),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(ClientRetryTest, AllocateRepeatedWhenServerDeclaredDedupEarlier) {
  auto client = make_client();
  // Any earlier answer carrying the header makes the client trust the server from then on.
  transport->then(http_answer(200, R"({"exists":[false]})", "application/json", {{"X-Request-Id-Dedup", "60000"}}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  transport->then(transport_failure(errc::timeout, true));
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kAllocate), 2u);
}

TEST_F(ClientRetryTest, AllocateRepeatedWhenThisCallsEarlierAttemptDeclaredDedup) {
  auto client = make_client();
  transport->then(http_answer(503, R"({"detail":"busy"})", "application/json", {{"x-request-id-dedup", "60000"}}));
  transport->then(transport_failure(errc::timeout, true));
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kAllocate), 3u);
}

// The header names the window (ms) in which the server keeps an answer: an ambiguous allocate is
// repeated only if the repeat reaches it within the window from the first attempt's send.
TEST_F(ClientRetryTest, AllocateIsRepeatedOnlyInsideTheAdvertisedWindow) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(std::chrono::milliseconds(10));
  auto client = make_client(options);
  transport->then(http_answer(200, R"({"exists":[false]})", "application/json", {{"X-Request-Id-Dedup", "1000"}}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  // Inside: the first attempt took 900 ms, the repeat leaves 10 ms later.
  transport->then([this](const HttpRequest&, const AttemptTimeouts&) -> TransportResult {
    clock->advance(std::chrono::milliseconds(900));
    return TransportResult(transport_failure(errc::timeout, true));
  });
  transport->then(ok_allocate());
  ASSERT_TRUE(client->allocate(3, {"k"}));
  // Outside: 990 ms + 10 ms of backoff reaches the end of the window.
  transport->then([this](const HttpRequest&, const AttemptTimeouts&) -> TransportResult {
    clock->advance(std::chrono::milliseconds(990));
    return TransportResult(transport_failure(errc::timeout, true));
  });
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().stop_reason, "not safe to repeat allocate after timeout (request sent)");
  EXPECT_EQ(transport->count(kAllocate), 3u);
}

// docs/design.md's table ("Retries"): a releasing confirm_write is not safe to repeat, unless the server declared
// deduplication (its repeat is answered from the first, never applied twice).
TEST_F(ClientRetryTest, ReleasingConfirmIsRepeatedOnlyAgainstADeduplicatingServer) {
  auto client = make_client();
  transport->then(transport_failure(errc::timeout, true));
  auto refused = client->confirm_write(3, {{"k", 1}}, {2});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().stop_reason, "not safe to repeat confirm_write after timeout (request sent)");
  transport->then(http_answer(200, R"({"exists":[false]})", "application/json", {{"X-Request-Id-Dedup", "60000"}}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  transport->then(transport_failure(errc::timeout, true));
  transport->then(http_answer(204, ""));
  auto repeated = client->confirm_write(3, {{"k", 1}}, {2});
  ASSERT_TRUE(repeated) << repeated.error().message();
  EXPECT_EQ(transport->count(kConfirm), 3u);
}

TEST_F(ClientRetryTest, DedupHeaderThatIsNotAPositiveWindowIsNotTrusted) {
  auto client = make_client();
  transport->then(http_answer(503, R"({"detail":"busy"})", "application/json", {{"X-Request-Id-Dedup", "0"}}));
  transport->then(transport_failure(errc::timeout, true));
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().stop_reason, "not safe to repeat allocate after timeout (request sent)");
  EXPECT_EQ(r.error().attempts, 2);
}

// A later answer without the header (the server restarted with deduplication off) withdraws the
// window the server declared before: a lost allocate is not repeated then.
TEST_F(ClientRetryTest, AnAnswerWithoutTheDedupHeaderWithdrawsTheWindow) {
  auto client = make_client();
  transport->then(http_answer(200, R"({"exists":[false]})", "application/json", {{"X-Request-Id-Dedup", "60000"}}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  transport->then(http_answer(200, R"({"exists":[false]})"));
  ASSERT_TRUE(client->batch_exists({"k"}));
  transport->then(transport_failure(errc::timeout, true));
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().stop_reason, "not safe to repeat allocate after timeout (request sent)");
  EXPECT_EQ(r.error().attempts, 1);
}

// ---- Any other code: never repeated ----

TEST_F(ClientRetryTest, ClientErrorsAreNeverRepeated) {
  auto client = make_client();
  const std::vector<TransportResult> answers = {
      detail_answer(400, "Invalid keys format"),
      detail_answer(409, "Confirmation failed: page 1 of key k is not allocated on rank 3"),
      http_answer(422, R"({"detail":[{"loc":["path","rank"],"msg":"bad"}]})"),
      detail_answer(404, "Not Found"),
      detail_answer(500, "Key existence check failed: unhashable type: 'list'"),
      http_answer(200, "not json"),
  };
  for (const auto& a : answers) {
    transport->then(a);
    auto r = client->batch_exists({"k"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().attempts, 1) << r.error().message();
    EXPECT_TRUE(r.error().stop_reason.empty()) << r.error().stop_reason;
  }
  EXPECT_EQ(transport->posted().size(), answers.size());
  EXPECT_TRUE(sleeper->sleeps().empty());
}

// ---- Backoff ----

TEST(BackoffPolicyTest, FullJitterBoundsAndCap) {
  ExponentialBackoffPolicy backoff;
  const std::chrono::nanoseconds expected[] = {50ms, 100ms, 200ms, 400ms, 800ms, 1600ms, 2000ms, 2000ms};
  for (int n = 1; n <= 8; ++n) {
    EXPECT_EQ(backoff.ceiling(n), expected[n - 1]) << "retry " << n;
    EXPECT_EQ(backoff.delay(n, 0.0), 0ns);
    EXPECT_EQ(backoff.delay(n, 0.5), expected[n - 1] / 2);
    EXPECT_LT(backoff.delay(n, 0.999999999), expected[n - 1]);
    EXPECT_GE(backoff.delay(n, 0.999999999), expected[n - 1] * 99 / 100);
  }
  EXPECT_EQ(backoff.ceiling(1000), 2000ms);
  EXPECT_EQ(backoff.delay(1000, 0.25), 500ms);
  ExponentialBackoffPolicy custom(10ms, 35ms);
  EXPECT_EQ(custom.ceiling(1), 10ms);
  EXPECT_EQ(custom.ceiling(2), 20ms);
  EXPECT_EQ(custom.ceiling(3), 35ms);
  EXPECT_EQ(custom.clone()->delay(3, 0.5), 17500us);
}

TEST_F(ClientRetryTest, LoopSleepsWithinTheBackoffBounds) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(8, 60s);
  options.retry_budget.max_tokens = 1000;  // the budget is not under test here
  auto client = make_client(options);
  ExponentialBackoffPolicy reference;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 7; ++i) transport->then(status_answer(503));
    transport->then(ok_exists());
    ASSERT_TRUE(client->batch_exists({"k"}));
  }
  const auto sleeps = sleeper->sleeps();
  ASSERT_EQ(sleeps.size(), 140u);
  std::set<std::int64_t> distinct;
  for (std::size_t i = 0; i < sleeps.size(); ++i) {
    const int retry = static_cast<int>(i % 7) + 1;
    EXPECT_GE(sleeps[i], 0ns);
    EXPECT_LT(sleeps[i], reference.ceiling(retry)) << "retry " << retry;
    distinct.insert(sleeps[i].count());
  }
  EXPECT_GT(distinct.size(), 100u);  // jittered, not a fixed schedule
  // The observer is told the delay it then sleeps.
  std::vector<std::chrono::nanoseconds> reported;
  for (const auto& e : observer->events()) {
    if (e.kind == ObservedEvent::Kind::retry) reported.push_back(e.delay);
  }
  EXPECT_EQ(reported, sleeps);
}

// ---- Deadline ----

TEST_F(ClientRetryTest, DeadlineCutsTheLoopAndEachAttemptsTimeout) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(30ms);
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(10, 100ms);
  auto client = make_client(options);
  // Each attempt uses 40 ms, or its whole timeout if that is shorter.
  transport->otherwise([&](const HttpRequest&, const AttemptTimeouts& t) -> TransportResult {
    clock->advance(std::min<std::chrono::nanoseconds>(40ms, t.total));
    return status_answer(503);
  });
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  const auto posted = transport->posted();
  ASSERT_EQ(posted.size(), 2u);
  EXPECT_EQ(posted[0].timeouts.total, 100ms);
  EXPECT_EQ(posted[0].timeouts.connect, 100ms);
  EXPECT_EQ(posted[1].timeouts.total, 30ms);  // 100 - 40 - 30
  EXPECT_EQ(posted[1].timeouts.connect, 30ms);
  EXPECT_EQ(sleeper->sleeps(), (std::vector<std::chrono::nanoseconds>{30ms}));
  EXPECT_LE(clock->elapsed(), 100ms);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(r.error().stop_reason, "deadline of 0.1 s reached after 2 attempts in 0.1 s");
}

TEST_F(ClientRetryTest, NeverSleepsPastTheDeadline) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(80ms);
  auto client = make_client(options);
  transport->then([&](const HttpRequest&, const AttemptTimeouts&) -> TransportResult {
    clock->advance(40ms);
    return status_answer(503);
  });
  CallOptions call;
  call.deadline = 100ms;  // per call, replacing the policy's 10 s
  auto r = client->batch_exists({"k"}, call);
  ASSERT_FALSE(r);
  EXPECT_TRUE(sleeper->sleeps().empty());  // 40 + 80 would pass 100
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().stop_reason,
            "stopped after 1 attempt in 0.04 s: the next attempt, after a 0.08 s backoff, could not start within the "
            "deadline of 0.1 s");
}

TEST_F(ClientRetryTest, SpentDeadlineSendsNothing) {
  auto client = make_client();
  CallOptions call;
  call.deadline = 0ms;
  auto r = client->batch_exists({"k"}, call);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_FALSE(r.error().sent);
  EXPECT_EQ(r.error().attempts, 0);
  EXPECT_TRUE(transport->posted().empty());
}

// ---- Retry budget ----

TEST_F(ClientRetryTest, BudgetStopsRetriesAtFiveTokensAndRefillsWithSuccesses) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(4, 600s);
  auto client = make_client(options);
  transport->otherwise([](const HttpRequest&, const AttemptTimeouts&) { return status_answer(503); });

  // 10 tokens -> 4 failures -> 6.
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 4);
  EXPECT_THAT(r.error().stop_reason, StartsWith("retry policy exhausted"));
  // 6 -> 5: no retry at 5 or fewer.
  r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().stop_reason, "retry budget exhausted");
  EXPECT_THAT(r.error().message(), HasSubstr("retry budget exhausted; last error: unavailable (503)"));

  // 10 successes: 5 -> 6.0; a failure takes it to 5.0: still no retry.
  auto succeed = [&](int n) {
    for (int i = 0; i < n; ++i) {
      transport->then(ok_exists());
      ASSERT_TRUE(client->batch_exists({"k"}));
    }
  };
  succeed(10);
  r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().stop_reason, "retry budget exhausted");

  // 11 successes: 5.0 -> 6.1; a failure leaves 5.1: retries resume.
  succeed(11);
  transport->then(status_answer(503));
  transport->then(ok_exists());
  auto ok = client->batch_exists({"k"});
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(observer->trace().back(), "success 2");
}

TEST_F(ClientRetryTest, BudgetIsSharedByCallsOfOneClient) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(3, 600s);
  auto client = make_client(options);
  transport->otherwise([](const HttpRequest&, const AttemptTimeouts&) { return status_answer(503); });
  (void)client->batch_exists({"k"});                  // 10 -> 7
  (void)client->get_locations(3, {"k"});              // 7 -> 6 -> 5: one retry
  auto r = client->allocate(3, {"k"});  // 5 -> 4: none
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().stop_reason, "retry budget exhausted");
  EXPECT_EQ(transport->posted().size(), 3u + 2u + 1u);
  // Another client has its own budget.
  auto other = make_client(options);
  (void)other->batch_exists({"k"});
  EXPECT_EQ(transport->posted().size(), 6u + 3u);
}

// ---- Re-initialization ----

// A worker that starts during an outage: its first initialize fails, yet the rank is registered,
// so it is restored once the server answers "not initialized".
TEST_F(ClientRetryTest, EnsureInitializedRegistersBeforeSending) {
  auto client = make_client();
  transport->then(status_answer(404));  // not repeated: the initialize fails
  ASSERT_FALSE(client->ensure_initialized(3, 64));
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate("k", 0));
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(request_path(Route::initialize, 3)), 2u);
  // Refused by the client itself: nothing registered, nothing sent.
  EXPECT_EQ(client->ensure_initialized(4, 0).error().code, errc::invalid_argument);
  transport->then(allocate_not_initialized(4));
  EXPECT_EQ(client->allocate(4, {"k"}).error().code, errc::rank_not_initialized);
  EXPECT_EQ(transport->count(request_path(Route::initialize, 4)), 0u);
}

// An answer body over ClientOptions::max_answer_bytes is a protocol_error, never repeated (a
// transport that read it anyway; CurlTransport stops reading at the limit, curl_transport_test).
TEST_F(ClientRetryTest, AnAnswerOverTheLimitIsAProtocolError) {
  ClientOptions options;
  options.max_answer_bytes = 100;
  auto client = make_client(options);
  transport->then(http_answer(200, R"({"exists":[)" + std::string(200, ' ') + "true]}"));
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_THAT(r.error().detail, HasSubstr("larger than 100 bytes"));
  transport->then(transport_failure(errc::protocol_error, true, "too large"));
  EXPECT_EQ(client->batch_exists({"k"}).error().attempts, 1);
}

TEST_F(ClientRetryTest, ServerForgettingARankCostsOneInitialize) {
  auto client = make_client();
  transport->then(ok_init());
  ASSERT_TRUE(client->ensure_initialized(3, 64));
  observer->reset();
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate("k", 7));
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), (std::vector<Page>{7}));
  EXPECT_EQ(transport->count(request_path(Route::initialize, 3)), 2u);  // ensure_initialized's, and one restore
  EXPECT_EQ(transport->posted()[2].body, R"({"num_pages":64,"role":"worker"})");
  EXPECT_TRUE(sleeper->sleeps().empty());  // repeated at once
  const auto events = observer->events();
  const std::string id = events.front().request_id;
  EXPECT_EQ(observer->trace(id),
            (std::vector<std::string>{"attempt 1", "reinitialize 3", "attempt 2", "success 2"}));
  EXPECT_TRUE(events.back().reinitialized);
}

TEST_F(ClientRetryTest, RestoreDoesNotCostBudgetTokens) {
  auto client = make_client();
  client->register_rank(3, 64);
  // Ten forgotten-rank episodes would have drained a budget of 10 if each cost a token.
  for (int i = 0; i < 10; ++i) {
    transport->then(allocate_not_initialized());
    transport->then(ok_init());
    transport->then(ok_allocate());
    ASSERT_TRUE(client->allocate(3, {"k"}));
  }
  transport->then(status_answer(503));
  transport->then(ok_allocate());
  EXPECT_TRUE(client->allocate(3, {"k"}));
}

TEST_F(ClientRetryTest, GetLocationsIsRepeatedAfterRestore) {
  auto client = make_client();
  client->register_rank(3, 64);
  transport->then(detail_answer(500, "Failed to get key locations: Rank 3 not initialized"));
  transport->then(ok_init());
  transport->then(ok_locations());
  auto r = client->get_locations(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->count(kLocations), 2u);
}

TEST_F(ClientRetryTest, RegisteredRankSendsNothingUntilTheServerForgets) {
  auto client = make_client();
  client->register_rank(3, 16);
  EXPECT_TRUE(transport->posted().empty());
  transport->then(ok_allocate());
  ASSERT_TRUE(client->allocate(3, {"k"}));
  EXPECT_EQ(transport->count(request_path(Route::initialize, 3)), 0u);
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate());
  ASSERT_TRUE(client->allocate(3, {"k"}));
  const auto posted = transport->posted();
  ASSERT_EQ(posted.size(), 4u);
  EXPECT_EQ(posted[2].path, "/rank/3/initialize");
  EXPECT_EQ(posted[2].body, R"({"num_pages":16,"role":"worker"})");
  EXPECT_NE(posted[2].request_id, posted[1].request_id);  // the restore is its own logical call
  EXPECT_EQ(posted[3].request_id, posted[1].request_id);
}

TEST_F(ClientRetryTest, ConfirmWriteRestoresButIsNotRepeated) {
  auto client = make_client();
  client->register_rank(3, 64);
  transport->then(detail_answer(500, "Confirmation failed: 3"));
  transport->then(ok_init());
  auto r = client->confirm_write(3, {{"k", 1}}, {2});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_TRUE(r.error().reinitialized);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().rank, 3);
  EXPECT_THAT(r.error().message(), HasSubstr("allocate again"));
  EXPECT_EQ(transport->count(kConfirm), 1u);
  EXPECT_EQ(transport->count("/rank/3/initialize"), 1u);
  EXPECT_EQ(observer->trace().back(), "give_up 1");
}

TEST_F(ClientRetryTest, AtMostOneRestorePerCall) {
  auto client = make_client();
  client->register_rank(3, 64);
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(allocate_not_initialized());
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_TRUE(r.error().reinitialized);
  EXPECT_FALSE(r.error().stop_reason.empty());
  EXPECT_EQ(transport->count("/rank/3/initialize"), 1u);
  // The next call may restore again: the limit is per call.
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate());
  EXPECT_TRUE(client->allocate(3, {"k"}));
}

TEST_F(ClientRetryTest, UnregisteredRankFailsAtOnceSayingHowToFixIt) {
  auto client = make_client();
  transport->then(allocate_not_initialized(5));
  auto r = client->allocate(5, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_FALSE(r.error().reinitialized);
  EXPECT_THAT(r.error().message(), HasSubstr("ensure_initialized(5, num_pages)"));
  EXPECT_EQ(transport->posted().size(), 1u);
  // A registered rank 3 does not make rank 5 restorable.
  client->register_rank(3, 64);
  transport->then(allocate_not_initialized(5));
  EXPECT_FALSE(client->allocate(5, {"k"}));
  EXPECT_EQ(transport->posted().size(), 2u);
}

TEST_F(ClientRetryTest, FailedRestoreIsReported) {
  auto client = make_client();
  client->register_rank(3, 64);
  transport->then(allocate_not_initialized());
  transport->then(detail_answer(400, "Invalid initialization parameters"));
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_FALSE(r.error().reinitialized);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("re-initializing rank 3 failed"));
  EXPECT_THAT(r.error().stop_reason, HasSubstr("Invalid initialization parameters"));
}

TEST_F(ClientRetryTest, RegisteredWithInvalidPagesRestoreRefusedBeforeSending) {
  auto client = make_client();
  client->register_rank(3, 0);
  transport->then(allocate_not_initialized());
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("num_pages: must be positive"));
  EXPECT_EQ(transport->posted().size(), 1u);
}

// Registered first (EnsureInitializedRegistersBeforeSending), but not kept when the server refuses
// the parameters themselves: a restore with them could never succeed.
TEST_F(ClientRetryTest, EnsureInitializedKeepsNoRegistrationTheServerRefuses) {
  auto client = make_client();
  transport->then(detail_answer(400, "Invalid initialization parameters"));
  EXPECT_FALSE(client->ensure_initialized(3, 64));
  transport->then(allocate_not_initialized());
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_FALSE(r.error().reinitialized);
  EXPECT_EQ(transport->posted().size(), 2u);
}

TEST_F(ClientRetryTest, SchedulerEnsureInitializedNeitherRegistersNorChangesARegistration) {
  const auto ok_scheduler = [] {
    return http_answer(200, R"({"message":"Scheduler role does not require initialization"})");
  };
  auto client = make_client();
  // Alone: nothing to restore, so rank 5 stays unregistered.
  transport->then(ok_scheduler());
  ASSERT_TRUE(client->ensure_initialized(5, 0, Role::scheduler));
  transport->then(allocate_not_initialized(5));
  auto r = client->allocate(5, {"k"});
  ASSERT_FALSE(r);
  EXPECT_FALSE(r.error().reinitialized);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("not registered"));
  EXPECT_EQ(transport->posted().size(), 2u);
  // After a worker's: the worker's registration (pages and role) is what a restore sends.
  transport->then(ok_init());
  ASSERT_TRUE(client->ensure_initialized(3, 64));
  transport->then(ok_scheduler());
  ASSERT_TRUE(client->ensure_initialized(3, 0, Role::scheduler));
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate());
  ASSERT_TRUE(client->allocate(3, {"k"}));
  ASSERT_EQ(transport->posted().size(), 7u);
  EXPECT_EQ(transport->posted()[5].body, R"({"num_pages":64,"role":"worker"})");
}

TEST_F(ClientRetryTest, RestoreUsesTheRegisteredRoleAndLatestPages) {
  auto client = make_client();
  client->register_rank(3, 64);
  client->register_rank(3, 128);
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate());
  ASSERT_TRUE(client->allocate(3, {"k"}));
  EXPECT_EQ(transport->posted()[1].body, R"({"num_pages":128,"role":"worker"})");
}

// ---- Request ids and the observer ----

TEST_F(ClientRetryTest, RequestIdSameAcrossAttemptsDifferentAcrossCalls) {
  auto client = make_client();
  transport->then(status_answer(503));
  transport->then(transport_failure(errc::connection_failed, false));
  transport->then(ok_exists());
  transport->then(ok_exists());
  ASSERT_TRUE(client->batch_exists({"k"}));
  ASSERT_TRUE(client->batch_exists({"k"}));
  const auto posted = transport->posted();
  ASSERT_EQ(posted.size(), 4u);
  EXPECT_FALSE(posted[0].request_id.empty());
  EXPECT_EQ(posted[0].request_id, posted[1].request_id);
  EXPECT_EQ(posted[1].request_id, posted[2].request_id);
  EXPECT_NE(posted[2].request_id, posted[3].request_id);
  // Another client's ids differ too.
  auto other = make_client();
  transport->then(ok_exists());
  ASSERT_TRUE(other->batch_exists({"k"}));
  EXPECT_NE(transport->posted().back().request_id, posted[3].request_id);
  EXPECT_NE(transport->posted().back().request_id, posted[0].request_id);
}

TEST_F(ClientRetryTest, ObserverSeesEveryStepInOrder) {
  auto client = make_client();
  client->register_rank(3, 64);
  transport->then(status_answer(503));
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(ok_allocate());
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  const auto events = observer->events();
  const std::string call_id = transport->posted()[0].request_id;
  const std::string init_id = transport->posted()[2].request_id;
  // Who did what, in the order the observer saw it.
  std::vector<std::string> seen;
  for (const auto& e : events) {
    std::string kind;
    switch (e.kind) {
      case ObservedEvent::Kind::attempt: kind = "attempt " + std::to_string(e.attempt); break;
      case ObservedEvent::Kind::retry: kind = "retry " + std::to_string(e.attempt); break;
      case ObservedEvent::Kind::reinitialize: kind = "reinitialize " + std::to_string(e.rank); break;
      case ObservedEvent::Kind::give_up: kind = "give_up"; break;
      case ObservedEvent::Kind::success: kind = "success " + std::to_string(e.attempt); break;
    }
    seen.push_back((e.request_id == call_id ? "call " : e.request_id == init_id ? "init " : "? ") + kind);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"call attempt 1", "call retry 1", "call attempt 2", "call reinitialize 3",
                                            "init attempt 1", "init success 1", "call attempt 3", "call success 3"}));
  EXPECT_EQ(events[1].code, errc::unavailable);
  EXPECT_EQ(events[1].operation, Operation::allocate);
  EXPECT_EQ(events[4].operation, Operation::initialize);
  EXPECT_TRUE(events.back().reinitialized);

  observer->reset();
  transport->then(detail_answer(400, "Invalid keys format"));
  EXPECT_FALSE(client->batch_exists({"k"}));
  EXPECT_EQ(observer->trace(), (std::vector<std::string>{"attempt 1", "give_up 1"}));
  EXPECT_EQ(observer->events().back().code, errc::invalid_request);

  // Refused before sending: no request, no events.
  observer->reset();
  EXPECT_FALSE(client->batch_exists({""}));
  EXPECT_TRUE(observer->events().empty());
}

TEST_F(ClientRetryTest, RestoreCountsAsAnAttemptButItsRepeatIsAlwaysAllowed) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(2, 10s);
  auto client = make_client(options);
  client->register_rank(3, 64);
  transport->then(status_answer(503));
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(allocate_not_initialized());  // the repeat: the rank is gone again
  auto r = client->allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 3);
  EXPECT_TRUE(r.error().reinitialized);
  EXPECT_EQ(transport->count(kAllocate), 3u);
}

TEST_F(ClientRetryTest, OneAttemptPolicyStillRepeatsAfterARestore) {
  ClientOptions options;
  options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(1, 10s);
  auto client = make_client(options);
  client->register_rank(3, 64);
  transport->then(allocate_not_initialized());
  transport->then(ok_init());
  transport->then(http_answer(200, R"({"rank":3,"results":[["k",0]]})"));
  auto r = client->allocate(3, {"k"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value()[0], 0);
  EXPECT_EQ(transport->count(kAllocate), 2u);
}

}  // namespace
}  // namespace hf3fs_meta
