// The client's resilience policies (docs/design.md, "Retries"): retry, backoff, idempotency, the retry
// budget, and the injectable clock, sleeper and observer. Each policy is a small class; Client keeps
// its own clone of the prototype given in ClientOptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

// The longest duration the client measures. Every duration it takes (ClientOptions' timeouts, a
// retry policy's deadline, CallOptions::deadline, a backoff's delay, the dedup window a server
// declares) is clamped to [0, kMaxDuration]: the clock counts nanoseconds in 64 bits (about 292
// years), so a time point plus a longer duration would overflow. 100 years is "no limit" to anyone.
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365 * 100);
constexpr std::chrono::milliseconds clamp_duration(std::chrono::milliseconds d) noexcept {
  return d < std::chrono::milliseconds(0) ? std::chrono::milliseconds(0) : d > kMaxDuration ? kMaxDuration : d;
}
// Compared in nanoseconds, which hold kMaxDuration exactly.
constexpr std::chrono::nanoseconds clamp_duration(std::chrono::nanoseconds d) noexcept {
  const std::chrono::nanoseconds max = kMaxDuration;
  return d < std::chrono::nanoseconds(0) ? std::chrono::nanoseconds(0) : d > max ? max : d;
}

// How the retry loop treats a failed attempt.
enum class RetryClass {
  stop,       // returned as it is
  unapplied,  // the server certainly did not apply it: repeated after backoff
  ambiguous,  // it may have been applied: repeated after backoff only if the call is safe to repeat
              // (IdempotencyPolicy)
  rank_lost,  // the server forgot the call's rank: a registered rank is initialized again (once per
              // call), then the call is repeated at once, without backoff or budget token
};

// docs/design.md's table ("Retries"): 503, or a transport failure before the request left -> unapplied (and one
// that nothing accepted, the server restarting, is repeated until the deadline whatever the attempt
// count, without spending the budget); 502, 504, server_error, or a transport failure after
// sending -> ambiguous; rank_not_initialized -> rank_lost; anything else (a protocol_error among
// them) -> stop.
RetryClass default_retry_class(const Error& error) noexcept;

// Which failures repeat, how many attempts a call may make, and how long the whole call may take.
class RetryPolicy {
 public:
  virtual ~RetryPolicy() = default;
  virtual std::unique_ptr<RetryPolicy> clone() const = 0;
  virtual int max_attempts() const = 0;
  virtual std::chrono::milliseconds deadline() const = 0;
  // The error is classified (code, status, sent) but not yet counted. Default: default_retry_class.
  virtual RetryClass classify(const Error& error) const { return default_retry_class(error); }
  // Whether a failure that nothing accepted (TransportError::unreachable: the server restarting), and
  // a 503 "not the leader" (a highly available service moving to another member; docs/design.md,
  // "Endpoints"), are repeated until the deadline whatever max_attempts() says, without spending the
  // budget (true, the default: a call rides out a restart or a failover), or counted as any other
  // unapplied failure (false).
  virtual bool rides_out_restarts() const { return true; }
};

// What LimitedAttemptsRetryPolicy does when nothing accepts the connection, or a member that is not
// the leader answers.
enum class Unreachable : std::uint8_t {
  ride_out,  // repeated until the deadline, whatever the attempt count (the default)
  count,     // an attempt like any other: vLLM's urllib3 Retry, the Python drop-in
};

// Default: 4 attempts within 10 s, riding out restarts. The deadline is clamped to kMaxDuration.
class LimitedAttemptsRetryPolicy final : public RetryPolicy {
 public:
  explicit LimitedAttemptsRetryPolicy(int max_attempts = 4,
                                      std::chrono::milliseconds deadline = std::chrono::seconds(10),
                                      Unreachable unreachable = Unreachable::ride_out);
  std::unique_ptr<RetryPolicy> clone() const override;
  int max_attempts() const override { return max_attempts_; }
  std::chrono::milliseconds deadline() const override { return deadline_; }
  bool rides_out_restarts() const override { return unreachable_ == Unreachable::ride_out; }

 private:
  int max_attempts_;
  std::chrono::milliseconds deadline_;
  Unreachable unreachable_;
};

// How long to wait before the n-th retry (n >= 1).
class BackoffPolicy {
 public:
  virtual ~BackoffPolicy() = default;
  virtual std::unique_ptr<BackoffPolicy> clone() const = 0;
  // `uniform01` is a number drawn uniformly from [0, 1), so tests can pin it.
  virtual std::chrono::nanoseconds delay(int retry, double uniform01) const = 0;
};

