// Restart recovery, retries and exactly-once allocate, against a real server that forgets its state,
// fails on purpose (POST /_faults), or is killed and started again on the same port.
#include <algorithm>
#include <thread>

#include "contract/contract_support.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::ElementsAre;
using ::testing::Ge;
using ::testing::HasSubstr;
using Kind = testing::ObservedEvent::Kind;

class ContractResilienceTest : public ContractTest {
 protected:
  std::shared_ptr<testing::RecordingObserver> observer_ = std::make_shared<testing::RecordingObserver>();

  // The request id of the first call the observer saw after its last reset.
  std::string first_request_id() {
    const auto events = observer_->events();
    return events.empty() ? std::string() : events.front().request_id;
  }
  std::size_t count(Kind kind) {
    const auto events = observer_->events();
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const auto& e) { return e.kind == kind; }));
  }
  std::vector<testing::ObservedEvent> of_kind(Kind kind) {
    std::vector<testing::ObservedEvent> out;
    for (auto& e : observer_->events()) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
};

// ---- Restart recovery ----

TEST_F(ContractResilienceTest, AllocateAfterTheServerForgotReinitializesOnceAndSucceeds) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  ASSERT_THAT(client->allocate(0, {"a", "b"}),
              HasValue(ElementsAre(0, 1)));
  ASSERT_THAT(client->confirm_write(0, {{"a", 0}}), IsOk());

  forget_state();
  EXPECT_EQ(snapshot(), (StateSnapshot{{}, 0}));
  observer_->reset();

  EXPECT_THAT(client->allocate(0, {"c"}), HasValue(ElementsAre(0)));
  const auto id = first_request_id();
  EXPECT_THAT(observer_->trace(id), ElementsAre("attempt 1", "reinitialize 0", "attempt 2", "success 2"));
  EXPECT_EQ(count(Kind::reinitialize), 1u);
  ASSERT_EQ(of_kind(Kind::success).size(), 2u);  // the restoring initialize, then the allocate
  EXPECT_TRUE(of_kind(Kind::success).back().reinitialized);
  EXPECT_EQ(requests("/rank/{rank}/initialize", 200), 2);
  EXPECT_EQ(requests("/keys/batch_allocate", 500), 1);
  EXPECT_EQ(pages(0), (RankPages{7, 1, 0, 0, 0}));

  // Page 1 was b's before the server forgot: free now, so confirming it is refused and changes nothing.
  observer_->reset();
  auto stale = client->confirm_write(0, {{"b", 1}});
  ASSERT_THAT(stale, FailsWith(errc::stale_allocation));
  EXPECT_EQ(stale.error().detail, "Confirmation failed: page 1 of key b is not allocated on rank 0");
  EXPECT_FALSE(stale.error().reinitialized);
  EXPECT_EQ(stale.error().attempts, 1);
  EXPECT_EQ(count(Kind::reinitialize), 0u);
  EXPECT_THAT(client->batch_exists({"a", "b", "c"}), HasValue(ElementsAre(false, false, false)));
  EXPECT_EQ(pages(0), (RankPages{7, 1, 0, 0, 0}));
}

TEST_F(ContractResilienceTest, ConfirmAfterTheServerForgotReinitializesButIsNotRepeated) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  ASSERT_THAT(client->allocate(0, {"a"}), HasValue(ElementsAre(0)));
  forget_state();
  observer_->reset();

  auto r = client->confirm_write(0, {{"a", 0}});
  ASSERT_THAT(r, FailsWith(errc::rank_not_initialized));
  EXPECT_TRUE(r.error().reinitialized);
  EXPECT_EQ(r.error().status, 500);
  EXPECT_EQ(r.error().detail, "Confirmation failed: 0");
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("allocate again"));
  EXPECT_THAT(observer_->trace(first_request_id()), ElementsAre("attempt 1", "reinitialize 0", "give_up 1"));
  // The rank is back, empty; the confirmation was applied neither before nor after.
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{8, 0, 0, 0, 0}}}, 0}));

  observer_->reset();
  EXPECT_THAT(client->allocate(0, {"a"}), HasValue(ElementsAre(0)));
  EXPECT_EQ(count(Kind::reinitialize), 0u);
  EXPECT_EQ(count(Kind::attempt), 1u);
}

