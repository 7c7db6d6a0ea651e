// Server metrics, rendered as Prometheus text by the server's metrics route through prometheus-cpp's
// core (its families and text serializer; not its HTTP server). The request counters are sharded per
// I/O thread so that recording a request touches no cache line another thread writes, and given to
// prometheus-cpp at scrape time (RequestCounters, a prometheus::Collectable).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "dedup_cache.hpp"
#include "hf3fs_meta/routes.hpp"
#include "durable/store.hpp"
#include "ha/role.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::server {

// The server's own routes, beside the protocol's (routes.hpp).
enum class ServerRoute : std::uint8_t { healthz, metrics, faults, ha_snapshot, bad_request, unauthorized };
struct ServerRouteInfo {
  ServerRoute route;
  std::string_view name;   // the path, or for bad_request the label
  std::string_view allow;  // the methods it takes
  bool operator_only = false;  // with --tenants-file: an operator's token only (it spans every namespace)
  bool any_role = false;       // --ha-etcd: answered by every member, not only by the leader
};
// bad_request: malformed HTTP or a body over the limit, before any route is known.
// unauthorized: 401, no or a wrong bearer token (--auth-token-file), before any route is served.
inline constexpr ServerRouteInfo kServerRoutes[] = {
    {ServerRoute::healthz, "/healthz", "GET", false, true},
    {ServerRoute::metrics, "/metrics", "GET", true, true},
    // --ha-etcd: on a member that is not the leader, DELETE and disk_error rules only (Router::serve_faults).
    {ServerRoute::faults, "/_faults", "DELETE, POST", true, true},
    // --ha-etcd: the newest snapshot, for a member behind the compacted log (ha/snapshot_fetch.hpp).
    {ServerRoute::ha_snapshot, "/_ha/snapshot", "GET", true},
    {ServerRoute::bad_request, "bad_request", ""},
    {ServerRoute::unauthorized, "unauthorized", ""},
};
// The optional server routes a server has: the others are no route (404 for everyone).
struct ServerRoutesOn {
  bool faults = false;  // --enable-fault-injection
  bool ha = false;      // --ha-etcd
};
// The server route at `path` that a server with `on` has; null if none.
constexpr const ServerRouteInfo* find_server_route(std::string_view path, ServerRoutesOn on) noexcept {
  for (const auto& row : kServerRoutes) {
    if (row.name != path) continue;
    if ((row.route == ServerRoute::faults && !on.faults) || (row.route == ServerRoute::ha_snapshot && !on.ha)) break;
    return &row;
  }
  return nullptr;
}
constexpr const ServerRouteInfo& route_info(ServerRoute route) noexcept {
  return kServerRoutes[static_cast<std::size_t>(route)];
}

// What an answer is counted under: a protocol route (its number) or a server route (after them).
class RouteLabel {
 public:
  static constexpr std::size_t kCount = kRouteCount + std::size(kServerRoutes);
  constexpr RouteLabel(Route route) noexcept : index_(static_cast<std::size_t>(route)) {}
  constexpr RouteLabel(ServerRoute route) noexcept : index_(kRouteCount + static_cast<std::size_t>(route)) {}
  static constexpr RouteLabel at(std::size_t index) noexcept {
    return index < kRouteCount ? RouteLabel(static_cast<Route>(index))
                               : RouteLabel(static_cast<ServerRoute>(index - kRouteCount));
  }
  constexpr std::size_t index() const noexcept { return index_; }
  constexpr std::string_view name() const noexcept {
    return index_ < kRouteCount ? to_string(static_cast<Route>(index_)) : kServerRoutes[index_ - kRouteCount].name;
  }

 private:
  std::size_t index_;
};

// The server's own accounting of its limits (README, "Limits"), read by /metrics; written by the
// network side.
struct LimitCounters {
  std::atomic<std::uint64_t> body_bytes_in_flight{0};  // request bodies received, not yet answered
  std::atomic<std::uint64_t> body_refused{0};          // requests answered 503 for the body budget
  std::atomic<std::uint64_t> connections{0};           // open now
  std::atomic<std::uint64_t> connections_evicted{0};   // idle ones closed to admit a new one
  std::atomic<std::uint64_t> connections_refused{0};   // new ones closed: none was idle to make room
  std::atomic<std::uint64_t> accept_failures{0};       // accept() errors (EMFILE...), each survived
  std::atomic<std::uint64_t> session_failures{0};      // exceptions that closed one connection
};
// The figures of an HA member (--ha-etcd; given to Metrics::render after its own): `applied_seq`
// is the state's last change.
std::vector<prometheus::MetricFamily> ha_families(const ha::Role& role, std::uint64_t applied_seq);

// The figures of a durable server's data dir (given to Metrics::render after its own).
std::vector<prometheus::MetricFamily> durability_families(const durable::StoreStats& store,
                                                          const durable::JournalStats& journal, bool failed);

// Requests answered, by route and status, and their latency, counted on the request path. Kept as
// relaxed uint64 counters sharded per I/O thread, not as prometheus-cpp's Counter and Histogram: those
// are shared by every thread (an atomic<double> CAS loop; the histogram takes a mutex), and the
// status, known only at the answer, would need a child lookup per request (or 600 children per route,
// every one of them exported); bench_metrics measures the two side by side. Collect() turns the
// counters into prometheus-cpp's families at scrape time.
class RequestCounters final : public prometheus::Collectable {
 public:
  explicit RequestCounters(std::size_t shards);
  ~RequestCounters() override;

  void record(std::size_t shard, RouteLabel route, int status, std::chrono::nanoseconds latency) noexcept;

  // hf3fs_meta_requests_total (the non-zero (route, status) pairs) and
  // hf3fs_meta_request_duration_seconds.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  static constexpr std::array<double, 15> kBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                      0.0025,  0.005,  0.01,    0.025,  0.05,
                                                      0.1,     0.25,   0.5,     1.0,    2.5};
  struct alignas(64) Shard {
    std::array<std::array<std::atomic<std::uint64_t>, 600>, RouteLabel::kCount>
        requests{};
    std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> buckets{};  // the last one is +Inf
    std::atomic<std::uint64_t> latency_sum_ns{0};
  };
  std::size_t shard_count_;
  std::unique_ptr<Shard[]> shards_;
};

class Metrics {
 public:
  explicit Metrics(std::size_t shards);
  ~Metrics();

  void record(std::size_t shard, RouteLabel route, int status, std::chrono::nanoseconds latency) noexcept {
    requests_.record(shard, route, status, latency);
  }

  // The Prometheus text of every family: the requests, the state's figures (per namespace, labelled
  // with it), the request-id cache's, the limits', then `more` (a durable server's).
  std::string render(const MetadataState& state, const DedupCache::Stats& dedup,
                     std::vector<prometheus::MetricFamily> more = {}) const;

  // The front's families alone (the requests and the limits), then `more`: hf3fs-meta-proxy's
  // /metrics, which has no state of its own.
  std::string render_front(std::vector<prometheus::MetricFamily> more) const;

  LimitCounters limits;

  void count_num_pages_mismatch() noexcept { num_pages_mismatches_.Increment(); }

 private:
  RequestCounters requests_;
  // The counters the server keeps in prometheus-cpp itself (off the request path), each child looked
  // up once, here.
  prometheus::Registry registry_;
  prometheus::Counter& num_pages_mismatches_;
};

}  // namespace hf3fs_meta::server
