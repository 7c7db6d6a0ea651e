// Micro-benchmarks of MetadataState. Goals: BM_Release1000Into1M <= 50 us (vLLM: ~4.5 s),
// BM_Allocate128 <= 30 us, BM_Init1M <= 10 ms, BM_Exists1250 <= 100 us; BM_AllocateEvict128 within 2x
// BM_Allocate128.
//   bench_state --benchmark_filter=. --benchmark_repetitions=3
// The timed benchmarks use manual time around the measured call only, so that refilling the pool
// between iterations is not counted. That time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID,
// kernel time such as page faults included), not wall time: the build machine is shared, and wall
// time there mostly measures the other tenants. Wall-clock runs: --benchmark_filter, same names,
// with HF3FS_META_BENCH_WALL=1 in the environment.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {
namespace {

const bool kWallClock = std::getenv("HF3FS_META_BENCH_WALL") != nullptr;

double now_seconds() {
  timespec ts{};
  clock_gettime(kWallClock ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Clock {
  using time_point = double;
  static double now() { return now_seconds(); }
};

double seconds_since(double start) { return now_seconds() - start; }

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Keys shaped like vLLM's: 32 lowercase hex characters, distinct for distinct i.
std::string md5_like(std::uint64_t i) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(splitmix64(i)),
                static_cast<unsigned long long>(i));
  return std::string(buf, 32);
}

std::vector<BlockKey> block_keys(std::uint64_t first, std::size_t n) {
  std::vector<BlockKey> keys;
  for (std::size_t i = 0; i < n; ++i) keys.push_back(BlockKey{md5_like(first + i), ""});
  return keys;
}

// Allocates and confirms `n` keys on `rank`, 128 at a time, as workers do.
void fill(MetadataState& state, Rank rank, std::uint64_t first, std::size_t n) {
  for (std::size_t at = 0; at < n; at += 128) {
    const auto keys = block_keys(first + at, std::min<std::size_t>(128, n - at));
    const auto pages = state.allocate(rank, keys).value();
    std::vector<Confirmation> confirmations;
    for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages[i]});
    (void)state.confirm_write(rank, confirmations, {}).value();
  }
}

void BM_Init1M(benchmark::State& bench) {
  MetadataState state;
  for (auto _ : bench) {
    const auto start = Clock::now();
    auto created = state.initialize(0, 1'000'000);
    bench.SetIterationTime(seconds_since(start));
    if (!created || !created.value().created) bench.SkipWithError("initialize failed");
    state.clear();
  }
}
BENCHMARK(BM_Init1M)->UseManualTime()->Unit(benchmark::kMillisecond);

// Times allocate(rank, next_keys()) in each iteration; then, not timed, confirms the pages (`confirm`:
// the rank stays full of complete keys) or releases them (fresh keys never confirmed).
template <class NextKeys>
void time_allocates(benchmark::State& bench, MetadataState& state, Rank rank, NextKeys next_keys, bool confirm) {
  for (auto _ : bench) {
    const auto& keys = next_keys();
    const auto start = Clock::now();
    auto pages = state.allocate(rank, keys);
    bench.SetIterationTime(seconds_since(start));
    if (!pages || pages.value().back() == kNoPage) {
      bench.SkipWithError("allocate failed");
      break;
    }
    std::vector<Confirmation> confirmations;
    if (confirm) {
      for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages.value()[i]});
    }
    (void)state.confirm_write(rank, confirmations, confirm ? std::vector<Page>{} : pages.value()).value();
  }
  bench.SetItemsProcessed(bench.iterations() * 128);
}

// Each call: the next 128 keys never seen before.
auto fresh_keys() {
  return [next = std::uint64_t{10'000'000}]() mutable {
    next += 128;
    return block_keys(next - 128, 128);
  };
}