TEST_F(ContractResilienceTest, AllocateAfterARealRestartOnTheSamePortReinitializesOnce) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  ASSERT_THAT(client->ensure_initialized(1, 8), IsOk());
  ASSERT_THAT(client->allocate(0, {"a", "b"}),
              HasValue(ElementsAre(0, 1)));
  ASSERT_THAT(client->confirm_write(0, {{"a", 0}}), IsOk());

  const auto port = server_.port();
  const auto old_pid = server_.pid();
  server_.restart();
  ASSERT_EQ(server_.port(), port);
  ASSERT_NE(server_.pid(), old_pid);
  EXPECT_EQ(snapshot(), (StateSnapshot{{}, 0}));
  observer_->reset();

  // The pooled connection died with the old process; libcurl reconnects before sending. The client
  // restores rank 0 exactly once, and not rank 1, which this call does not need.
  EXPECT_THAT(client->allocate(0, {"c"}), HasValue(ElementsAre(0)));
  EXPECT_THAT(observer_->trace(first_request_id()), ElementsAre("attempt 1", "reinitialize 0", "attempt 2", "success 2"));
  const auto reinitializations = of_kind(Kind::reinitialize);
  ASSERT_EQ(reinitializations.size(), 1u);
  EXPECT_EQ(reinitializations.front().rank, 0);
  ASSERT_FALSE(of_kind(Kind::success).empty());
  EXPECT_TRUE(of_kind(Kind::success).back().reinitialized);
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{7, 1, 0, 0, 0}}}, 0}));

  auto stale = client->confirm_write(0, {{"b", 1}});
  ASSERT_THAT(stale, FailsWith(errc::stale_allocation));
  EXPECT_EQ(stale.error().detail, "Confirmation failed: page 1 of key b is not allocated on rank 0");

  // Rank 1 comes back on its first use.
  observer_->reset();
  EXPECT_THAT(client->get_locations(1, {"a"}), HasValue(ElementsAre(std::nullopt)));
  EXPECT_EQ(count(Kind::reinitialize), 1u);
}

// The server is down for a second (connections refused), then back with no state. A call
// with the SDK's default policies rides it out: refused connections are repeated until the deadline
// (not an attempt count, not spending the retry budget), then the rank is restored. A worker that
// started during the outage (its ensure_initialized failed) is restored as well.
TEST_F(ContractResilienceTest, ACallRidesOutARealRestart) {
  ClientOptions options;
  options.base_url = server_.base_url();
  options.observer = observer_;
  Client client(options);
  ASSERT_THAT(client.ensure_initialized(0, 8), IsOk());
  server_.kill();
  EXPECT_THAT(client.ensure_initialized(1, 8, Role::worker, CallOptions{std::chrono::milliseconds(100)}),
              FailsWith(errc::connection_failed));
  observer_->reset();
  // The calls run on another thread; the server is restarted from this one (a server started by a
  // thread that then ends would get its parent-death signal).
  Result<std::vector<Page>> allocated = Error{};
  Result<std::vector<std::optional<Page>>> located = Error{};
  std::thread calls([&] {
    allocated = client.allocate(0, {"a"});
    located = client.get_locations(1, {"a"});
  });
  // The outage is being ridden out: the allocate's refused connections repeated, twice at least.
  const auto refused_repeats = [&] {
    const auto events = observer_->events();
    return std::count_if(events.begin(), events.end(), [](const auto& e) {
      return e.kind == Kind::retry && e.operation == Operation::allocate && e.code == errc::connection_failed;
    });
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (refused_repeats() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(refused_repeats(), 2) << "the allocate never met the outage";
  server_.restart();
  calls.join();
  ASSERT_THAT(allocated, HasValue(ElementsAre(0)));
  EXPECT_THAT(located, HasValue(ElementsAre(std::nullopt)));
  EXPECT_EQ(snapshot(), (StateSnapshot{{{0, RankPages{7, 1, 0, 0, 0}}, {1, RankPages{8, 0, 0, 0, 0}}}, 0}));
}

TEST_F(ContractResilienceTest, ConcurrentCallsAfterAForgetShareOneReinitialization) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 64), IsOk());
  forget_state();
  observer_->reset();

  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<Result<std::vector<Page>>> results(kThreads, Error{});
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string key = "k";  // (not "k" + to_string: GCC 12 warns falsely, -Wrestrict)
      key += std::to_string(t);
      results[static_cast<std::size_t>(t)] = client->allocate(0, {key});
    });
  }
  for (auto& thread : threads) thread.join();

  std::vector<Page> taken;
  for (const auto& r : results) {
    ASSERT_THAT(r, IsOk());
    taken.push_back(r.value().front());
  }
  std::sort(taken.begin(), taken.end());
  EXPECT_THAT(taken, ElementsAre(0, 1, 2, 3));
  // However the calls interleave, the server saw one initialize for the restore.
  EXPECT_EQ(requests("/rank/{rank}/initialize", 200), 2);
  EXPECT_EQ(count(Kind::reinitialize), 1u);
  EXPECT_EQ(pages(0), (RankPages{60, 4, 0, 0, 0}));
}

