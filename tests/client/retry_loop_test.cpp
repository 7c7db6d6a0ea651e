// The retry loop on its own (src/client/retry_loop.hpp): a scripted attempt functor instead of a
// transport, a fake clock and sleeper, a real rank registry. What the client does over HTTP is in
// client_retry_test.cpp; here, what the loop decides from the policies and the outcomes alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/retry_loop.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace hf3fs_meta::testing;

Error failure(errc code, std::optional<int> status, bool sent = true) {
  Error e;
  e.code = code;
  e.status = status;
  e.sent = sent;
  e.detail = "scripted";
  return e;
}
Error http(int status, errc code) { return failure(code, status); }
Error refused() { return failure(errc::connection_failed, std::nullopt, false); }
Error lost_rank(Rank rank) {
  Error e = http(500, errc::rank_not_initialized);
  e.rank = rank;
  return e;
}

double three_quarters() { return 0.75; }

class RetryLoopTest : public ::testing::TestWithParam<bool> {
 protected:
  RetryLoopPolicies policies() {
    return RetryLoopPolicies{*retry,  backoff, idempotency,     budget,
                             *clock,  sleeper, &observer,       AttemptTimeouts{milliseconds(1000), milliseconds(5000)},
                             &three_quarters};
  }

  CallSpec call(Operation op, std::optional<Rank> rank = std::nullopt, milliseconds deadline = milliseconds(10000)) {
    const auto now = clock->now();
    return CallSpec{op, rank, false, now, now + deadline, deadline, "rid-1"};
  }

  // Runs the loop over `script` (one outcome per attempt; running out is a failure): blocking
  // (retry_loop), or called back (drive_async) when the test's parameter says so. Both must decide
  // alike, so every test runs on both.
  Result<int> run(const CallSpec& s, std::deque<AttemptOutcome<int>> script, std::int64_t dedup_window_ms = 0) {
    const auto attempt = [&](const AttemptTimeouts& t) {
      timeouts.push_back(t);
      clock->advance(attempt_takes);
      if (script.empty()) {
        ADD_FAILURE() << "more attempts than scripted";
        return AttemptOutcome<int>{failure(errc::invalid_request, 400)};
      }
      auto next = std::move(script.front());
      script.pop_front();
      return next;
    };
    const auto initialize = [&](Rank rank, std::int64_t num_pages, Role role,
                                const CallSpec& caller) -> Result<std::string> {
      initializes.push_back({rank, num_pages, role, caller.request_id});
      if (restore_error) return *restore_error;
      return std::string("ok");
    };
    if (!GetParam()) return retry_loop<int>(policies(), ranks, s, dedup_window_ms, attempt, initialize);
    return run_async(s, dedup_window_ms, attempt, initialize);
  }

  // A call for drive_async whose callbacks are queued and run after the step that made them
  // returned, as an I/O loop runs them; its waits go through the fake sleeper.
  template <class Attempt, class Initialize>
  struct QueuedCall {
    QueuedCall(RetryLoopTest& t, const CallSpec& s, std::int64_t dedup, Attempt& a, Initialize& i)
        : test(t), attempt_(a), initialize(i), loop(*t.policies_, t.ranks, s, dedup) {}
    void attempt(const AttemptTimeouts& timeouts, std::function<void(AttemptOutcome<int>)> next) {
      test.queue.push_back([next, outcome = attempt_(timeouts)] { next(outcome); });
    }
    void wait(nanoseconds delay, std::function<void()> next) {
      test.sleeper.sleep_for(delay);
      test.queue.push_back(std::move(next));
    }
    void restore(std::function<void(RetryLoop<int>::Step)> next) {
      test.queue.push_back([next, step = loop.restore(initialize)] { next(step); });
    }
    void finish(Result<int> r) { result.emplace(std::move(r)); }

    RetryLoopTest& test;
    Attempt& attempt_;
    Initialize& initialize;
    std::optional<Result<int>> result;
    RetryLoop<int> loop;
  };

