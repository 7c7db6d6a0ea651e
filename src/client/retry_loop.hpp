// The retry loop of every call (docs/design.md, "Retries"), on its own: google-cloud-cpp's
// internal::RetryLoopImpl shape. It knows nothing of HTTP or JSON: a functor makes one attempt and
// returns its value or its classified error; the policies decide what repeats, how long to wait
// and whether the call is safe to repeat; the sleeper waits; the rank registry restores a rank the
// server forgot. The final error says why the loop stopped (Error::stop_reason).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/policies.hpp"
#include "hf3fs_meta/transport.hpp"

#include "client/rank_registry.hpp"

namespace hf3fs_meta::internal {

// gRPC A6 retry throttling, per client. Kept in thousandths of a token so that the arithmetic is
// exact and lock-free.
class RetryBudget {
 public:
  explicit RetryBudget(const RetryBudgetOptions& o)
      : max_(to_milli(o.max_tokens)), cost_(to_milli(o.failure_cost)), refund_(to_milli(o.success_refund)),
        tokens_(max_) {}

  // Takes a token; true when a retry is still allowed.
  bool on_failure() {
    std::int64_t now = tokens_.load(std::memory_order_relaxed);
    std::int64_t next = 0;
    do {
      next = std::max<std::int64_t>(0, now - cost_);
    } while (!tokens_.compare_exchange_weak(now, next, std::memory_order_relaxed));
    return 2 * next > max_;
  }

  // True when a retry is allowed, without taking a token.
  bool allows() const { return 2 * tokens_.load(std::memory_order_relaxed) > max_; }

  void on_success() {
    std::int64_t now = tokens_.load(std::memory_order_relaxed);
    while (now < max_ && !tokens_.compare_exchange_weak(now, std::min(max_, now + refund_), std::memory_order_relaxed)) {
    }
  }

 private:
  static std::int64_t to_milli(double tokens) { return static_cast<std::int64_t>(tokens * 1000.0 + 0.5); }
  std::int64_t max_, cost_, refund_;
  std::atomic<std::int64_t> tokens_;
};

// What the loop consults; one set per client, shared by its calls.
struct RetryLoopPolicies {
  const RetryPolicy& retry;
  const BackoffPolicy& backoff;
  const IdempotencyPolicy& idempotency;
  RetryBudget& budget;
  Clock& clock;
  Sleeper& sleeper;
  ClientObserver* observer = nullptr;  // may be null
  AttemptTimeouts per_attempt;         // cut to what is left of the call's deadline
  double (*jitter)() = nullptr;        // uniform in [0, 1): the backoff's draw
};

// One call as the loop sees it.
struct CallSpec {
  Operation operation = Operation::raw;
  std::optional<Rank> rank;  // the rank restored when the server forgot it
  bool has_releases = false;
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::nanoseconds deadline_length{0};
  std::string request_id;  // one for all attempts
  bool names_pages = false;  // RouteInfo::names_pages: not repeated after the rank is restored
};

// One attempt's outcome: the value, or the error classified from the answer (code, status,
// detail, cause, rank, sent); the loop fills in the call's own fields (operation, request id,
// attempts, reinitialized, stop_reason).
template <class T>
struct AttemptOutcome {
  AttemptOutcome(Result<T> r, bool answered_2xx_ = false) : result(std::move(r)), answered_2xx(answered_2xx_) {}

  Result<T> result;
  bool answered_2xx = false;  // a 2xx answer, even one that did not decode (it refunds the budget)
  // Nothing accepted the connection (TransportError::unreachable): the server may be restarting.
  bool unreachable = false;
  // The deduplication window an answer declared (X-Request-Id-Dedup: <ms>; 0: none, which an answer
  // without the header says too); nothing when no answer came.
  std::optional<std::int64_t> dedup_window_ms;
  // Where the attempt went (a client's endpoint; empty: a transport's own), for the reason a loop
  // that runs out gives.
  std::string endpoint;
  // The member answered that it is not the leader (a 503 that applied nothing, kNotLeaderDetailPrefix),
  // and named the leader the next attempt goes to (kLeaderHeader: a valid endpoint) or none.
  bool not_leader = false;
  std::string leader;
};

std::string seconds_text(std::chrono::nanoseconds d);  // "0.4", "10", "0.0523"

// Why a loop stopped on its attempt count or deadline.
std::string exhausted_reason(int attempts, std::chrono::nanoseconds took);
std::string deadline_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took);
// Stopped before the deadline, because the next attempt, after its backoff, would start at or past it.
std::string no_time_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took,
                           std::chrono::nanoseconds backoff);