// Default: full jitter, uniform(0, min(cap, initial * 2^(n-1))), initial 50 ms, cap 2 s (both
// clamped to kMaxDuration).
class ExponentialBackoffPolicy final : public BackoffPolicy {
 public:
  explicit ExponentialBackoffPolicy(std::chrono::milliseconds initial = std::chrono::milliseconds(50),
                                    std::chrono::milliseconds cap = std::chrono::seconds(2));
  std::unique_ptr<BackoffPolicy> clone() const override;
  std::chrono::nanoseconds delay(int retry, double uniform01) const override;
  std::chrono::nanoseconds ceiling(int retry) const;  // the upper bound of the n-th delay

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds cap_;
};

// urllib3's Retry backoff (1.26 and 2.x alike), which vLLM's client uses with backoff_factor 0.3:
// no wait before the first retry, then backoff_factor * 2^(n-1) before the n-th (0.6 s, 1.2 s,
// 2.4 s, ...), at most `max` (urllib3's backoff_max, 120 s); no jitter (urllib3's default).
class Urllib3BackoffPolicy final : public BackoffPolicy {
 public:
  explicit Urllib3BackoffPolicy(std::chrono::milliseconds backoff_factor = std::chrono::milliseconds(300),
                                std::chrono::milliseconds max = std::chrono::seconds(120));
  std::unique_ptr<BackoffPolicy> clone() const override;
  std::chrono::nanoseconds delay(int retry, double uniform01) const override;

 private:
  std::chrono::milliseconds factor_;
  std::chrono::milliseconds max_;
};

// Which calls may be repeated after an ambiguous failure (the request may have been applied).
struct RepeatQuery {
  Operation operation = Operation::raw;
  bool has_releases = false;  // confirm_write with pages_to_release
  // The server declared request-id deduplication (X-Request-Id-Dedup: <window ms>) and the call's
  // first attempt was sent less than that window ago, so a repeat gets the first one's answer.
  bool server_dedups = false;
};
class IdempotencyPolicy {
 public:
  virtual ~IdempotencyPolicy() = default;
  virtual std::unique_ptr<IdempotencyPolicy> clone() const = 0;
  virtual bool safe_to_repeat(const RepeatQuery& query) const = 0;
};

// Default: the route table's Repeat column (routes.hpp): initialize, batch_exists, get_locations and
// confirm_write without releases are safe; allocate only with `repeat_allocate` or a deduplicating
// server (inside its window); a releasing confirm_write only with a deduplicating server (inside its
// window); clear and raw never.
class DefaultIdempotencyPolicy final : public IdempotencyPolicy {
 public:
  explicit DefaultIdempotencyPolicy(bool repeat_allocate = false) : repeat_allocate_(repeat_allocate) {}
  std::unique_ptr<IdempotencyPolicy> clone() const override;
  bool safe_to_repeat(const RepeatQuery& query) const override;

 private:
  bool repeat_allocate_;
};

// gRPC A6 retry throttling, per client.
struct RetryBudgetOptions {
  double max_tokens = 10.0;
  double failure_cost = 1.0;   // a retryable failure takes this
  double success_refund = 0.1; // a success gives this back
  // Retries stop while tokens <= max_tokens / 2.
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point now() = 0;
};

class Sleeper {
 public:
  virtual ~Sleeper() = default;
  virtual void sleep_for(std::chrono::nanoseconds duration) = 0;
};

struct AttemptEvent {
  std::string_view request_id;
  Operation operation;
  int attempt;  // 1-based
};
struct RetryEvent {
  std::string_view request_id;
  Operation operation;
  int attempt;  // the attempt that failed
  std::chrono::nanoseconds delay;
  const Error& error;  // why
};
struct ReinitializeEvent {
  std::string_view request_id;
  Operation operation;
  Rank rank;
};
struct GiveUpEvent {
  std::string_view request_id;
  Operation operation;
  const Error& error;  // the final error; error.stop_reason says why
};
struct SuccessEvent {
  std::string_view request_id;
  Operation operation;
  int attempts;
  bool reinitialized;
};

// Sees every attempt, retry, re-initialization and give-up of every call. Called on the calling
// thread; must be thread-safe when the client is shared.
class ClientObserver {
 public:
  virtual ~ClientObserver() = default;
  virtual void on_attempt(const AttemptEvent&) {}
  virtual void on_retry(const RetryEvent&) {}
  virtual void on_reinitialize(const ReinitializeEvent&) {}
  virtual void on_give_up(const GiveUpEvent&) {}
  virtual void on_success(const SuccessEvent&) {}
};

}  // namespace hf3fs_meta