  template <class Attempt, class Initialize>
  Result<int> run_async(const CallSpec& s, std::int64_t dedup_window_ms, Attempt& attempt, Initialize& initialize) {
    policies_.emplace(policies());
    auto call = std::make_shared<QueuedCall<Attempt, Initialize>>(*this, s, dedup_window_ms, attempt, initialize);
    drive_async(call, call->loop.begin());
    while (!queue.empty()) {
      auto next = std::move(queue.front());
      queue.pop_front();
      next();
    }
    if (!call->result) {
      ADD_FAILURE() << "the call never finished";
      return failure(errc::invalid_request, 400);
    }
    return std::move(*call->result);
  }

  static AttemptOutcome<int> fails(Error e) { return AttemptOutcome<int>{std::move(e)}; }
  static AttemptOutcome<int> succeeds(int v) { return AttemptOutcome<int>{v, true}; }

  struct Initialize {
    Rank rank;
    std::int64_t num_pages;
    Role role;
    std::string caller;
  };

  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  FakeSleeper sleeper{clock};
  std::unique_ptr<RetryPolicy> retry = std::make_unique<LimitedAttemptsRetryPolicy>();
  ExponentialBackoffPolicy backoff;
  DefaultIdempotencyPolicy idempotency;
  RetryBudget budget{RetryBudgetOptions{}};
  RecordingObserver observer;
  RankRegistry ranks;
  std::vector<AttemptTimeouts> timeouts;
  std::vector<Initialize> initializes;
  std::optional<Error> restore_error;
  nanoseconds attempt_takes{0};  // how long each scripted attempt takes on the fake clock
  std::deque<std::function<void()>> queue;  // run_async's callbacks, in order
  std::optional<RetryLoopPolicies> policies_;  // run_async's, which its loop views
};

TEST(DefaultRetryClassTest, IsDesignsTable) {
  EXPECT_EQ(default_retry_class(http(503, errc::unavailable)), RetryClass::unapplied);
  EXPECT_EQ(default_retry_class(failure(errc::connection_failed, std::nullopt, false)), RetryClass::unapplied);
  EXPECT_EQ(default_retry_class(failure(errc::timeout, std::nullopt, false)), RetryClass::unapplied);
  EXPECT_EQ(default_retry_class(http(502, errc::unavailable)), RetryClass::ambiguous);
  EXPECT_EQ(default_retry_class(http(504, errc::unavailable)), RetryClass::ambiguous);
  EXPECT_EQ(default_retry_class(failure(errc::timeout, std::nullopt, true)), RetryClass::ambiguous);
  EXPECT_EQ(default_retry_class(failure(errc::connection_failed, std::nullopt, true)), RetryClass::ambiguous);
  EXPECT_EQ(default_retry_class(http(500, errc::server_error)), RetryClass::ambiguous);
  EXPECT_EQ(default_retry_class(lost_rank(3)), RetryClass::rank_lost);
  for (auto [status, code] : {std::pair{500, errc::allocation_failed}, {400, errc::invalid_request},
                              {409, errc::stale_allocation}, {422, errc::validation_error},
                              {404, errc::unexpected_status}, {200, errc::protocol_error}}) {
    EXPECT_EQ(default_retry_class(http(status, code)), RetryClass::stop) << status << ' ' << to_string(code);
  }
  // The policies' default is that table.
  EXPECT_EQ(LimitedAttemptsRetryPolicy().classify(http(503, errc::unavailable)), RetryClass::unapplied);
}

// A policy that would repeat anything: what the loop still refuses to repeat is the loop's doing.
class RepeatEverything final : public RetryPolicy {
 public:
  std::unique_ptr<RetryPolicy> clone() const override { return std::make_unique<RepeatEverything>(); }
  int max_attempts() const override { return 4; }
  std::chrono::milliseconds deadline() const override { return std::chrono::seconds(10); }
  RetryClass classify(const Error&) const override { return RetryClass::unapplied; }
};

TEST_P(RetryLoopTest, A2xxThatDidNotDecodeIsNeverRepeatedWhateverThePolicySays) {
  retry = std::make_unique<RepeatEverything>();
  AttemptOutcome<int> garbled{failure(errc::protocol_error, 200), true};
  auto r = run(call(Operation::allocate), {garbled});  // a second attempt would be unscripted: a failure
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().attempts, 1);
  // The same error without a 2xx answer is repeated by this policy: the guard is the answer, not the code.
  auto repeated = run(call(Operation::allocate), {fails(failure(errc::protocol_error, std::nullopt)), succeeds(3)});
  EXPECT_TRUE(repeated);
}