// What a call's loop knows between its attempts.
struct LoopState {
  int attempts = 0;            // made so far, the last one included
  int retries = 0;             // backoffs waited
  bool reinitialized = false;  // this call restored its rank (once per call)
  // The server's deduplication window as last known (0: none): the client's before the call, then
  // what an answer of this call declared.
  std::int64_t dedup_window_ms = 0;
  std::optional<std::chrono::steady_clock::time_point> first_sent;
  AttemptTimeouts timeouts;  // the last attempt's
  std::optional<Error> last;  // the last failure repeated: what a deadline reports
  // The last attempt went at once to a leader that the one before named (Decision::to_leader): the
  // next such hop waits its backoff, so that members naming each other cannot spin.
  bool hopped = false;
  // Each endpoint the call's attempts went to, in the order first tried, with its last failure;
  // at most kMaxTriedEndpoints. What a loop that runs out says.
  struct Tried {
    std::string endpoint;
    std::string failure;  // "503 not the leader", "nothing accepted the connection", "502 unavailable"
    bool leaderless = false;  // not the leader, or no answer
  };
  std::vector<Tried> tried;
  bool met_not_leader = false;
};
inline constexpr std::size_t kMaxTriedEndpoints = 8;

// Records where a failed attempt went and what it met there.
void note_tried(LoopState& state, const Error& e, std::string_view endpoint, bool not_leader, std::string_view leader,
                bool unreachable);
// A loop that ran out (attempts, budget, deadline) on a call that met a member that was not the
// leader, or tried more than one endpoint: `reason`, then each endpoint with its last failure
// ("no endpoint answered as the leader: http://a (503 not the leader), http://b (nothing accepted
// the connection)").
std::string with_endpoints(std::string reason, const LoopState& state);

// The failed attempt a decision is about: its error (classified, with the call's fields) and what
// the transport saw.
struct FailedAttempt {
  const Error& error;
  bool answered_2xx = false;
  bool unreachable = false;
  bool not_leader = false;     // a member that is not the leader answered: nothing applied
  bool leader_named = false;   // ... and it named the leader, where the next attempt goes
};

// What the loop does after a failed attempt (google-cloud-cpp's Backoff(): retry after D, or stop
// for reason R).
struct Decision {
  enum class Action : std::uint8_t {
    retry,             // after `delay` of backoff
    stop,              // with this attempt's error and `stop_reason` (empty: the error says it all)
    stop_at_deadline,  // the deadline ended the call: the last error that said something, and why
    restore_rank,      // the server lost the call's rank: the restore step, then the attempt again at once
  };
  Action action = Action::stop;
  std::chrono::nanoseconds delay{0};
  std::string stop_reason;
  bool to_leader = false;  // retry: at once, to the leader the failure named (no backoff, not counted)
};

// The decision after a failed attempt, from the policies, the budget (a retry takes its token here),
// the clock and the backoff's draw; nothing else is changed.
Decision decide(const RetryLoopPolicies& p, const CallSpec& s, const LoopState& state, const FailedAttempt& failed);

// The restore step around the attempt that met "not initialized" for the call's rank: restores it
// through the registry (or waits for another call's restore), within the call's deadline. nullopt:
// restored, and the attempt is repeated at once (no backoff, no budget token, even past
// max_attempts: that attempt could never have succeeded); else why the loop stops. Marks `e`
// re-initialized once the rank is restored.
// - initialize(Rank, num_pages, Role, const CallSpec& caller) -> Result<std::string>: the restore of
//   a registered rank, a call of its own within what is left of the caller's deadline.
template <class Initialize>
std::optional<std::string> restore_rank(const RetryLoopPolicies& p, RankRegistry& ranks, const CallSpec& s,
                                        std::uint64_t epoch, Error& e, Initialize& initialize) {
  const Rank rank = *s.rank;
  auto restored = ranks.restore(rank, epoch, s.deadline - p.clock.now(), [&](std::int64_t num_pages, Role role) {
    if (p.observer) p.observer->on_reinitialize(ReinitializeEvent{s.request_id, s.operation, rank});
    return initialize(rank, num_pages, role, s);
  });
  switch (restored.outcome) {
    case RankRegistry::Outcome::unregistered:
      return "rank " + std::to_string(rank) + " is not registered with this client: call ensure_initialized(" +
             std::to_string(rank) + ", num_pages) or register_rank first, so that it restores the rank";
    case RankRegistry::Outcome::failed:
      if (restored.failure->request_id.empty()) restored.failure->request_id = s.request_id;
      return "re-initializing rank " + std::to_string(rank) + " failed: " + restored.failure->message();
    case RankRegistry::Outcome::restored:
      break;
  }
  e.reinitialized = true;
  if (s.names_pages) {
    return "rank " + std::to_string(rank) + " was re-initialized: the pages this " +
           std::string(to_string(s.operation)) + " names belong to the state the server lost; allocate again";
  }
  return std::nullopt;
}

