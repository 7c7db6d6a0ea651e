// The request path's accounting, per answered request: the server's sharded counters
// (Metrics::record) beside prometheus-cpp 1.0.1's Counter and Histogram with their children looked up
// once (the best case for the library: the server's statuses vary, so it would need a lookup or 600
// children per route). One thread, and two threads recording at once as two I/O threads do.
#include <chrono>

#include <benchmark/benchmark.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "metrics.hpp"

namespace {

using hf3fs_meta::Route;
using hf3fs_meta::server::Metrics;

constexpr auto kLatency = std::chrono::microseconds(120);

void BM_RecordShardedCounters(benchmark::State& state) {
  static Metrics metrics(2);
  const auto shard = static_cast<std::size_t>(state.thread_index());
  for (auto _ : state) metrics.record(shard, Route::batch_exists, 200, kLatency);
}
BENCHMARK(BM_RecordShardedCounters)->Threads(1)->Threads(2);

struct PrometheusRequestMetrics {
  prometheus::Registry registry;
  prometheus::Counter& requests = prometheus::BuildCounter()
                                      .Name("hf3fs_meta_requests_total")
                                      .Help("Requests answered, by route and status.")
                                      .Register(registry)
                                      .Add({{"route", "/keys/batch_exists"}, {"status", "200"}});
  prometheus::Histogram& duration = prometheus::BuildHistogram()
                                        .Name("hf3fs_meta_request_duration_seconds")
                                        .Help("Time from a complete request to its answer.")
                                        .Register(registry)
                                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                                     0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5});
};

void BM_RecordPrometheusCounters(benchmark::State& state) {
  static PrometheusRequestMetrics metrics;
  for (auto _ : state) {
    metrics.requests.Increment();
    metrics.duration.Observe(std::chrono::duration<double>(kLatency).count());
  }
}
BENCHMARK(BM_RecordPrometheusCounters)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
