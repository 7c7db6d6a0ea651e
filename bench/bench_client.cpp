// Micro-benchmarks of the protocol codec on vLLM's batch shapes: 128 keys per allocate, about 1,250
// per exists, keys that are 32-character md5 hex strings with an empty prefix key.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/service.hpp"
#include "hf3fs_meta/state.hpp"

namespace {

using namespace hf3fs_meta;

// Deterministic stand-ins for md5 hex digests: 32 lowercase hex characters, all distinct.
std::vector<std::string> md5_like_keys(std::size_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  std::uint64_t x = 0x9e107d9d372bb682ull;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%016llx%016llx", static_cast<unsigned long long>(x),
                  static_cast<unsigned long long>(i * 0x9E3779B97F4A7C15ull));
    keys.emplace_back(buffer, 32);
  }
  return keys;
}

std::vector<BlockKey> block_keys(std::size_t n) {
  std::vector<BlockKey> keys;
  for (auto& k : md5_like_keys(n)) keys.push_back(BlockKey{std::move(k), ""});
  return keys;
}

void BM_EncodeDecodeAllocate128(benchmark::State& state) {
  const std::vector<BlockKey> keys = block_keys(128);
  std::vector<Page> pages(keys.size());
  for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<Page>(i * 7 % 1000);
  const std::string answer = protocol::encode_allocate_response(3, keys, pages);
  const std::string error_body = protocol::encode_detail("Allocation failed: Rank 3 not initialized");
  for (auto _ : state) {
    std::string request = protocol::encode_allocate_request(3, keys);
    benchmark::DoNotOptimize(request.data());
    auto decoded = protocol::decode_allocate_response(answer, keys);
    if (!decoded || decoded.value().size() != keys.size()) {
      state.SkipWithError("allocate answer refused");
      break;
    }
    benchmark::DoNotOptimize(decoded.value().data());
    auto classified = protocol::classify_error(500, "application/json", error_body);
    if (classified.code != errc::rank_not_initialized) {
      state.SkipWithError("misclassified");
      break;
    }
    benchmark::DoNotOptimize(classified.rank);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(keys.size()));
}
BENCHMARK(BM_EncodeDecodeAllocate128);

void BM_EncodeDecodeExists1250(benchmark::State& state) {
  const std::vector<std::string> keys = md5_like_keys(1250);
  std::vector<bool> exists(keys.size());
  for (std::size_t i = 0; i < exists.size(); ++i) exists[i] = i % 3 == 0;
  const std::string answer = protocol::encode_batch_exists_response(exists);
  for (auto _ : state) {
    std::string request = protocol::encode_batch_exists_request(keys);
    benchmark::DoNotOptimize(request.data());
    auto decoded = protocol::decode_batch_exists_response(answer, keys.size());
    if (!decoded) {
      state.SkipWithError("exists answer refused");
      break;
    }
    benchmark::DoNotOptimize(decoded.value());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(keys.size()));
}
BENCHMARK(BM_EncodeDecodeExists1250);

// The server's side of an allocate: strict decode of 128 keys and the answer's encoding.
void BM_ServerDecodeAllocate128(benchmark::State& state) {
  const std::vector<BlockKey> keys = block_keys(128);
  const std::string request = protocol::encode_allocate_request(3, keys);
  std::vector<Page> pages(keys.size(), 5);
  for (auto _ : state) {
    auto decoded = protocol::decode_allocate_request(request);
    if (!decoded) {
      state.SkipWithError("request refused");
      break;
    }
    std::string answer = protocol::encode_allocate_response(decoded.value().rank, decoded.value().keys, pages);
    benchmark::DoNotOptimize(answer.data());
  }
}
BENCHMARK(BM_ServerDecodeAllocate128);

// A whole exists call through Service (routing, decode, state, encode) on 1,250 keys.
void BM_ServiceBatchExists1250(benchmark::State& state) {
  MetadataState metadata;
  Service service(metadata);
  const std::string request = protocol::encode_batch_exists_request(md5_like_keys(1250));
  for (auto _ : state) {
    ServiceAnswer answer = service.handle("POST", path_of(Route::batch_exists), request);
    if (answer.status != 200) {
      state.SkipWithError("exists failed");
      break;
    }
    benchmark::DoNotOptimize(answer.body.data());
  }
}
BENCHMARK(BM_ServiceBatchExists1250);

}  // namespace

BENCHMARK_MAIN();