// The ends of a loop: each tells the observer.
template <class T>
Result<T> give_up(const RetryLoopPolicies& p, Error e) {
  if (p.observer) p.observer->on_give_up(GiveUpEvent{e.request_id, e.operation, e});
  return Result<T>(std::move(e));
}
// The deadline ended the call: the last error that said something (a timeout when no attempt was
// made), with the deadline as the reason the loop stopped.
template <class T>
Result<T> give_up_at_deadline(const RetryLoopPolicies& p, const CallSpec& s, LoopState& state) {
  Error e;
  if (state.last) {
    e = std::move(*state.last);
    e.attempts = state.attempts;
  } else {
    e.code = errc::timeout;
    e.operation = s.operation;
    e.detail = "the call's deadline passed before the first attempt";
    e.request_id = s.request_id;
  }
  e.stop_reason = with_endpoints(deadline_reason(state.attempts, s.deadline_length, p.clock.now() - s.start), state);
  return give_up<T>(p, std::move(e));
}

// One call's loop as steps, so that a caller that blocks (retry_loop below) and one that is called
// back (the async call in client.cpp) run the same decisions: begin() before each attempt, after()
// with its outcome, restore() when after() asks for it; each says what the caller does next.
template <class T>
class RetryLoop {
 public:
  struct Step {
    enum class Kind : std::uint8_t {
      attempt,  // make an attempt now, with timeouts()
      wait,     // wait `delay` (the backoff), then begin()
      next,     // begin() at once
      restore,  // call restore() (it may block: a restore is a call of its own), which says what next
      done,     // take_result()
    };
    Kind kind = Kind::done;
    std::chrono::nanoseconds delay{0};
  };
  using Kind = typename Step::Kind;

  // `dedup_window_ms` is the server's deduplication window as the client knew it before the call
  // (0: none); an answer of this call may declare another.
  RetryLoop(const RetryLoopPolicies& p, RankRegistry& ranks, const CallSpec& s, std::int64_t dedup_window_ms)
      : p_(p), ranks_(ranks), s_(s) {
    state_.dedup_window_ms = dedup_window_ms;
  }

  Step begin() {
    const auto now = p_.clock.now();
    if (now >= s_.deadline) return finish(give_up_at_deadline<T>(p_, s_, state_));
    ++state_.attempts;
    if (p_.observer) p_.observer->on_attempt(AttemptEvent{s_.request_id, s_.operation, state_.attempts});
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(s_.deadline - now);
    state_.timeouts =
        AttemptTimeouts{std::min(p_.per_attempt.connect, left), std::min(p_.per_attempt.total, left)};
    epoch_ = ranks_.epoch();
    if (!state_.first_sent) state_.first_sent = now;
    return {Kind::attempt};
  }

  const AttemptTimeouts& timeouts() const { return state_.timeouts; }

  Step after(AttemptOutcome<T> outcome) {
    if (outcome.dedup_window_ms) state_.dedup_window_ms = *outcome.dedup_window_ms;
    if (outcome.answered_2xx) p_.budget.on_success();
    if (outcome.result) {
      if (p_.observer) {
        p_.observer->on_success(SuccessEvent{s_.request_id, s_.operation, state_.attempts, state_.reinitialized});
      }
      return finish(std::move(outcome.result));
    }
    Error e = std::move(outcome.result).error();
    e.operation = s_.operation;
    e.request_id = s_.request_id;
    e.attempts = state_.attempts;
    e.reinitialized = state_.reinitialized;
    note_tried(state_, e, outcome.endpoint, outcome.not_leader, outcome.leader, outcome.unreachable);

    Decision next = decide(p_, s_, state_,
                           FailedAttempt{e, outcome.answered_2xx, outcome.unreachable, outcome.not_leader,
                                         outcome.not_leader && !outcome.leader.empty()});
    switch (next.action) {
      case Decision::Action::stop:
        e.stop_reason = std::move(next.stop_reason);
        return finish(give_up<T>(p_, std::move(e)));
      case Decision::Action::stop_at_deadline:
        return finish(give_up_at_deadline<T>(p_, s_, state_));
      case Decision::Action::restore_rank:
        failed_ = std::move(e);
        return {Kind::restore};
      case Decision::Action::retry:
        if (!next.to_leader) ++state_.retries;
        if (p_.observer) {
          p_.observer->on_retry(RetryEvent{s_.request_id, s_.operation, state_.attempts, next.delay, e});
        }
        state_.hopped = next.to_leader;
        state_.last = std::move(e);
        if (next.to_leader) return {Kind::next};
        return {Kind::wait, next.delay};
    }
    return finish(give_up<T>(p_, std::move(e)));
  }

