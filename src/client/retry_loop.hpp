// The retry loop of every call (DESIGN.md, "Retries"), on its own: google-cloud-cpp's
// internal::RetryLoopImpl shape. It knows nothing of HTTP or JSON: a functor makes one attempt and
// returns its value or its classified error; the policies decide what repeats, how long to wait
// and whether the call is safe to repeat; the sleeper waits; the rank registry restores a rank the
// server forgot. The final error says why the loop stopped (Error::stop_reason).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

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
};

std::string seconds_text(std::chrono::nanoseconds d);  // "0.4", "10", "0.0523"

// Why a loop stopped on its attempt count or deadline.
std::string exhausted_reason(int attempts, std::chrono::nanoseconds took);
std::string deadline_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took);
// Stopped before the deadline, because the next attempt, after its backoff, would start at or past it.
std::string no_time_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took,
                           std::chrono::nanoseconds backoff);

// Runs attempts until one succeeds or the policies stop the call.
// - attempt(const AttemptTimeouts&) -> AttemptOutcome<T>
// - initialize(Rank, num_pages, Role, const CallSpec& caller) -> Result<std::string>: the restore of
//   a registered rank, a call of its own within what is left of the caller's deadline.
// `dedup_window_ms` is the server's deduplication window as the client knew it before the call (0:
// none); an answer of this call may declare another.
template <class T, class Attempt, class Initialize>
Result<T> retry_loop(const RetryLoopPolicies& p, RankRegistry& ranks, const CallSpec& s, std::int64_t dedup_window_ms,
                     Attempt&& attempt, Initialize&& initialize) {
  using std::chrono::milliseconds;
  using std::chrono::nanoseconds;
  const auto give_up = [&](Error e) -> Result<T> {
    if (p.observer) p.observer->on_give_up(GiveUpEvent{e.request_id, e.operation, e});
    return Result<T>(std::move(e));
  };
  const int max_attempts = p.retry.max_attempts();
  bool reinitialized = false;
  int attempts = 0;
  int retries = 0;
  std::optional<Error> last;
  std::optional<std::chrono::steady_clock::time_point> first_sent;

  // The deadline ended the call: the last error that said something (a timeout when no attempt was
  // made), with the deadline as the reason the loop stopped.
  const auto deadline_reached = [&]() -> Result<T> {
    Error e;
    if (last) {
      e = std::move(*last);
      e.attempts = attempts;
    } else {
      e.code = errc::timeout;
      e.operation = s.operation;
      e.detail = "the call's deadline passed before the first attempt";
      e.request_id = s.request_id;
    }
    e.stop_reason = deadline_reason(attempts, s.deadline_length, p.clock.now() - s.start);
    return give_up(std::move(e));
  };
  // The limit an attempt's connect runs under: the smaller of its two.
  const auto connect_limit = [](const AttemptTimeouts& t) { return std::min(t.connect, t.total); };

  for (;;) {
    const auto now = p.clock.now();
    if (now >= s.deadline) return deadline_reached();
    ++attempts;
    if (p.observer) p.observer->on_attempt(AttemptEvent{s.request_id, s.operation, attempts});
    const auto left = std::chrono::ceil<milliseconds>(s.deadline - now);
    const AttemptTimeouts timeouts{std::min(p.per_attempt.connect, left), std::min(p.per_attempt.total, left)};
    const std::uint64_t epoch = ranks.epoch();

    if (!first_sent) first_sent = now;
    AttemptOutcome<T> outcome = attempt(timeouts);
    if (outcome.dedup_window_ms) dedup_window_ms = *outcome.dedup_window_ms;
    if (outcome.answered_2xx) p.budget.on_success();
    if (outcome.result) {
      if (p.observer) p.observer->on_success(SuccessEvent{s.request_id, s.operation, attempts, reinitialized});
      return std::move(outcome.result);
    }
    Error e = std::move(outcome.result).error();
    e.operation = s.operation;
    e.request_id = s.request_id;
    e.attempts = attempts;
    e.reinitialized = reinitialized;
    // The server answered 2xx: it applied the request, whatever the answer's bytes say. No policy may
    // repeat that (an allocate would be applied twice), so this is decided before classify.
    // (No stop_reason: like any error that is not repeatable, it is the whole story.)
    if (outcome.answered_2xx) return give_up(std::move(e));
    // An attempt whose connect the deadline cut short, and that timed out before its request left,
    // says only that the call's time ran out: the error before it (the refusals of a restarting
    // server, say) is what the caller needs.
    if (last && e.code == errc::timeout && !e.sent && connect_limit(timeouts) < connect_limit(p.per_attempt)) {
      return deadline_reached();
    }

    const RetryClass verdict = p.retry.classify(e);
    if (verdict == RetryClass::stop) return give_up(std::move(e));

    if (verdict == RetryClass::rank_lost) {
      // Ours only if the cause names this call's rank (or no rank at all).
      if (!s.rank || (e.rank && *e.rank != *s.rank)) return give_up(std::move(e));
      const Rank rank = *s.rank;
      if (reinitialized) {
        e.stop_reason = "rank " + std::to_string(rank) + " was not initialized again after the client restored it";
        return give_up(std::move(e));
      }
      // Waiting for another call's restore of the rank: not past this call's own deadline.
      auto restored = ranks.restore(rank, epoch, s.deadline - p.clock.now(), [&](std::int64_t num_pages, Role role) {
        if (p.observer) p.observer->on_reinitialize(ReinitializeEvent{s.request_id, s.operation, rank});
        return initialize(rank, num_pages, role, s);
      });
      switch (restored.outcome) {
        case RankRegistry::Outcome::unregistered:
          e.stop_reason = "rank " + std::to_string(rank) + " is not registered with this client: call ensure_initialized(" +
                          std::to_string(rank) + ", num_pages) or register_rank first, so that it restores the rank";
          return give_up(std::move(e));
        case RankRegistry::Outcome::failed:
          if (restored.failure->request_id.empty()) restored.failure->request_id = s.request_id;
          e.stop_reason = "re-initializing rank " + std::to_string(rank) + " failed: " + restored.failure->message();
          return give_up(std::move(e));
        case RankRegistry::Outcome::restored:
          break;
      }
      reinitialized = true;
      e.reinitialized = true;
      if (s.names_pages) {
        e.stop_reason = "rank " + std::to_string(rank) + " was re-initialized: the pages this " +
                        std::string(to_string(s.operation)) +
                        " names belong to the state the server lost; allocate again";
        return give_up(std::move(e));
      }
      // The repeat after a restore is always allowed, even past max_attempts: the attempt that met
      // "not initialized" could never have succeeded, and restores happen once per call.
      last = std::move(e);
      continue;  // at once: no backoff, no budget token
    }

    // Nothing accepted the connection (the server is restarting): the request never left and costs
    // the server nothing, so it is repeated without spending the budget, until the deadline rather
    // than an attempt count, so that a call rides out a restart; a budget that other failures
    // drained still stops it. A policy that does not ride out restarts counts it as any other.
    const bool ride_out = verdict == RetryClass::unapplied && outcome.unreachable && p.retry.rides_out_restarts();
    const bool budget_left = ride_out ? p.budget.allows() : p.budget.on_failure();
    // The server keeps the first attempt's answer for the window from when it answered, which is
    // after the first attempt was sent: a repeat that arrives within the window from the send finds
    // it (measured with the longest backoff the repeat may wait first).
    const bool dedup = dedup_window_ms > 0 && p.clock.now() + clamp_duration(p.backoff.delay(retries + 1, 1.0)) -
                                                          *first_sent <
                                                  clamp_duration(milliseconds(dedup_window_ms));
    if (verdict == RetryClass::ambiguous &&
        !p.idempotency.safe_to_repeat(RepeatQuery{s.operation, s.has_releases, dedup})) {
      e.stop_reason = "not safe to repeat " + std::string(to_string(s.operation)) + " after " +
                      std::string(to_string(e.code)) +
                      (e.status ? " (" + std::to_string(*e.status) + ")" : std::string(" (request sent)"));
      return give_up(std::move(e));
    }
    if (attempts >= max_attempts && !ride_out) {
      e.stop_reason = exhausted_reason(attempts, p.clock.now() - s.start);
      return give_up(std::move(e));
    }
    if (!budget_left) {
      e.stop_reason = "retry budget exhausted";
      return give_up(std::move(e));
    }
    ++retries;
    const nanoseconds delay = clamp_duration(p.backoff.delay(retries, p.jitter()));
    if (const auto at = p.clock.now(); at + delay >= s.deadline) {
      // The deadline came, or the next attempt would start at or after it: said as it is.
      e.stop_reason = at >= s.deadline ? deadline_reason(attempts, s.deadline_length, at - s.start)
                                       : no_time_reason(attempts, s.deadline_length, at - s.start, delay);
      return give_up(std::move(e));
    }
    if (p.observer) p.observer->on_retry(RetryEvent{s.request_id, s.operation, attempts, delay, e});
    p.sleeper.sleep_for(delay);
    last = std::move(e);
  }
}

}  // namespace hf3fs_meta::internal
