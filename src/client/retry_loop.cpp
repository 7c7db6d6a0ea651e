#include "client/retry_loop.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace hf3fs_meta::internal {

namespace {
std::string attempts_text(int attempts) {
  return std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts");
}
}  // namespace

// Short, and exact enough for a person.
std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::chrono::duration<double>(d).count());
  return buf;
}

std::string exhausted_reason(int attempts, std::chrono::nanoseconds took) {
  return "retry policy exhausted after " + attempts_text(attempts) + " in " + seconds_text(took) + " s";
}

std::string deadline_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took) {
  return "deadline of " + seconds_text(deadline) + " s reached after " + attempts_text(attempts) + " in " +
         seconds_text(took) + " s";
}

std::string no_time_reason(int attempts, std::chrono::nanoseconds deadline, std::chrono::nanoseconds took,
                           std::chrono::nanoseconds backoff) {
  return "stopped after " + attempts_text(attempts) + " in " + seconds_text(took) + " s: the next attempt, after a " +
         seconds_text(backoff) + " s backoff, could not start within the deadline of " + seconds_text(deadline) + " s";
}

void note_tried(LoopState& state, const Error& e, std::string_view endpoint, bool not_leader, std::string_view leader,
                bool unreachable) {
  state.met_not_leader = state.met_not_leader || not_leader;
  if (endpoint.empty()) return;
  std::string what;
  if (not_leader) {
    what = "503 not the leader";
    if (!leader.empty()) {
      what += ", naming ";
      what += leader;
    }
  } else if (e.status) {
    what = std::to_string(*e.status);
    what += ' ';
    what += to_string(e.code);
  } else if (unreachable) {
    what = "nothing accepted the connection";
  } else {
    what = to_string(e.code);
    what += e.sent ? ", request sent" : ", request not sent";
  }
  const bool leaderless = not_leader || !e.status;
  for (auto& tried : state.tried) {
    if (tried.endpoint == endpoint) {
      tried.failure = std::move(what);
      tried.leaderless = leaderless;
      return;
    }
  }
  if (state.tried.size() < kMaxTriedEndpoints) {
    state.tried.push_back({std::string(endpoint), std::move(what), leaderless});
  }
}

std::string with_endpoints(std::string reason, const LoopState& state) {
  if (state.tried.empty() || (state.tried.size() == 1 && !state.met_not_leader)) return reason;
  const bool leaderless =
      std::all_of(state.tried.begin(), state.tried.end(), [](const LoopState::Tried& t) { return t.leaderless; });
  reason += leaderless ? "; no endpoint answered as the leader: " : "; endpoints tried, each with its last failure: ";
  for (std::size_t i = 0; i < state.tried.size(); ++i) {
    if (i > 0) reason += ", ";
    reason += state.tried[i].endpoint;
    reason += " (";
    reason += state.tried[i].failure;
    reason += ')';
  }
  return reason;
}