  // - initialize: as restore_rank() takes it.
  template <class Initialize>
  Step restore(Initialize& initialize) {
    Error e = std::move(*failed_);
    failed_.reset();
    if (auto why = restore_rank(p_, ranks_, s_, epoch_, e, initialize)) {
      e.stop_reason = std::move(*why);
      return finish(give_up<T>(p_, std::move(e)));
    }
    state_.reinitialized = true;
    state_.hopped = false;
    state_.last = std::move(e);
    return {Kind::next};  // the attempt again, at once
  }

  Result<T> take_result() { return std::move(*result_); }

 private:
  Step finish(Result<T> result) {
    result_.emplace(std::move(result));
    return {Kind::done};
  }

  const RetryLoopPolicies& p_;
  RankRegistry& ranks_;
  const CallSpec& s_;
  LoopState state_;
  std::uint64_t epoch_ = 0;      // the registry's, when the last attempt began
  std::optional<Error> failed_;  // the attempt a restore is about
  std::optional<Result<T>> result_;
};

// Runs attempts until one succeeds or decide() stops the call, blocking in the attempts, the
// sleeper and the restores.
// - attempt(const AttemptTimeouts&) -> AttemptOutcome<T>
// - initialize: as restore_rank() takes it.
template <class T, class Attempt, class Initialize>
Result<T> retry_loop(const RetryLoopPolicies& p, RankRegistry& ranks, const CallSpec& s, std::int64_t dedup_window_ms,
                     Attempt&& attempt, Initialize&& initialize) {
  RetryLoop<T> loop(p, ranks, s, dedup_window_ms);
  using Kind = typename RetryLoop<T>::Kind;
  for (auto step = loop.begin();;) {
    switch (step.kind) {
      case Kind::attempt:
        step = loop.after(attempt(loop.timeouts()));
        break;
      case Kind::wait:
        p.sleeper.sleep_for(step.delay);
        step = loop.begin();
        break;
      case Kind::next:
        step = loop.begin();
        break;
      case Kind::restore:
        step = loop.restore(initialize);
        break;
      case Kind::done:
        return loop.take_result();
    }
  }
}

// Runs a call's loop from `step` without blocking: `call` holds the loop and makes its attempts,
// waits and restores, each calling back what comes next. `call` is a shared_ptr to:
// - loop: the RetryLoop<T>
// - attempt(const AttemptTimeouts&, std::function<void(AttemptOutcome<T>)> next)
// - wait(std::chrono::nanoseconds, std::function<void()> next)
// - restore(std::function<void(Step)> next): loop.restore() where blocking is allowed, then next
// - finish(Result<T>)
// Each `next` runs on the call's own thread, after the function that took it returned.
template <class Call>
void drive_async(const std::shared_ptr<Call>& call, typename decltype(Call::loop)::Step step) {
  using Step = typename decltype(Call::loop)::Step;
  using Kind = typename Step::Kind;
  for (;;) {
    switch (step.kind) {
      case Kind::next:
        step = call->loop.begin();
        continue;
      case Kind::attempt:
        return call->attempt(call->loop.timeouts(), [call](auto outcome) {
          drive_async(call, call->loop.after(std::move(outcome)));
        });
      case Kind::wait:
        return call->wait(step.delay, [call] { drive_async(call, call->loop.begin()); });
      case Kind::restore:
        return call->restore(std::function<void(Step)>([call](Step next) { drive_async(call, next); }));
      case Kind::done:
        return call->finish(call->loop.take_result());
    }
  }
}

}  // namespace hf3fs_meta::internal