// ---- Retries ----

TEST_F(ContractResilienceTest, Two503sThenSuccess) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  add_fault(R"({"path":"/keys/batch_allocate","status":503,"times":2})");
  observer_->reset();

  EXPECT_THAT(client->allocate(0, {"k"}), HasValue(ElementsAre(0)));
  EXPECT_THAT(observer_->trace(),
              ElementsAre("attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3", "success 3"));
  for (const auto& retry : of_kind(Kind::retry)) EXPECT_EQ(retry.code, errc::unavailable);
  EXPECT_EQ(requests("/keys/batch_allocate", 503), 2);
  EXPECT_EQ(requests("/keys/batch_allocate", 200), 1);
  EXPECT_EQ(pages(0), (RankPages{7, 1, 0, 0, 0}));
}

TEST_F(ContractResilienceTest, ADelayPastTheTimeoutThenSuccess) {
  auto o = fast_options(server_);
  o.request_timeout = std::chrono::milliseconds(300);
  o.observer = observer_;
  Client client(std::move(o));
  ASSERT_THAT(client.ensure_initialized(0, 8), IsOk());
  add_fault(R"({"path":"/keys/get_locations","delay_ms":1000,"times":1})");
  observer_->reset();

  EXPECT_THAT(client.get_locations(0, {"k"}), HasValue(ElementsAre(std::nullopt)));
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "success 2"));
  ASSERT_EQ(of_kind(Kind::retry).size(), 1u);
  EXPECT_EQ(of_kind(Kind::retry).front().code, errc::timeout);
}

TEST_F(ContractResilienceTest, ADelayedAllocateRepeatedAfterItsTimeoutIsAppliedOnce) {
  auto o = fast_options(server_, 8);
  o.request_timeout = std::chrono::milliseconds(400);
  o.observer = observer_;
  Client client(std::move(o));
  ASSERT_THAT(client.ensure_initialized(0, 8), IsOk());  // its answer declares X-Request-Id-Dedup
  add_fault(R"({"path":"/keys/batch_allocate","delay_ms":700,"times":1})");
  observer_->reset();

  // The repeat reaches the server while the first is still held back: it waits for the first one's
  // answer instead of taking pages again.
  EXPECT_THAT(client.allocate(0, {"a", "b"}),
              HasValue(ElementsAre(0, 1)));
  EXPECT_THAT(count(Kind::attempt), Ge(2u));
  EXPECT_EQ(of_kind(Kind::retry).front().code, errc::timeout);
  EXPECT_EQ(pages(0), (RankPages{6, 2, 0, 0, 0}));
  EXPECT_GE(dedup_hits(), 1);
}

