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

LimitedAttemptsRetryPolicy::LimitedAttemptsRetryPolicy(int max_attempts, std::chrono::milliseconds deadline)
    : max_attempts_(std::max(1, max_attempts)), deadline_(std::max(deadline, std::chrono::milliseconds(0))) {}

std::unique_ptr<RetryPolicy> LimitedAttemptsRetryPolicy::clone() const {
  return std::make_unique<LimitedAttemptsRetryPolicy>(*this);
}

ExponentialBackoffPolicy::ExponentialBackoffPolicy(std::chrono::milliseconds initial, std::chrono::milliseconds cap)
    : initial_(std::max(initial, std::chrono::milliseconds(0))), cap_(std::max(cap, std::chrono::milliseconds(0))) {}

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
