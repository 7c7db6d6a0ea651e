#include "hf3fs_meta/policies.hpp"

#include <algorithm>
#include <cmath>

#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta {

RetryClass default_retry_class(const Error& e) noexcept {
  if (e.code == errc::rank_not_initialized) return RetryClass::rank_lost;
  if (e.code == errc::protocol_error) return RetryClass::stop;  // an answer too large to read, too
  const bool transport_failure = !e.status.has_value();
  if ((transport_failure && !e.sent) || e.status == 503) return RetryClass::unapplied;
  if (transport_failure || e.status == 502 || e.status == 504 || e.code == errc::server_error) {
    return RetryClass::ambiguous;
  }
  return RetryClass::stop;
}

LimitedAttemptsRetryPolicy::LimitedAttemptsRetryPolicy(int max_attempts, std::chrono::milliseconds deadline,
                                                       Unreachable unreachable)
    : max_attempts_(std::max(1, max_attempts)), deadline_(clamp_duration(deadline)), unreachable_(unreachable) {}

std::unique_ptr<RetryPolicy> LimitedAttemptsRetryPolicy::clone() const {
  return std::make_unique<LimitedAttemptsRetryPolicy>(*this);
}

ExponentialBackoffPolicy::ExponentialBackoffPolicy(std::chrono::milliseconds initial, std::chrono::milliseconds cap)
    : initial_(clamp_duration(initial)), cap_(clamp_duration(cap)) {}

std::unique_ptr<BackoffPolicy> ExponentialBackoffPolicy::clone() const {
  return std::make_unique<ExponentialBackoffPolicy>(*this);
}

std::chrono::nanoseconds ExponentialBackoffPolicy::ceiling(int retry) const {
  const std::chrono::nanoseconds cap = cap_;
  std::chrono::nanoseconds bound = initial_;
  // Doubling stops at the cap, so a large retry number cannot overflow.
  for (int n = 1; n < retry && bound < cap; ++n) bound *= 2;
  return std::min(bound, cap);
}

std::chrono::nanoseconds ExponentialBackoffPolicy::delay(int retry, double uniform01) const {
  const double u = std::clamp(uniform01, 0.0, 1.0);
  const auto bound = ceiling(retry);
  auto d = std::chrono::nanoseconds(static_cast<std::int64_t>(std::floor(static_cast<double>(bound.count()) * u)));
  // [0, bound): u is below 1, but rounding must not reach the bound either.
  if (d >= bound && bound.count() > 0) d = bound - std::chrono::nanoseconds(1);
  return d;
}

Urllib3BackoffPolicy::Urllib3BackoffPolicy(std::chrono::milliseconds backoff_factor, std::chrono::milliseconds max)
    : factor_(clamp_duration(backoff_factor)), max_(clamp_duration(max)) {}

std::unique_ptr<BackoffPolicy> Urllib3BackoffPolicy::clone() const {
  return std::make_unique<Urllib3BackoffPolicy>(*this);
}

// urllib3's get_backoff_time(): 0 while one error is in the history, then factor * 2^(errors - 1);
// the n-th retry follows n errors.
std::chrono::nanoseconds Urllib3BackoffPolicy::delay(int retry, double) const {
  if (retry <= 1) return std::chrono::nanoseconds(0);
  const std::chrono::nanoseconds max = max_;
  std::chrono::nanoseconds d = factor_;
  // Doubling stops at the cap, so a large retry number cannot overflow.
  for (int n = 1; n < retry && d < max; ++n) d *= 2;
  return std::min(d, max);
}

std::unique_ptr<IdempotencyPolicy> DefaultIdempotencyPolicy::clone() const {
  return std::make_unique<DefaultIdempotencyPolicy>(*this);
}

bool DefaultIdempotencyPolicy::safe_to_repeat(const RepeatQuery& query) const {
  const RouteInfo* route = route_of(query.operation);
  if (!route) return false;  // raw: unknown semantics
  switch (route->repeat) {
    case Repeat::always: return true;
    case Repeat::without_releases: return !query.has_releases || query.server_dedups;
    case Repeat::if_deduplicated: return repeat_allocate_ || query.server_dedups;
    case Repeat::never: return false;
  }
  return false;
}

}  // namespace hf3fs_meta