TEST_P(RetryLoopTest, FirstSuccessIsReturnedWithoutWaiting) {
  auto r = run(call(Operation::allocate), {succeeds(7)});
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value(), 7);
  EXPECT_THAT(sleeper.sleeps(), IsEmpty());
  EXPECT_THAT(observer.trace(), ElementsAre("attempt 1", "success 1"));
}

TEST_P(RetryLoopTest, UnappliedFailuresRepeatAfterTheBackoffsDelayEvenForAnUnsafeCall) {
  auto r = run(call(Operation::allocate), {fails(http(503, errc::unavailable)), fails(refused()), succeeds(1)});
  ASSERT_TRUE(r) << r.error().message();
  // 0.75 of 50 ms, then of 100 ms: the backoff's draws, handed to the sleeper.
  EXPECT_THAT(sleeper.sleeps(), ElementsAre(milliseconds(37) + std::chrono::microseconds(500), milliseconds(75)));
  EXPECT_THAT(observer.trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "retry 2", "attempt 3", "success 3"));
}

TEST_P(RetryLoopTest, AnAmbiguousFailureRepeatsOnlyWhatIsSafe) {
  auto safe = run(call(Operation::batch_exists), {fails(http(502, errc::unavailable)), succeeds(1)});
  EXPECT_TRUE(safe);

  auto unsafe = run(call(Operation::allocate), {fails(http(504, errc::unavailable))});
  ASSERT_FALSE(unsafe);
  EXPECT_EQ(unsafe.error().stop_reason, "not safe to repeat allocate after unavailable (504)");
  auto sent = run(call(Operation::clear), {fails(failure(errc::timeout, std::nullopt, true))});
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().stop_reason, "not safe to repeat clear after timeout (request sent)");
}

TEST_P(RetryLoopTest, AnAmbiguousAllocateRepeatsOnlyInsideTheServersDedupWindow) {
  // Declared by an answer of this call.
  AttemptOutcome<int> declared{http(503, errc::unavailable)};
  declared.dedup_window_ms = 60000;
  auto r = run(call(Operation::allocate), {std::move(declared), fails(http(502, errc::unavailable)), succeeds(2)});
  ASSERT_TRUE(r) << r.error().message();
  // Known before the call.
  EXPECT_TRUE(run(call(Operation::allocate), {fails(http(502, errc::unavailable)), succeeds(2)}, 60000));

  // A window the repeat could miss (it may wait up to 50 ms first): not repeated.
  auto late = run(call(Operation::allocate), {fails(http(502, errc::unavailable))}, 40);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().stop_reason, "not safe to repeat allocate after unavailable (502)");
  // An answer declaring no window (0, or a value that is not one) withdraws it.
  AttemptOutcome<int> withdrawn{http(502, errc::unavailable)};
  withdrawn.dedup_window_ms = 0;
  EXPECT_FALSE(run(call(Operation::allocate), {std::move(withdrawn)}, 60000));
}

TEST_P(RetryLoopTest, OtherFailuresStopAtOnceWithoutAReasonOrAToken) {
  auto r = run(call(Operation::allocate), {fails(http(400, errc::invalid_request))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_request);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().operation, Operation::allocate);
  EXPECT_EQ(r.error().request_id, "rid-1");
  EXPECT_EQ(r.error().stop_reason, "");
  EXPECT_THAT(observer.trace(), ElementsAre("attempt 1", "give_up 1"));
  // Ten such failures cost no budget: a retryable failure still repeats.
  for (int i = 0; i < 10; ++i) (void)run(call(Operation::allocate), {fails(http(400, errc::invalid_request))});
  EXPECT_TRUE(run(call(Operation::allocate), {fails(http(503, errc::unavailable)), succeeds(1)}));
}

