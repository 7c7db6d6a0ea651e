// Round-trip latency over loopback, p50 and p99, as Google Benchmark counters:
//   BM_CurlNginx            a bare libcurl POST (one reused handle) to nginx answering a fixed body
//   BM_CurlAllocate1        the same bare libcurl call, a 1-key batch_allocate to hf3fs-meta-server
//   BM_SdkAllocate1         Client::allocate of one fresh key to hf3fs-meta-server
//   BM_SdkExists1           Client::batch_exists of one key (bench/python_roundtrip compares the
//                           Python module's call with it)
// The servers come from the environment (bench/run sets them): HF3FS_META_URL (a server with rank 0
// initialized with enough pages) and HF3FS_BENCH_NGINX_URL.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <curl/curl.h>

#include "hf3fs_meta/client.hpp"

namespace {

using Clock = std::chrono::steady_clock;

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Records each iteration's latency and reports p50/p99 in microseconds.
class Latencies {
 public:
  void add(Clock::duration d) { samples_.push_back(std::chrono::duration<double, std::micro>(d).count()); }
  void report(benchmark::State& state) {
    if (samples_.empty()) return;
    std::sort(samples_.begin(), samples_.end());
    auto at = [&](double q) { return samples_[static_cast<std::size_t>(q * static_cast<double>(samples_.size() - 1))]; };
    state.counters["p50_us"] = at(0.50);
    state.counters["p99_us"] = at(0.99);
  }

 private:
  std::vector<double> samples_;
};

std::size_t discard(char*, std::size_t size, std::size_t n, void*) { return size * n; }

// A bare libcurl client as a careful user would write it: one handle, keep-alive, TCP_NODELAY.
class BareCurl {
 public:
  explicit BareCurl(const std::string& url) : handle_(curl_easy_init()) {
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
    headers_ = curl_slist_append(headers_, "Expect:");
    curl_easy_setopt(handle_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(handle_, CURLOPT_WRITEFUNCTION, discard);
  }
  ~BareCurl() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(handle_);
  }
  BareCurl(const BareCurl&) = delete;
  BareCurl& operator=(const BareCurl&) = delete;

  long post(const std::string& body) {
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(handle_, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    if (curl_easy_perform(handle_) != CURLE_OK) return 0;
    long status = 0;
    curl_easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }

 private:
  CURL* handle_;
  curl_slist* headers_ = nullptr;
};

std::string fresh_key(const char* tag, std::uint64_t n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%026llx", tag, static_cast<unsigned long long>(n));
  return buf;
}

void BM_CurlNginx(benchmark::State& state) {
  const char* base = env("HF3FS_BENCH_NGINX_URL");
  if (base == nullptr) return state.SkipWithError("HF3FS_BENCH_NGINX_URL is not set (bench/run sets it)");
  BareCurl curl(std::string(base) + "/keys/batch_allocate");
  const std::string body = R"({"rank":0,"keys":[["0123456789abcdef0123456789abcdef",""]]})";
  Latencies latencies;
  for (auto _ : state) {
    auto start = Clock::now();
    if (curl.post(body) != 200) return state.SkipWithError("nginx did not answer 200");
    latencies.add(Clock::now() - start);
  }
  latencies.report(state);
}
BENCHMARK(BM_CurlNginx)->UseRealTime()->MinTime(3.0);

void BM_CurlAllocate1(benchmark::State& state) {
  const char* base = env("HF3FS_META_URL");
  if (base == nullptr) return state.SkipWithError("HF3FS_META_URL is not set (bench/run sets it)");
  BareCurl curl(std::string(base) + "/keys/batch_allocate");
  Latencies latencies;
  std::uint64_t n = 0;
  for (auto _ : state) {
    std::string body = R"({"rank":0,"keys":[[")" + fresh_key("c0ffee", ++n) + R"(",""]]})";
    auto start = Clock::now();
    if (curl.post(body) != 200) return state.SkipWithError("the server did not answer 200");
    latencies.add(Clock::now() - start);
  }
  latencies.report(state);
}
BENCHMARK(BM_CurlAllocate1)->UseRealTime()->MinTime(3.0);

void BM_SdkAllocate1(benchmark::State& state) {
  const char* base = env("HF3FS_META_URL");
  if (base == nullptr) return state.SkipWithError("HF3FS_META_URL is not set (bench/run sets it)");
  hf3fs_meta::ClientOptions options;
  options.base_url = base;
  hf3fs_meta::Client client(std::move(options));
  Latencies latencies;
  std::uint64_t n = 0;
  for (auto _ : state) {
    std::vector<hf3fs_meta::BlockKey> keys{fresh_key("5dcafe", ++n)};
    auto start = Clock::now();
    auto result = client.allocate(0, keys);
    latencies.add(Clock::now() - start);
    if (!result) return state.SkipWithError(result.error().message().c_str());
  }
  latencies.report(state);
}
BENCHMARK(BM_SdkAllocate1)->UseRealTime()->MinTime(3.0);

void BM_SdkExists1(benchmark::State& state) {
  const char* base = env("HF3FS_META_URL");
  if (base == nullptr) return state.SkipWithError("HF3FS_META_URL is not set (bench/run sets it)");
  hf3fs_meta::ClientOptions options;
  options.base_url = base;
  hf3fs_meta::Client client(std::move(options));
  const std::vector<std::string> keys{fresh_key("e815ed", 1)};
  Latencies latencies;
  for (auto _ : state) {
    auto start = Clock::now();
    auto result = client.batch_exists(keys);
    latencies.add(Clock::now() - start);
    if (!result) return state.SkipWithError(result.error().message().c_str());
  }
  latencies.report(state);
}
BENCHMARK(BM_SdkExists1)->UseRealTime()->MinTime(3.0);

}  // namespace

BENCHMARK_MAIN();
