// Shared by the contract tests: a fixture that owns a real hf3fs-meta-server process, clients with
// fast policies aimed at it, raw HTTP shorthands, fault rules, and a reader of the server's
// per-rank page counts from GET /metrics (the state the tests compare before and after a request).
#pragma once

// Which sanitizer this build runs under (GCC's macros, clang's __has_feature): load and soak tests
// size their work by it, as a sanitized client and server are several times slower.
#if defined(__SANITIZE_THREAD__)
#define HF3FS_META_CONTRACT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HF3FS_META_CONTRACT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HF3FS_META_CONTRACT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HF3FS_META_CONTRACT_ASAN 1
#endif
#endif

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "support/fakes.hpp"
#include "support/raw_http.hpp"
#include "support/server_process.hpp"

namespace hf3fs_meta::contract {

using testing::RawResponse;
using testing::ServerProcess;
using Headers = std::vector<std::pair<std::string, std::string>>;

// The page counts GET /metrics reports for one rank.
struct RankPages {
  std::int64_t free = 0;
  std::int64_t allocated = 0;
  std::int64_t mapped = 0;
  std::int64_t orphaned = 0;
  std::int64_t kept_on_release = 0;  // hf3fs_meta_releases_kept_mapped_total
  std::int64_t total() const { return free + allocated + mapped + orphaned; }
  friend bool operator==(const RankPages&, const RankPages&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const RankPages& p) {
  return os << "{free " << p.free << ", allocated " << p.allocated << ", mapped " << p.mapped << ", orphaned "
            << p.orphaned << ", kept " << p.kept_on_release << "}";
}

// What the server's state looks like from outside: every rank's pages, and the number of keys.
struct StateSnapshot {
  std::map<Rank, RankPages> ranks;
  std::int64_t keys = -1;
  friend bool operator==(const StateSnapshot&, const StateSnapshot&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const StateSnapshot& s) {
  os << "{keys " << s.keys << ", ranks {";
  for (const auto& [rank, pages] : s.ranks) os << " " << rank << ": " << pages;
  return os << " }}";
}

// The value of `name{labels}` lines of a Prometheus text body, by their label text.
inline std::map<std::string, std::string> metric_series(std::string_view body, std::string_view name) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) end = body.size();
    const std::string_view line = body.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with(name)) continue;
    std::string_view rest = line.substr(name.size());
    std::string labels;
    if (rest.starts_with("{")) {
      // The closing brace outside quotes: label values may hold braces ("/rank/{rank}/initialize").
      std::size_t close = std::string_view::npos;
      bool quoted = false;
      for (std::size_t i = 1; i < rest.size() && close == std::string_view::npos; ++i) {
        if (rest[i] == '\\') {
          ++i;
        } else if (rest[i] == '"') {
          quoted = !quoted;
        } else if (rest[i] == '}' && !quoted) {
          close = i;
        }
      }
      if (close == std::string_view::npos) continue;
      labels = std::string(rest.substr(1, close - 1));
      rest = rest.substr(close + 1);
    }
    if (!rest.starts_with(" ")) continue;  // a longer metric name that shares the prefix
    out[labels] = std::string(rest.substr(1));
  }
  return out;
}

// "rank=\"3\",state=\"free\"" -> the value of one label.
inline std::string label_value(std::string_view labels, std::string_view label) {
  const std::string head = std::string(label) + "=\"";
  const auto at = labels.find(head);
  if (at == std::string_view::npos) return {};
  const auto start = at + head.size();
  return std::string(labels.substr(start, labels.find('"', start) - start));
}

// The default namespace's figures (every state family is labelled with its namespace).
inline StateSnapshot parse_snapshot(std::string_view metrics_body) {
  StateSnapshot s;
  for (const auto& [labels, value] : metric_series(metrics_body, "hf3fs_meta_rank_pages")) {
    if (label_value(labels, "namespace") != "default") continue;
    const Rank rank = std::stoll(label_value(labels, "rank"));
    const std::string state = label_value(labels, "state");
    RankPages& p = s.ranks[rank];
    const std::int64_t n = std::stoll(value);
    if (state == "free") p.free = n;
    if (state == "allocated") p.allocated = n;
    if (state == "mapped") p.mapped = n;
    if (state == "orphaned") p.orphaned = n;
  }
  for (const auto& [labels, value] : metric_series(metrics_body, "hf3fs_meta_releases_kept_mapped_total")) {
    if (label_value(labels, "namespace") != "default") continue;
    s.ranks[std::stoll(label_value(labels, "rank"))].kept_on_release = std::stoll(value);
  }
  const auto keys = metric_series(metrics_body, "hf3fs_meta_keys");
  if (auto it = keys.find("namespace=\"default\""); it != keys.end()) s.keys = std::stoll(it->second);
  return s;
}

