// Server metrics, rendered as Prometheus text by GET /metrics. Counters are sharded per I/O thread
// so that recording a request touches no cache line another thread writes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::server {

// Every answer is counted under one of these.
enum class RouteLabel : std::uint8_t {
  initialize,
  batch_allocate,
  confirm_write,
  batch_exists,
  get_locations,
  clear,
  redirect,
  method_not_allowed,
  not_found,
  healthz,
  metrics,
  faults,
  bad_request,  // malformed HTTP or a body over the limit, before any route is known
  unauthorized,  // 401: no or a wrong bearer token (--auth-token-file), before any route is served
  count_
};
std::string_view label_name(RouteLabel label) noexcept;

class Metrics {
 public:
  explicit Metrics(std::size_t shards);
  ~Metrics();

  void record(std::size_t shard, RouteLabel route, int status, std::chrono::nanoseconds latency) noexcept;

  std::string render(const MetadataState& state, std::uint64_t dedup_hits, std::size_t dedup_size) const;

 private:
  static constexpr std::array<double, 15> kBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                      0.0025,  0.005,  0.01,    0.025,  0.05,
                                                      0.1,     0.25,   0.5,     1.0,    2.5};
  struct alignas(64) Shard {
    std::array<std::array<std::atomic<std::uint64_t>, 600>, static_cast<std::size_t>(RouteLabel::count_)>
        requests{};
    std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> buckets{};  // the last one is +Inf
    std::atomic<std::uint64_t> latency_sum_ns{0};
  };
  std::size_t shard_count_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace hf3fs_meta::server