namespace {

// The limit an attempt's connect runs under: the smaller of its two.
std::chrono::milliseconds connect_limit(const AttemptTimeouts& t) { return std::min(t.connect, t.total); }

Decision stop(std::string reason = {}) { return Decision{Decision::Action::stop, {}, std::move(reason)}; }

// A failure the policies classified as worth repeating (unapplied, or ambiguous): whether it is safe
// to, whether the attempts, the budget and the deadline allow it, and after what backoff.
Decision decide_repeat(const RetryLoopPolicies& p, const CallSpec& s, const LoopState& state,
                       const FailedAttempt& failed, RetryClass verdict) {
  using std::chrono::milliseconds;
  const Error& e = failed.error;
  // Nothing accepted the connection (the server is restarting), or a member that is not the leader
  // answered (the service is moving to another member): the request was not applied and cost the
  // service next to nothing, so it is repeated without spending the budget, until the deadline
  // rather than an attempt count, so that a call rides out a restart or a failover; a budget that
  // other failures drained still stops it. A policy that does not ride out restarts counts it as
  // any other.
  const bool ride_out = verdict == RetryClass::unapplied && (failed.unreachable || failed.not_leader) &&
                        p.retry.rides_out_restarts();
  const bool budget_left = ride_out ? p.budget.allows() : p.budget.on_failure();
  // The server keeps the first attempt's answer for the window from when it answered, which is
  // after the first attempt was sent: a repeat that arrives within the window from the send finds
  // it (measured with the longest backoff the repeat may wait first).
  const bool dedup = state.dedup_window_ms > 0 &&
                     p.clock.now() + clamp_duration(p.backoff.delay(state.retries + 1, 1.0)) - *state.first_sent <
                         clamp_duration(milliseconds(state.dedup_window_ms));
  if (verdict == RetryClass::ambiguous &&
      !p.idempotency.safe_to_repeat(RepeatQuery{s.operation, s.has_releases, dedup})) {
    return stop("not safe to repeat " + std::string(to_string(s.operation)) + " after " +
                std::string(to_string(e.code)) +
                (e.status ? " (" + std::to_string(*e.status) + ")" : std::string(" (request sent)")));
  }
  if (state.attempts >= p.retry.max_attempts() && !ride_out) {
    return stop(with_endpoints(exhausted_reason(state.attempts, p.clock.now() - s.start), state));
  }
  if (!budget_left) return stop(with_endpoints("retry budget exhausted", state));
  // The member named the leader: the next attempt goes there at once, unless this attempt was itself
  // such a hop (members naming each other, as a failover settles, then wait a backoff per round).
  const bool at_once = failed.leader_named && !state.hopped;
  const std::chrono::nanoseconds delay =
      at_once ? std::chrono::nanoseconds(0) : clamp_duration(p.backoff.delay(state.retries + 1, p.jitter()));
  if (const auto at = p.clock.now(); at >= s.deadline || (!at_once && at + delay >= s.deadline)) {
    // The deadline came, or the next attempt would start at or after it: said as it is.
    return stop(with_endpoints(at >= s.deadline
                                   ? deadline_reason(state.attempts, s.deadline_length, at - s.start)
                                   : no_time_reason(state.attempts, s.deadline_length, at - s.start, delay),
                               state));
  }
  return Decision{Decision::Action::retry, delay, {}, at_once};
}

}  // namespace

Decision decide(const RetryLoopPolicies& p, const CallSpec& s, const LoopState& state, const FailedAttempt& failed) {
  const Error& e = failed.error;
  // The server answered 2xx: it applied the request, whatever the answer's bytes say. No policy may
  // repeat that (an allocate would be applied twice), so this is decided before classify.
  // (No stop_reason: like any error that is not repeatable, it is the whole story.)
  if (failed.answered_2xx) return stop();
  // An attempt whose connect the deadline cut short, and that timed out before its request left,
  // says only that the call's time ran out: the error before it (the refusals of a restarting
  // server, say) is what the caller needs.
  if (state.last && e.code == errc::timeout && !e.sent && connect_limit(state.timeouts) < connect_limit(p.per_attempt)) {
    return Decision{Decision::Action::stop_at_deadline, {}, {}};
  }
  RetryClass verdict = p.retry.classify(e);
  if (verdict == RetryClass::stop) return stop();
  // A member that is not the leader applied nothing, whatever a policy's classify makes of a 503: the
  // call's idempotency does not matter.
  if (failed.not_leader && verdict == RetryClass::ambiguous) verdict = RetryClass::unapplied;
  if (verdict != RetryClass::rank_lost) return decide_repeat(p, s, state, failed, verdict);
  // Ours only if the cause names this call's rank (or no rank at all).
  if (!s.rank || (e.rank && *e.rank != *s.rank)) return stop();
  if (state.reinitialized) {
    return stop("rank " + std::to_string(*s.rank) + " was not initialized again after the client restored it");
  }
  return Decision{Decision::Action::restore_rank, {}, {}};
}

}  // namespace hf3fs_meta::internal