// Policies that keep a contract test fast: millisecond backoff, and as many attempts as asked.
inline ClientOptions fast_options(const ServerProcess& server, int max_attempts = 4) {
  ClientOptions o;
  o.base_url = server.base_url();
  o.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(max_attempts, std::chrono::seconds(20));
  o.backoff_policy = std::make_shared<ExponentialBackoffPolicy>(std::chrono::milliseconds(1),
                                                                std::chrono::milliseconds(5));
  return o;
}

class ContractTest : public ::testing::Test {
 protected:
  explicit ContractTest(std::vector<std::string> args = {"--threads", "2", "--enable-fault-injection"})
      : server_(std::move(args)) {}

  // A server that ends with anything but 0 on SIGTERM failed too (a sanitizer's report, a crash).
  void TearDown() override {
    if (server_.running()) {
      EXPECT_EQ(server_.terminate(), 0) << "hf3fs-meta-server did not exit cleanly";
    }
  }

  std::unique_ptr<Client> make_client(int max_attempts = 4,
                                      std::shared_ptr<testing::RecordingObserver> observer = nullptr) {
    auto o = fast_options(server_, max_attempts);
    o.observer = std::move(observer);
    return std::make_unique<Client>(std::move(o));
  }

  RawResponse post(std::string_view target, std::string_view body, const Headers& headers = {}) {
    return testing::raw_request(server_.host(), server_.port(), "POST", target, body, headers);
  }
  RawResponse get(std::string_view target) {
    return testing::raw_request(server_.host(), server_.port(), "GET", target);
  }

  void add_fault(std::string_view rule) {
    const auto r = post("/_faults", rule);
    ASSERT_EQ(r.status, 200) << "fault rule " << rule << ": " << r.body;
  }
  void forget_state() { add_fault(R"({"forget_state":true})"); }

  std::string metrics_body() {
    const auto r = get("/metrics");
    EXPECT_EQ(r.status, 200);
    return r.body;
  }
  StateSnapshot snapshot() { return parse_snapshot(metrics_body()); }
  RankPages pages(Rank rank) {
    auto s = snapshot();
    auto it = s.ranks.find(rank);
    EXPECT_NE(it, s.ranks.end()) << "rank " << rank << " not in /metrics";
    return it == s.ranks.end() ? RankPages{} : it->second;
  }
  // hf3fs_meta_requests_total for a route, all statuses summed, or one status.
  std::int64_t requests(std::string_view route, std::optional<int> status = std::nullopt) {
    std::int64_t total = 0;
    for (const auto& [labels, value] : metric_series(metrics_body(), "hf3fs_meta_requests_total")) {
      if (label_value(labels, "route") != route) continue;
      if (status && label_value(labels, "status") != std::to_string(*status)) continue;
      total += std::stoll(value);
    }
    return total;
  }
  std::int64_t dedup_hits() {
    const auto series = metric_series(metrics_body(), "hf3fs_meta_request_id_cache_hits_total");
    auto it = series.find("");
    return it == series.end() ? -1 : std::stoll(it->second);
  }

  ServerProcess server_;
};

inline std::string describe(const Error& e) {
  return std::string(to_string(e.code)) + " (status " + (e.status ? std::to_string(*e.status) : "none") +
         ", attempts " + std::to_string(e.attempts) + "): " + e.message();
}

// Matchers for Result<T>: printing the error when a call fails where it should not.
MATCHER(IsOk, "succeeds") {
  if (arg) return true;
  *result_listener << "fails with " << describe(arg.error());
  return false;
}
MATCHER_P(HasValue, matcher, "succeeds with a value that matches") {
  if (!arg) {
    *result_listener << "fails with " << describe(arg.error());
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, arg.value(), result_listener);
}
MATCHER_P(FailsWith, code, "fails with " + std::string(to_string(code))) {
  if (arg) {
    *result_listener << "succeeds";
    return false;
  }
  *result_listener << "fails with " << describe(arg.error());
  return arg.error().code == code;
}

// Keys as allocate takes them (each with the empty prefix key).
inline std::vector<BlockKey> blocks(const std::vector<std::string>& keys) { return {keys.begin(), keys.end()}; }


}  // namespace hf3fs_meta::contract