TEST_P(RetryLoopTest, ThePolicysAttemptCountStopsTheLoopAndSaysSo) {
  retry = std::make_unique<LimitedAttemptsRetryPolicy>(3);
  auto r = run(call(Operation::batch_exists),
               {fails(http(503, errc::unavailable)), fails(http(503, errc::unavailable)), fails(http(503, errc::unavailable))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().attempts, 3);
  // 37.5 ms + 75 ms of backoff on the fake clock.
  EXPECT_EQ(r.error().stop_reason, "retry policy exhausted after 3 attempts in 0.113 s");
  EXPECT_THAT(r.error().message(), ::testing::HasSubstr("retry policy exhausted after 3 attempts"));
}

TEST_P(RetryLoopTest, TheLoopDoesNotSleepPastTheDeadline) {
  auto r = run(call(Operation::batch_exists, std::nullopt, milliseconds(100)),
               {fails(http(503, errc::unavailable)), fails(http(503, errc::unavailable))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(r.error().stop_reason,
            "stopped after 2 attempts in 0.0375 s: the next attempt, after a 0.075 s backoff, could not start "
            "within the deadline of 0.1 s");
  EXPECT_THAT(sleeper.sleeps(), ElementsAre(milliseconds(37) + std::chrono::microseconds(500)));
}

TEST_P(RetryLoopTest, ADeadlineAlreadyPassedIsATimeoutWithoutAnAttempt) {
  auto r = run(call(Operation::get_locations, 3, milliseconds(0)), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_EQ(r.error().attempts, 0);
  EXPECT_EQ(r.error().request_id, "rid-1");
  EXPECT_EQ(r.error().stop_reason, "deadline of 0 s reached after 0 attempts in 0 s");
}

TEST_P(RetryLoopTest, AConnectionNothingAcceptedIsRepeatedPastTheAttemptCountUntilTheDeadline) {
  retry = std::make_unique<LimitedAttemptsRetryPolicy>(2);
  AttemptOutcome<int> unreachable{refused()};
  unreachable.unreachable = true;
  std::deque<AttemptOutcome<int>> script(6, unreachable);
  script.push_back(succeeds(1));
  auto r = run(call(Operation::allocate), script);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(timeouts.size(), 7u);
  // It spent no budget (six tokens would have left four, and no retry): a 503 is still retried.
  EXPECT_TRUE(run(call(Operation::batch_exists), {fails(http(503, errc::unavailable)), succeeds(1)}));

  // The deadline still stops it.
  auto r2 = run(call(Operation::allocate, std::nullopt, milliseconds(100)), {unreachable, unreachable});
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, errc::connection_failed);
  EXPECT_EQ(r2.error().stop_reason,
            "stopped after 2 attempts in 0.0375 s: the next attempt, after a 0.075 s backoff, could not start "
            "within the deadline of 0.1 s");
}

// A policy that does not ride out restarts (the Python drop-in's, as vLLM's urllib3 Retry)
// counts a connection nothing accepted as any other attempt: max_attempts, then the error.
TEST_P(RetryLoopTest, APolicyThatCountsUnreachableStopsAtItsAttemptCount) {
  retry = std::make_unique<LimitedAttemptsRetryPolicy>(3, milliseconds(10000), Unreachable::count);
  EXPECT_FALSE(retry->rides_out_restarts());
  EXPECT_TRUE(LimitedAttemptsRetryPolicy().rides_out_restarts());
  AttemptOutcome<int> unreachable{refused()};
  unreachable.unreachable = true;
  auto r = run(call(Operation::allocate), {unreachable, unreachable, unreachable});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_EQ(r.error().attempts, 3);
  EXPECT_EQ(timeouts.size(), 3u);
  EXPECT_EQ(r.error().stop_reason, "retry policy exhausted after 3 attempts in 0.113 s");
}

// Under load, the last attempt before the deadline gets a connect timeout of a millisecond or two and
// can run out of it before the kernel refuses the connection: the call still failed on refusals.
TEST_P(RetryLoopTest, AnUnsentTimeoutOfAnAttemptTheDeadlineCutReportsTheErrorBeforeIt) {
  AttemptOutcome<int> unreachable{refused()};
  unreachable.unreachable = true;
  AttemptOutcome<int> cut{failure(errc::timeout, std::nullopt, false)};
  cut.unreachable = true;
  // 37.5 ms of backoff leaves 62.5 ms: the second attempt's connect timeout (1 s) is cut to 63 ms.
  auto r = run(call(Operation::batch_exists, std::nullopt, milliseconds(100)), {unreachable, cut});
  ASSERT_FALSE(r);
  ASSERT_EQ(timeouts.size(), 2u);
  EXPECT_EQ(timeouts[1].connect, milliseconds(63));
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(r.error().stop_reason, "deadline of 0.1 s reached after 2 attempts in 0.0375 s");

  // A connect that timed out within the attempt's own limits is repeated as before (the server may
  // be restarting); a timeout after the request left is the call's error.
  auto uncut = run(call(Operation::batch_exists, std::nullopt, milliseconds(10000)), {unreachable, cut, succeeds(1)});
  EXPECT_TRUE(uncut);
  EXPECT_EQ(timeouts.size(), 5u);
  auto sent = run(call(Operation::batch_exists, std::nullopt, milliseconds(100)),
                  {unreachable, fails(failure(errc::timeout, std::nullopt, true))});
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().code, errc::timeout);

  // Only a cut connect counts: 6 s into a 10 s call, the total (5 s) is cut to 3.9 s but the connect
  // (1 s) is not, so a connect that timed out is repeated, as any unanswered connect is.
  timeouts.clear();
  attempt_takes = std::chrono::seconds(3);
  auto later = run(call(Operation::batch_exists), {unreachable, unreachable, cut, succeeds(1)});
  ASSERT_TRUE(later) << later.error().message();
  ASSERT_EQ(timeouts.size(), 4u);
  EXPECT_LT(timeouts[2].total, milliseconds(5000));
  EXPECT_EQ(timeouts[2].connect, milliseconds(1000));
}

TEST_P(RetryLoopTest, EachAttemptsTimeoutsAreCutToWhatIsLeftOfTheDeadline) {
  auto r = run(call(Operation::batch_exists, std::nullopt, milliseconds(2000)),
               {fails(http(503, errc::unavailable)), succeeds(1)});
  ASSERT_TRUE(r);
  ASSERT_EQ(timeouts.size(), 2u);
  EXPECT_EQ(timeouts[0].connect, milliseconds(1000));
  EXPECT_EQ(timeouts[0].total, milliseconds(2000));
  EXPECT_EQ(timeouts[1].total, milliseconds(1963));  // 2000 - 37.5, rounded up
}

TEST_P(RetryLoopTest, TheBudgetStopsRetriesWhenHalfIsSpent) {
  // 10 tokens, a failure takes 1: the fifth failure leaves 5, and retries stop at 5 or fewer.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(run(call(Operation::batch_exists), {fails(http(503, errc::unavailable)), succeeds(1)}));
  }
  // 4 spent, 0.4 refunded: 6.4 left; this failure leaves 5.4, the next 4.4.
  auto r = run(call(Operation::batch_exists),
               {fails(http(503, errc::unavailable)), fails(http(503, errc::unavailable))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(r.error().stop_reason, "retry budget exhausted");
}

// The retry policy decides which outcomes repeat: one that treats a 409 as unapplied and a 503 as
// final changes the loop accordingly.
class ConflictsRepeatPolicy final : public RetryPolicy {
 public:
  std::unique_ptr<RetryPolicy> clone() const override { return std::make_unique<ConflictsRepeatPolicy>(*this); }
  int max_attempts() const override { return 4; }
  milliseconds deadline() const override { return milliseconds(10000); }
  RetryClass classify(const Error& e) const override {
    if (e.status == 409) return RetryClass::unapplied;
    if (e.status == 503) return RetryClass::stop;
    return default_retry_class(e);
  }
};

TEST_P(RetryLoopTest, TheRetryPolicyDecidesWhichOutcomesRepeat) {
  retry = std::make_unique<ConflictsRepeatPolicy>();
  EXPECT_TRUE(run(call(Operation::confirm_write, 3), {fails(http(409, errc::stale_allocation)), succeeds(1)}));
  auto r = run(call(Operation::batch_exists), {fails(http(503, errc::unavailable))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 1);
}

TEST_P(RetryLoopTest, ALostRegisteredRankIsRestoredOnceThenTheCallRepeatsAtOnce) {
  ranks.add(3, 64, Role::worker);
  auto r = run(call(Operation::allocate, 3), {fails(lost_rank(3)), succeeds(5)});
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(initializes.size(), 1u);
  EXPECT_EQ(initializes[0].rank, 3);
  EXPECT_EQ(initializes[0].num_pages, 64);
  EXPECT_EQ(initializes[0].caller, "rid-1");
  EXPECT_THAT(sleeper.sleeps(), IsEmpty());
  EXPECT_THAT(observer.trace(), ElementsAre("attempt 1", "reinitialize 3", "attempt 2", "success 2"));
}

TEST_P(RetryLoopTest, ARestoreIsAllowedPastTheAttemptCountButOnlyOncePerCall) {
  retry = std::make_unique<LimitedAttemptsRetryPolicy>(1);
  ranks.add(3, 64, Role::worker);
  EXPECT_TRUE(run(call(Operation::get_locations, 3), {fails(lost_rank(3)), succeeds(5)}));

  auto twice = run(call(Operation::get_locations, 3), {fails(lost_rank(3)), fails(lost_rank(3))});
  ASSERT_FALSE(twice);
  EXPECT_TRUE(twice.error().reinitialized);
  EXPECT_EQ(twice.error().stop_reason, "rank 3 was not initialized again after the client restored it");
}

TEST_P(RetryLoopTest, ACallNamingPagesIsNotRepeatedAfterARestore) {
  ranks.add(3, 64, Role::worker);
  CallSpec confirm = call(Operation::confirm_write, 3);
  confirm.names_pages = true;  // as the route table says of confirm_write
  auto r = run(confirm, {fails(lost_rank(3))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_TRUE(r.error().reinitialized);
  EXPECT_THAT(r.error().stop_reason, ::testing::StartsWith("rank 3 was re-initialized: the pages this confirm_write"));
  EXPECT_EQ(initializes.size(), 1u);
}

TEST_P(RetryLoopTest, ALostRankThatCannotBeRestoredSaysWhy) {
  auto unregistered = run(call(Operation::allocate, 3), {fails(lost_rank(3))});
  ASSERT_FALSE(unregistered);
  EXPECT_EQ(unregistered.error().stop_reason,
            "rank 3 is not registered with this client: call ensure_initialized(3, num_pages) or register_rank "
            "first, so that it restores the rank");

  ranks.add(3, 64, Role::worker);
  restore_error = http(400, errc::invalid_initialization);
  auto failed = run(call(Operation::allocate, 3), {fails(lost_rank(3))});
  ASSERT_FALSE(failed);
  EXPECT_THAT(failed.error().stop_reason, ::testing::StartsWith("re-initializing rank 3 failed: "));
  EXPECT_FALSE(failed.error().reinitialized);

  // Another rank's, or a call with no rank: returned as it is.
  auto other = run(call(Operation::allocate, 4), {fails(lost_rank(3))});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().stop_reason, "");
  EXPECT_FALSE(run(call(Operation::batch_exists), {fails(lost_rank(3))}));
  EXPECT_EQ(initializes.size(), 1u);
}


// ---- decide(): the decision after a failed attempt, on its own, for each way the loop stops ----

INSTANTIATE_TEST_SUITE_P(BlockingAndCalledBack, RetryLoopTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "CalledBack" : "Blocking";
                         });

class DecideTest : public RetryLoopTest {
 protected:
  // The loop's state after `attempts` attempts, the first sent now, with the full per-attempt limits.
  LoopState after(int attempts) {
    LoopState state;
    state.attempts = attempts;
    state.retries = attempts - 1;
    state.first_sent = clock->now();
    state.timeouts = AttemptTimeouts{milliseconds(1000), milliseconds(5000)};
    return state;
  }
  Decision decide_on(const CallSpec& s, const LoopState& state, const Error& e, bool answered_2xx = false,
                     bool unreachable = false) {
    const RetryLoopPolicies p = policies();
    return decide(p, s, state, FailedAttempt{e, answered_2xx, unreachable});
  }
  static void expect_stop(const Decision& d, const std::string& reason) {
    EXPECT_EQ(d.action, Decision::Action::stop);
    EXPECT_EQ(d.stop_reason, reason);
  }
};

TEST_F(DecideTest, RetriesARepeatableFailureAfterTheBackoffsDraw) {
  const Decision d = decide_on(call(Operation::allocate), after(1), http(503, errc::unavailable));
  EXPECT_EQ(d.action, Decision::Action::retry);
  EXPECT_EQ(d.delay, milliseconds(37) + std::chrono::microseconds(500));  // 0.75 of 50 ms
  EXPECT_EQ(d.stop_reason, "");
  // The second retry draws from the doubled backoff.
  EXPECT_EQ(decide_on(call(Operation::allocate), after(2), http(503, errc::unavailable)).delay, milliseconds(75));
  EXPECT_THAT(sleeper.sleeps(), IsEmpty());  // deciding waits for nothing
}

TEST_F(DecideTest, StopsWithoutAReasonOnA2xxWhateverThePolicySays) {
  retry = std::make_unique<RepeatEverything>();
  expect_stop(decide_on(call(Operation::allocate), after(1), failure(errc::protocol_error, 200), true), "");
}

TEST_F(DecideTest, StopsWithoutAReasonOnWhatThePolicyDoesNotRepeat) {
  expect_stop(decide_on(call(Operation::allocate), after(1), http(400, errc::invalid_request)), "");
  // ... and takes no budget token for it: ten of them leave a retry allowed.
  for (int i = 0; i < 10; ++i) (void)decide_on(call(Operation::allocate), after(1), http(409, errc::stale_allocation));
  EXPECT_TRUE(budget.allows());
}

TEST_F(DecideTest, StopsAtTheDeadlineOnAnUnsentTimeoutOfAConnectTheDeadlineCut) {
  LoopState state = after(2);
  state.last = refused();
  state.timeouts.connect = milliseconds(63);
  const Error cut = failure(errc::timeout, std::nullopt, false);
  EXPECT_EQ(decide_on(call(Operation::batch_exists), state, cut, false, true).action,
            Decision::Action::stop_at_deadline);
  // Not cut (the attempt's own limit), or no error before it: an unreachable server, repeated.
  state.timeouts.connect = milliseconds(1000);
  EXPECT_EQ(decide_on(call(Operation::batch_exists), state, cut, false, true).action, Decision::Action::retry);
  LoopState first = after(1);
  first.timeouts.connect = milliseconds(63);
  EXPECT_EQ(decide_on(call(Operation::batch_exists), first, cut, false, true).action, Decision::Action::retry);
}

TEST_F(DecideTest, StopsWhenAnAmbiguousFailureIsNotSafeToRepeat) {
  expect_stop(decide_on(call(Operation::allocate), after(1), http(502, errc::unavailable)),
              "not safe to repeat allocate after unavailable (502)");
  expect_stop(decide_on(call(Operation::clear), after(1), failure(errc::timeout, std::nullopt, true)),
              "not safe to repeat clear after timeout (request sent)");
  // Inside the server's deduplication window it is safe.
  LoopState state = after(1);
  state.dedup_window_ms = 60000;
  EXPECT_EQ(decide_on(call(Operation::allocate), state, http(502, errc::unavailable)).action, Decision::Action::retry);
}

TEST_F(DecideTest, StopsWhenThePolicysAttemptsAreSpent) {
  retry = std::make_unique<LimitedAttemptsRetryPolicy>(3);
  const CallSpec s = call(Operation::batch_exists);
  clock->advance(milliseconds(250));
  expect_stop(decide_on(s, after(3), http(503, errc::unavailable)), "retry policy exhausted after 3 attempts in 0.25 s");
  // Riding out a restart does not count attempts.
  EXPECT_EQ(decide_on(s, after(3), refused(), false, true).action, Decision::Action::retry);
}

TEST_F(DecideTest, StopsWhenTheBudgetIsHalfSpent) {
  // 10 tokens, a failure takes 1: the fifth leaves 5, and retries stop at 5 or fewer.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(decide_on(call(Operation::batch_exists), after(1), http(503, errc::unavailable)).action,
              Decision::Action::retry);
  }
  expect_stop(decide_on(call(Operation::batch_exists), after(1), http(503, errc::unavailable)), "retry budget exhausted");
  // A connection nothing accepted takes no token, but a drained budget stops it too.
  expect_stop(decide_on(call(Operation::batch_exists), after(1), refused(), false, true), "retry budget exhausted");
}

TEST_F(DecideTest, StopsWhenTheDeadlineHasPassedOrTheBackoffWouldEndPastIt) {
  const CallSpec s = call(Operation::batch_exists, std::nullopt, milliseconds(100));
  clock->advance(milliseconds(70));
  expect_stop(decide_on(s, after(1), http(503, errc::unavailable)),
              "stopped after 1 attempt in 0.07 s: the next attempt, after a 0.0375 s backoff, could not start "
              "within the deadline of 0.1 s");
  clock->advance(milliseconds(30));
  expect_stop(decide_on(s, after(2), http(503, errc::unavailable)), "deadline of 0.1 s reached after 2 attempts in 0.1 s");
}

TEST_F(DecideTest, SendsALostRankOfTheCallToTheRestoreStepOnce) {
  EXPECT_EQ(decide_on(call(Operation::allocate, 3), after(1), lost_rank(3)).action, Decision::Action::restore_rank);
  // Another rank's, or a call with no rank: stopped without a reason.
  expect_stop(decide_on(call(Operation::allocate, 4), after(1), lost_rank(3)), "");
  expect_stop(decide_on(call(Operation::batch_exists), after(1), lost_rank(3)), "");
  // Lost again after this call restored it.
  LoopState restored = after(2);
  restored.reinitialized = true;
  expect_stop(decide_on(call(Operation::allocate, 3), restored, lost_rank(3)),
              "rank 3 was not initialized again after the client restored it");
  EXPECT_THAT(initializes, IsEmpty());  // deciding restores nothing
}

// ---- restore_rank(): the step around the attempt that met "not initialized" ----

class RestoreStepTest : public RetryLoopTest {
 protected:
  std::optional<std::string> restore(const CallSpec& s, Error& e) {
    const RetryLoopPolicies p = policies();
    auto initialize = [&](Rank rank, std::int64_t num_pages, Role role, const CallSpec& caller) -> Result<std::string> {
      initializes.push_back({rank, num_pages, role, caller.request_id});
      if (restore_error) return *restore_error;
      return std::string("ok");
    };
    return restore_rank(p, ranks, s, ranks.epoch(), e, initialize);
  }
};

TEST_F(RestoreStepTest, ARestoredRankRepeatsTheAttempt) {
  ranks.add(3, 64, Role::worker);
  Error e = lost_rank(3);
  EXPECT_FALSE(restore(call(Operation::allocate, 3), e).has_value());
  EXPECT_TRUE(e.reinitialized);
  ASSERT_EQ(initializes.size(), 1u);
  EXPECT_EQ(initializes[0].num_pages, 64);
  EXPECT_THAT(observer.trace(), ElementsAre("reinitialize 3"));
}

TEST_F(RestoreStepTest, StopsForAnUnregisteredRankAFailedRestoreOrACallNamingPages) {
  Error unregistered = lost_rank(3);
  EXPECT_EQ(restore(call(Operation::allocate, 3), unregistered),
            "rank 3 is not registered with this client: call ensure_initialized(3, num_pages) or register_rank "
            "first, so that it restores the rank");
  EXPECT_FALSE(unregistered.reinitialized);

  ranks.add(3, 64, Role::worker);
  restore_error = http(400, errc::invalid_initialization);
  Error failed = lost_rank(3);
  const auto why = restore(call(Operation::allocate, 3), failed);
  ASSERT_TRUE(why);
  EXPECT_THAT(*why, ::testing::StartsWith("re-initializing rank 3 failed: "));
  EXPECT_FALSE(failed.reinitialized);

  restore_error.reset();
  CallSpec confirm = call(Operation::confirm_write, 3);
  confirm.names_pages = true;
  Error lost = lost_rank(3);
  EXPECT_EQ(restore(confirm, lost),
            "rank 3 was re-initialized: the pages this confirm_write names belong to the state the server lost; "
            "allocate again");
  EXPECT_TRUE(lost.reinitialized);
}

}  // namespace
}  // namespace hf3fs_meta::internal