TEST_F(ContractResilienceTest, ADroppedConnectionIsRepeatedForASafeCall) {
  auto client = make_client(4, observer_);
  add_fault(R"({"path":"/keys/batch_exists","close_connection":"before","times":1})");

  EXPECT_THAT(client->batch_exists({"k"}), HasValue(ElementsAre(false)));
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "success 2"));
  ASSERT_EQ(of_kind(Kind::retry).size(), 1u);
  EXPECT_EQ(of_kind(Kind::retry).front().code, errc::connection_failed);
  EXPECT_EQ(requests("/keys/batch_exists", 200), 1);

  // The same on the connection the client now keeps open.
  add_fault(R"({"path":"/keys/batch_exists","close_connection":"before","times":1})");
  observer_->reset();
  EXPECT_THAT(client->batch_exists({"k"}), HasValue(ElementsAre(false)));
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "success 2"));
  EXPECT_EQ(requests("/keys/batch_exists", 200), 2);
}

TEST_F(ContractResilienceTest, TheRetryBudgetStopsRetriesAndRefillsWithSuccesses) {
  auto client = make_client(4, observer_);
  add_fault(R"({"path":"/keys/batch_exists","status":503,"times":1000})");

  // 10 tokens; each 503 takes one; no retry once 5 or fewer are left.
  auto first = client->batch_exists({"k"});
  ASSERT_THAT(first, FailsWith(errc::unavailable));
  EXPECT_EQ(first.error().attempts, 4);  // 10 -> 6 tokens
  EXPECT_THAT(first.error().stop_reason, HasSubstr("retry policy exhausted"));

  observer_->reset();
  auto second = client->batch_exists({"k"});
  ASSERT_THAT(second, FailsWith(errc::unavailable));
  EXPECT_EQ(second.error().attempts, 1);  // 6 -> 5: no retry
  EXPECT_EQ(second.error().stop_reason, "retry budget exhausted");
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "give_up 1"));

  auto third = client->batch_exists({"k"});
  ASSERT_THAT(third, FailsWith(errc::unavailable));
  EXPECT_EQ(third.error().attempts, 1);  // 5 -> 4
  EXPECT_EQ(requests("/keys/batch_exists", 503), 6);

  // Each success gives back 0.1 token: 21 of them (4 -> 6.1) let the next failure be retried again.
  ASSERT_EQ(testing::raw_request(server_.host(), server_.port(), "DELETE", "/_faults").status, 200);
  for (int i = 0; i < 21; ++i) ASSERT_THAT(client->batch_exists({"k"}), IsOk());
  add_fault(R"({"path":"/keys/batch_exists","status":503,"times":1})");
  observer_->reset();
  EXPECT_THAT(client->batch_exists({"k"}), HasValue(ElementsAre(false)));
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "success 2"));
}

// ---- Exactly-once allocate ----

TEST_F(ContractResilienceTest, AnAllocateWhoseAnswerIsLostOnceIsAppliedOnce) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());  // its answer declares X-Request-Id-Dedup
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"after","times":1})");
  observer_->reset();

  EXPECT_THAT(client->allocate(0, {"a", "b", "c"}),
              HasValue(ElementsAre(0, 1, 2)));
  // The client saw the drop (request sent, no answer) and repeated the allocate, which it may do
  // because the server declared deduplication; the repeat carried the same X-Request-Id.
  EXPECT_THAT(observer_->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "success 2"));
  for (const auto& e : observer_->events()) EXPECT_EQ(e.request_id, first_request_id());
  ASSERT_EQ(of_kind(Kind::retry).size(), 1u);
  EXPECT_EQ(of_kind(Kind::retry).front().code, errc::connection_failed);
  // The server applied it once and answered the repeat from its cache: three pages for three keys.
  EXPECT_EQ(dedup_hits(), 1);
  EXPECT_EQ(pages(0), (RankPages{5, 3, 0, 0, 0}));
}

