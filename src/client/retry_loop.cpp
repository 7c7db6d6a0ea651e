#include "client/retry_loop.hpp"

#include <cstdio>

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

}  // namespace hf3fs_meta::internal