// 128 keys at a time on a 1M-page rank, with 100k keys already known on another rank (so lookups
// probe a real table).
template <class NextKeys>
void allocate_beside_100k_keys(benchmark::State& bench, NextKeys next_keys) {
  MetadataState state;
  (void)state.initialize(0, 1'000'000);
  (void)state.initialize(1, 200'000);
  fill(state, 1, 0, 100'000);
  time_allocates(bench, state, 0, next_keys, false);
}

// 128 fresh keys, the same ones in every iteration (their pages released, not timed).
void BM_Allocate128(benchmark::State& bench) {
  allocate_beside_100k_keys(bench, [keys = block_keys(10'000'000, 128)]() -> const auto& { return keys; });
}
BENCHMARK(BM_Allocate128)->UseManualTime()->Unit(benchmark::kMicrosecond);

// 128 keys never seen before in each iteration: the same lookups as BM_AllocateEvict128 makes for its
// own keys, without eviction. Fresh keys miss the caches that BM_Allocate128's repeated keys hit; the
// difference between this and BM_AllocateEvict128 is what evicting 128 keys costs.
void BM_Allocate128FreshKeys(benchmark::State& bench) {
  allocate_beside_100k_keys(bench, fresh_keys());
}
BENCHMARK(BM_Allocate128FreshKeys)->UseManualTime()->Unit(benchmark::kMicrosecond);

// 128 fresh keys on a full rank of `keys` complete keys with --eviction lru (and the server's
// default 5 s lease), each evicting one least recently used key. The fresh keys are then confirmed
// (not timed), so the rank stays full.
void allocate_evicting(benchmark::State& bench, std::uint32_t keys) {
  StateOptions options;
  options.eviction = Eviction::lru;
  options.read_lease = std::chrono::milliseconds(5000);
  MetadataState state(options);
  (void)state.initialize(0, keys);
  fill(state, 0, 0, keys);
  time_allocates(bench, state, 0, fresh_keys(), true);
}

// 100k keys on the rank. Goal: within 2x BM_Allocate128.
void BM_AllocateEvict128(benchmark::State& bench) { allocate_evicting(bench, 100'000); }
BENCHMARK(BM_AllocateEvict128)->UseManualTime()->Unit(benchmark::kMicrosecond);

// 1,024 keys on the rank: every line an allocate touches stays in the cache, so the difference from
// BM_AllocateEvict128 is what its cache misses cost, and what is left is the work.
void BM_AllocateEvict128Of1024(benchmark::State& bench) { allocate_evicting(bench, 1024); }
BENCHMARK(BM_AllocateEvict128Of1024)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Not timed: the memory a key costs (docs/performance.md, "Memory per key"), as malloc counts it (mallinfo2: bytes in use on the
// heap and in mmapped blocks): a state with 1M complete 32-byte keys on a 1M-page rank, eviction and
// leases on, minus the same state with the rank only. Includes the key table (2^21 8-byte slots).
void BM_BytesPerKey(benchmark::State& bench) {
  constexpr std::size_t kKeys = 1'000'000;
  const auto in_use = [] {
    const auto m = mallinfo2();
    return static_cast<double>(m.uordblks + m.hblkhd);
  };
  for (auto _ : bench) {
    StateOptions options;
    options.eviction = Eviction::lru;
    options.read_lease = std::chrono::milliseconds(5000);
    MetadataState state(options);
    (void)state.initialize(0, kKeys);
    const double rank_only = in_use();
    fill(state, 0, 0, kKeys);
    bench.counters["bytes_per_key"] = (in_use() - rank_only) / static_cast<double>(state.key_count());
  }
}
BENCHMARK(BM_BytesPerKey)->Iterations(1)->Unit(benchmark::kMillisecond);

// Confirm 128 allocated pages for 128 new keys (the write half of a worker's cycle), on a rank with
// 100k keys already known.
void BM_Confirm128(benchmark::State& bench) {
  MetadataState state;
  (void)state.initialize(0, 4'000'000);
  fill(state, 0, 0, 100'000);
  std::uint64_t next = 1'000'000'000;
  for (auto _ : bench) {
    const auto keys = block_keys(next, 128);
    next += 128;
    const auto pages = state.allocate(0, keys).value();
    std::vector<Confirmation> confirmations;
    for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages[i]});
    const auto start = Clock::now();
    auto confirmed = state.confirm_write(0, confirmations, {});
    bench.SetIterationTime(seconds_since(start));
    if (!confirmed || state.rank_stats(0)->free < 256) {
      bench.SkipWithError("confirm failed or pool exhausted");
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations() * 128);
}
BENCHMARK(BM_Confirm128)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Release 1,000 allocated pages into a 1M-page rank whose pool holds about 990k pages.
void BM_Release1000Into1M(benchmark::State& bench) {
  MetadataState state;
  (void)state.initialize(0, 1'000'000);
  const auto keys = block_keys(0, 1000);
  std::vector<Page> pages;
  for (int i = 0; i < 10; ++i) pages = state.allocate(0, keys).value();  // 10k out: 990k free
  for (auto _ : bench) {
    const auto start = Clock::now();
    auto released = state.confirm_write(0, {}, pages);
    bench.SetIterationTime(seconds_since(start));
    if (!released || released.value().released != 1000) {
      bench.SkipWithError("release failed");
      break;
    }
    pages = state.allocate(0, keys).value();  // back to 990k free (not timed)
  }
  bench.counters["free"] = static_cast<double>(state.rank_stats(0)->free);
  bench.SetItemsProcessed(bench.iterations() * 1000);
}
BENCHMARK(BM_Release1000Into1M)->UseManualTime()->Unit(benchmark::kMicrosecond);

// batch_exists of 1,250 keys (vLLM's largest batches) against 200k known keys, half of them present,
// in the namespace `ns` (a named one is found by its name under the lock, with two more
// namespaces beside it).
void exists_1250(benchmark::State& bench, NamespaceRef ns) {
  MetadataState state;
  if (!ns.name.empty()) {
    (void)state.initialize(NamespaceRef{"other-1"}, 0, 1);
    (void)state.initialize(NamespaceRef{"other-2"}, 0, 1);
  }
  (void)state.initialize(ns, 0, 1'000'000);
  for (std::size_t at = 0; at < 200'000; at += 128) {
    const auto keys = block_keys(at, 128);
    const auto pages = state.allocate(ns, 0, keys).value();
    std::vector<Confirmation> confirmations;
    for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages[i]});
    (void)state.confirm_write(ns, 0, confirmations, {}).value();
  }
  std::vector<std::string> keys;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1250; ++i) keys.push_back(md5_like(i % 2 ? rng() % 200'000 : 1'000'000 + rng() % 1'000'000));
  std::size_t found = 0;
  for (auto _ : bench) {
    const auto start = Clock::now();
    const auto exists = ns.name.empty() ? state.batch_exists(keys) : state.batch_exists(ns, keys);
    bench.SetIterationTime(seconds_since(start));
    found = static_cast<std::size_t>(std::count(exists.begin(), exists.end(), true));
    benchmark::DoNotOptimize(found);
  }
  bench.counters["found"] = static_cast<double>(found);
  bench.SetItemsProcessed(bench.iterations() * 1250);
}
void BM_Exists1250(benchmark::State& bench) { exists_1250(bench, NamespaceRef{}); }
BENCHMARK(BM_Exists1250)->UseManualTime()->Unit(benchmark::kMicrosecond);
void BM_Exists1250InNamespace(benchmark::State& bench) { exists_1250(bench, NamespaceRef{"bench"}); }
BENCHMARK(BM_Exists1250InNamespace)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Not timed: the memory of a namespace (docs/performance.md), as malloc counts it: 1,000 namespaces
// each created by a one-page rank and then cleared (empty, as a namespace stays), and 1,000 one-page
// ranks in one namespace.
void BM_NamespaceMemory(benchmark::State& bench) {
  constexpr int kCount = 1000;
  const auto in_use = [] {
    const auto m = mallinfo2();
    return static_cast<double>(m.uordblks + m.hblkhd);
  };
  for (auto _ : bench) {
    MetadataState state;
    std::vector<std::string> names;
    for (int i = 0; i < kCount; ++i) names.push_back("tenant-" + std::to_string(i));
    const double before = in_use();
    for (const std::string& name : names) (void)state.initialize(NamespaceRef{name}, 0, 1);
    for (const std::string& name : names) state.clear(NamespaceRef{name});
    bench.counters["bytes_per_empty_namespace"] = (in_use() - before) / kCount;
    const double before_ranks = in_use();
    for (Rank r = 0; r < kCount; ++r) (void)state.initialize(NamespaceRef{"ranks"}, r, 1);
    bench.counters["bytes_per_one_page_rank"] = (in_use() - before_ranks) / kCount;
  }
}
BENCHMARK(BM_NamespaceMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

// A worker's cycle on its own rank (allocate 128 new keys, confirm them, then allocate and release
// 128 more), run with 1 and 2 threads. Argument 0: each thread on its own rank of the default
// namespace (one namespace's lock is shared by them); 1: each in a namespace of its own (each
// namespace has its own lock). Items per second, with real time, are the calls the state carries.
void BM_WorkerCycle(benchmark::State& bench) {
  constexpr int kIterations = 2000;
  static MetadataState* state = nullptr;
  const bool own_namespace = bench.range(0) == 1;
  const auto name_of = [&](int thread) { return own_namespace ? "tenant-" + std::to_string(thread) : std::string(); };
  const std::string name = name_of(bench.thread_index());
  const NamespaceRef ns{name};
  const Rank rank = own_namespace ? 0 : bench.thread_index();
  if (bench.thread_index() == 0) {
    state = new MetadataState;
    for (int t = 0; t < bench.threads(); ++t) {
      const std::string other = name_of(t);
      (void)state->initialize(NamespaceRef{other}, own_namespace ? 0 : t, 1'000'000);
    }
  }
  // Generated before the timed loop; threads only touch `state` inside it (the loop starts and ends
  // on a barrier across threads, which also orders thread 0's setup and teardown).
  std::vector<std::vector<BlockKey>> batches;
  const std::uint64_t first = (std::uint64_t{1} << 40) * static_cast<std::uint64_t>(bench.thread_index() + 1);
  for (int i = 0; i < kIterations; ++i) batches.push_back(block_keys(first + static_cast<std::uint64_t>(i) * 128, 128));
  std::size_t at = 0;
  for (auto _ : bench) {
    const auto& keys = batches[at++ % batches.size()];
    const auto pages = state->allocate(ns, rank, keys).value();
    std::vector<Confirmation> confirmations;
    confirmations.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages[i]});
    (void)state->confirm_write(ns, rank, confirmations, {}).value();
    const auto spare = state->allocate(ns, rank, batches[(at + 1) % batches.size()]).value();
    (void)state->confirm_write(ns, rank, {}, spare).value();
  }
  bench.SetItemsProcessed(bench.iterations() * 128);
  if (bench.thread_index() == 0) {
    delete state;
    state = nullptr;
  }
}
BENCHMARK(BM_WorkerCycle)->ArgName("own_namespace")->Arg(0)->Arg(1)->Threads(1)->Threads(2)->Iterations(2000)
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// Tenant B's one-key allocate (and release) in its namespace, alone (argument 0) and while tenant A
// allocates and confirms batches of 100,000 new keys in its own (argument 1): B's p50 and p99 per call,
// as counters, in microseconds. B starts once A's first batch is under way, with a call due every
// 20 us for as long as A makes 8 batches. With one lock for all namespaces B waited for A's batches.
void BM_TenantLatency(benchmark::State& bench) {
  constexpr std::size_t kBigBatch = 100'000;
  constexpr int kBigBatches = 8;
  const bool busy_neighbour = bench.range(0) == 1;
  std::vector<std::vector<BlockKey>> big;
  std::vector<std::vector<Confirmation>> big_confirmed(kBigBatches);
  for (int n = 0; n < kBigBatches; ++n) big.push_back(block_keys((1ULL << 50) + n * kBigBatch, kBigBatch));
  std::vector<std::vector<BlockKey>> small;
  for (std::uint64_t i = 0; i < 1024; ++i) small.push_back(block_keys(i, 1));
  for (auto _ : bench) {
    MetadataState state;
    const NamespaceRef a{"tenant-a"};
    const NamespaceRef b{"tenant-b"};
    (void)state.initialize(a, 0, 1'000'000);
    (void)state.initialize(b, 0, 1'000'000);
    std::atomic<int> batches{busy_neighbour ? 0 : kBigBatches};
    std::atomic<bool> started{!busy_neighbour};
    std::thread neighbour;
    if (busy_neighbour) {
      neighbour = std::thread([&] {
        for (int n = 0; n < kBigBatches; ++n) {
          started = true;
          const auto pages = state.allocate(a, 0, big[n]).value();
          std::vector<Confirmation>& confirmations = big_confirmed[n];
          confirmations.clear();
          for (std::size_t k = 0; k < kBigBatch; ++k) confirmations.push_back({big[n][k].key, pages[k]});
          (void)state.confirm_write(a, 0, confirmations, {}).value();
          ++batches;
        }
      });
    }
    while (!started.load()) std::this_thread::yield();
    std::vector<double> latency_us;
    latency_us.reserve(1 << 20);
    // A call due every 20 us, as requests arrive: each is timed from when it was due, so the calls
    // that queued behind one that waited count their wait too (no coordinated omission). Alone,
    // 50,000 calls.
    constexpr auto kEvery = std::chrono::microseconds(20);
    const auto first = std::chrono::steady_clock::now();
    for (std::size_t i = 0; busy_neighbour ? batches.load() < kBigBatches : latency_us.size() < 50'000; ++i) {
      const auto due = first + i * kEvery;
      while (std::chrono::steady_clock::now() < due) {
      }
      const auto pages = state.allocate(b, 0, small[i % small.size()]).value();
      (void)state.confirm_write(b, 0, {}, pages).value();
      latency_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - due).count());
    }
    if (neighbour.joinable()) neighbour.join();
    std::sort(latency_us.begin(), latency_us.end());
    bench.counters["b_calls"] = static_cast<double>(latency_us.size());
    bench.counters["b_p50_us"] = latency_us[latency_us.size() / 2];
    bench.counters["b_p99_us"] = latency_us[latency_us.size() * 99 / 100];
    bench.counters["b_p90_us"] = latency_us[latency_us.size() * 90 / 100];
  }
}
BENCHMARK(BM_TenantLatency)->ArgName("busy_neighbour")->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hf3fs_meta

BENCHMARK_MAIN();