// Every request the server receives for a call must be an attempt the client decided on and the
// observer saw. On a reused keep-alive connection that closes without an answer, libcurl would
// resend the POST by itself ("Connection died, retrying a fresh connect"); against vLLM's server
// (no dedup) that applies an allocate twice, which docs/design.md's idempotency rule ("Retries") forbids.
TEST_F(ContractResilienceTest, TheObserverSeesEveryRequestTheServerReceives) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());  // leaves a pooled connection
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"after","times":1})");
  observer_->reset();

  ASSERT_THAT(client->allocate(0, {"a"}), IsOk());
  EXPECT_EQ(static_cast<std::int64_t>(count(Kind::attempt)), 1 + dedup_hits())
      << "the server received the allocate " << 1 + dedup_hits() << " times; the client attempted it "
      << count(Kind::attempt) << " time(s)";
}

TEST_F(ContractResilienceTest, AnAllocateWhoseAnswerIsLostIsRepeatedAndGetsTheSamePages) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());  // its answer declares X-Request-Id-Dedup
  ASSERT_THAT(client->allocate(0, {"first"}), HasValue(ElementsAre(0)));
  // Two drops: the repeat is answered from the cache, and that answer is lost too.
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"after","times":2})");
  observer_->reset();

  auto r = client->allocate(0, {"a", "b", "c"});
  EXPECT_THAT(r, HasValue(ElementsAre(1, 2, 3)));
  EXPECT_THAT(observer_->trace(),
              ElementsAre("attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3", "success 3"));
  for (const auto& retry : of_kind(Kind::retry)) EXPECT_EQ(retry.code, errc::connection_failed);
  for (const auto& e : observer_->events()) EXPECT_EQ(e.request_id, first_request_id());
  // Applied once: three pages allocated for three keys, and both repeats answered from the cache.
  EXPECT_EQ(pages(0), (RankPages{4, 4, 0, 0, 0}));
  EXPECT_EQ(dedup_hits(), 2);
  // A dropped exchange is not counted; the two answered ones are "first" and the final one.
  EXPECT_EQ(requests("/keys/batch_allocate", 200), 2);

  // The pages are usable: confirming them works and no page was lost.
  ASSERT_THAT(client->confirm_write(0, {{"a", 1}, {"b", 2}, {"c", 3}}, {0}), IsOk());
  EXPECT_EQ(pages(0), (RankPages{5, 0, 3, 0, 0}));
}

TEST_F(ContractResilienceTest, AnAllocateDroppedBeforeItIsHandledIsRepeatedAndAppliedOnce) {
  auto client = make_client(4, observer_);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"before","times":2})");
  observer_->reset();

  EXPECT_THAT(client->allocate(0, {"a", "b"}),
              HasValue(ElementsAre(0, 1)));
  EXPECT_THAT(observer_->trace(),
              ElementsAre("attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3", "success 3"));
  EXPECT_EQ(pages(0), (RankPages{6, 2, 0, 0, 0}));
  EXPECT_EQ(dedup_hits(), 0);  // never applied before the third attempt: nothing to repeat
}

TEST_F(ContractResilienceTest, WithoutTheServersDedupHeaderALostAllocateIsNotRepeated) {
  // The rank is made by someone else: this client's first answer is the one that gets lost, so it
  // has never seen X-Request-Id-Dedup and must not repeat the allocate.
  ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":8})").status, 200);
  auto client = make_client(4, observer_);
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"after","times":1})");

  auto r = client->allocate(0, {"a", "b"});
  ASSERT_THAT(r, FailsWith(errc::connection_failed));
  EXPECT_TRUE(r.error().sent);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("not safe to repeat allocate"));
  // The server did apply it: the two pages are allocated to an answer nobody read.
  EXPECT_EQ(pages(0), (RankPages{6, 2, 0, 0, 0}));

  // A client that opts in repeats it; the server's dedup still makes it apply once.
  auto o = fast_options(server_);
  o.idempotency_policy = std::make_shared<DefaultIdempotencyPolicy>(/*repeat_allocate=*/true);
  Client opted_in(std::move(o));
  add_fault(R"({"path":"/keys/batch_allocate","close_connection":"after","times":1})");
  EXPECT_THAT(opted_in.allocate(0, {"c"}), HasValue(ElementsAre(2)));
  EXPECT_EQ(pages(0), (RankPages{5, 3, 0, 0, 0}));
}

}  // namespace
}  // namespace hf3fs_meta::contract
