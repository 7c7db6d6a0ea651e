#include "metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "hf3fs_meta/protocol.hpp"

namespace hf3fs_meta::server {

Metrics::Metrics(std::size_t shards) : shard_count_(std::max<std::size_t>(shards, 1)),
                                       shards_(new Shard[shard_count_]) {}

Metrics::~Metrics() = default;

void Metrics::record(std::size_t shard, RouteLabel route, int status,
                     std::chrono::nanoseconds latency) noexcept {
  auto& s = shards_[shard % shard_count_];
  const auto index = static_cast<std::size_t>(std::clamp(status, 0, 599));
  s.requests[route.index()][index].fetch_add(1, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(latency).count();
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(kBuckets.begin(), kBuckets.end(), seconds) - kBuckets.begin());
  s.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  s.latency_sum_ns.fetch_add(static_cast<std::uint64_t>(latency.count()), std::memory_order_relaxed);
}

namespace {

void append(std::string& out, const char* format, auto... args) {
  char line[256];
  const int n = std::snprintf(line, sizeof line, format, args...);
  if (n > 0) out.append(line, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof line - 1));
}

}  // namespace

std::string Metrics::render(const MetadataState& state, const DedupCache::Stats& dedup) const {
  std::string out;
  out.reserve(8192);

  out += "# HELP hf3fs_meta_requests_total Requests answered, by route and status.\n"
         "# TYPE hf3fs_meta_requests_total counter\n";
  for (std::size_t r = 0; r < RouteLabel::kCount; ++r) {
    const auto name = RouteLabel::at(r).name();
    for (std::size_t status = 0; status < 600; ++status) {
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < shard_count_; ++i)
        total += shards_[i].requests[r][status].load(std::memory_order_relaxed);
      if (total == 0) continue;
      append(out, "hf3fs_meta_requests_total{route=\"%.*s\",status=\"%zu\"} %llu\n",
             static_cast<int>(name.size()), name.data(), status, static_cast<unsigned long long>(total));
    }
  }

  out += "# HELP hf3fs_meta_request_duration_seconds Time from a complete request to its answer.\n"
         "# TYPE hf3fs_meta_request_duration_seconds histogram\n";
  std::uint64_t cumulative = 0;
  std::uint64_t sum_ns = 0;
  for (std::size_t i = 0; i < shard_count_; ++i) sum_ns += shards_[i].latency_sum_ns.load(std::memory_order_relaxed);
  for (std::size_t b = 0; b <= kBuckets.size(); ++b) {
    for (std::size_t i = 0; i < shard_count_; ++i) cumulative += shards_[i].buckets[b].load(std::memory_order_relaxed);
    if (b < kBuckets.size()) {
      append(out, "hf3fs_meta_request_duration_seconds_bucket{le=\"%g\"} %llu\n", kBuckets[b],
             static_cast<unsigned long long>(cumulative));
    } else {
      append(out, "hf3fs_meta_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
             static_cast<unsigned long long>(cumulative));
    }
  }
  append(out, "hf3fs_meta_request_duration_seconds_sum %.9f\n", static_cast<double>(sum_ns) / 1e9);
  append(out, "hf3fs_meta_request_duration_seconds_count %llu\n", static_cast<unsigned long long>(cumulative));

  const StateStats figures = state.stats();
  const auto& ranks = figures.ranks;
  out += "# HELP hf3fs_meta_ranks Ranks initialized.\n# TYPE hf3fs_meta_ranks gauge\n";
  append(out, "hf3fs_meta_ranks %zu\n", ranks.size());
  out += "# HELP hf3fs_meta_rank_pages Pages of a rank, by state.\n# TYPE hf3fs_meta_rank_pages gauge\n";
  for (const auto& [rank, stats] : ranks) {
    for (const auto& [name, member] : protocol::kRankStatsFields) {
      if (member == &RankStats::num_pages) continue;  // the sum of the others
      append(out, "hf3fs_meta_rank_pages{rank=\"%lld\",state=\"%.*s\"} %lld\n", static_cast<long long>(rank),
             static_cast<int>(name.size()), name.data(), static_cast<long long>(stats.*member));
    }
  }
  out += "# HELP hf3fs_meta_releases_kept_mapped_total Releases refused because a key maps to the page.\n"
         "# TYPE hf3fs_meta_releases_kept_mapped_total counter\n";
  for (const auto& [rank, stats] : ranks) {
    append(out, "hf3fs_meta_releases_kept_mapped_total{rank=\"%lld\"} %llu\n", static_cast<long long>(rank),
           static_cast<unsigned long long>(stats.kept_on_release));
  }
  out += "# HELP hf3fs_meta_initialize_num_pages_mismatch_total Initializes of an existing rank with another "
         "num_pages (the rank was kept as it was).\n"
         "# TYPE hf3fs_meta_initialize_num_pages_mismatch_total counter\n";
  append(out, "hf3fs_meta_initialize_num_pages_mismatch_total %llu\n",
         static_cast<unsigned long long>(num_pages_mismatches_.load(std::memory_order_relaxed)));
  out += "# HELP hf3fs_meta_keys Keys known.\n# TYPE hf3fs_meta_keys gauge\n";
  append(out, "hf3fs_meta_keys %llu\n",
         static_cast<unsigned long long>(figures.keys_complete + figures.keys_incomplete));
  // The cache lifecycle's figures, as GET /stats names them.
  for (const auto& [name, member, counter, help] : protocol::kStateStatsFields) {
    const std::string metric = "hf3fs_meta_" + std::string(name) + (counter ? "_total" : "");
    append(out, "# HELP %s %.*s\n", metric.c_str(), static_cast<int>(help.size()), help.data());
    append(out, "# TYPE %s %s\n%s %llu\n", metric.c_str(), counter ? "counter" : "gauge", metric.c_str(),
           static_cast<unsigned long long>(figures.*member));
  }
  out += "# HELP hf3fs_meta_request_id_cache_hits_total Repeated X-Request-Id answered from the cache.\n"
         "# TYPE hf3fs_meta_request_id_cache_hits_total counter\n";
  append(out, "hf3fs_meta_request_id_cache_hits_total %llu\n", static_cast<unsigned long long>(dedup.hits));
  out += "# HELP hf3fs_meta_request_id_cache_entries X-Request-Id answers kept or in flight.\n"
         "# TYPE hf3fs_meta_request_id_cache_entries gauge\n";
  append(out, "hf3fs_meta_request_id_cache_entries %zu\n", dedup.entries);
  out += "# HELP hf3fs_meta_request_id_cache_bytes Bytes the X-Request-Id answers weigh (--dedup-max-bytes bounds it).\n"
         "# TYPE hf3fs_meta_request_id_cache_bytes gauge\n";
  append(out, "hf3fs_meta_request_id_cache_bytes %zu\n", dedup.bytes);
  out += "# HELP hf3fs_meta_request_id_cache_refused_total Requests answered 503: every kept answer inside its window.\n"
         "# TYPE hf3fs_meta_request_id_cache_refused_total counter\n";
  append(out, "hf3fs_meta_request_id_cache_refused_total %llu\n", static_cast<unsigned long long>(dedup.refused));
  const auto gauge = [&](const char* name, const char* type, const char* help, const std::atomic<std::uint64_t>& v) {
    append(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    append(out, "%s %llu\n", name, static_cast<unsigned long long>(v.load(std::memory_order_relaxed)));
  };
  gauge("hf3fs_meta_body_bytes_in_flight", "gauge",
        "Request body bytes received and not yet answered (--max-inflight-body-bytes bounds it).",
        limits.body_bytes_in_flight);
  gauge("hf3fs_meta_body_budget_refused_total", "counter", "Requests answered 503: the body budget was full.",
        limits.body_refused);
  gauge("hf3fs_meta_connections", "gauge", "Connections open (--max-connections bounds it).", limits.connections);
  gauge("hf3fs_meta_connections_evicted_total", "counter",
        "Idle connections closed to admit a new one at --max-connections.", limits.connections_evicted);
  gauge("hf3fs_meta_connections_refused_total", "counter",
        "New connections closed at --max-connections because none was idle.", limits.connections_refused);
  gauge("hf3fs_meta_accept_failures_total", "counter", "accept() failures (out of descriptors...), survived.",
        limits.accept_failures);
  gauge("hf3fs_meta_session_failures_total", "counter", "Exceptions that closed one connection, never the server.",
        limits.session_failures);
  return out;
}

std::string render_durability(const durable::StoreStats& store, const durable::JournalStats& journal, bool failed) {
  std::string out;
  auto counter = [&](const char* name, const char* help, const char* type, auto value) {
    append(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    if constexpr (std::is_floating_point_v<decltype(value)>) {
      append(out, "%s %.9f\n", name, value);
    } else {
      append(out, "%s %llu\n", name, static_cast<unsigned long long>(value));
    }
  };
  counter("hf3fs_meta_journal_records_total", "Journal records appended.", "counter", journal.records);
  counter("hf3fs_meta_journal_bytes_total", "Journal bytes written.", "counter", journal.bytes);
  counter("hf3fs_meta_journal_fsyncs_total", "fdatasync calls on journal files.", "counter", journal.fsyncs);
  counter("hf3fs_meta_journal_fsync_seconds_total", "Time spent in those fdatasync calls.", "counter",
          static_cast<double>(journal.fsync_ns_total) / 1e9);
  counter("hf3fs_meta_journal_fsync_seconds_max", "The longest fdatasync.", "gauge",
          static_cast<double>(journal.fsync_ns_max) / 1e9);
  counter("hf3fs_meta_disk_errors_total", "Journal writes or syncs that failed.", "counter", journal.disk_errors);
  counter("hf3fs_meta_disk_failed", "1 while state changes are refused because the data dir cannot be written.",
          "gauge", std::uint64_t{failed ? 1u : 0u});
  counter("hf3fs_meta_snapshots_total", "Snapshots written.", "counter", store.snapshots);
  counter("hf3fs_meta_snapshot_failures_total", "Snapshots that failed.", "counter", store.snapshot_failures);
  counter("hf3fs_meta_snapshot_seconds_total", "Time spent taking snapshots.", "counter", store.snapshot_seconds_total);
  counter("hf3fs_meta_snapshot_last_seconds", "Duration of the last snapshot.", "gauge", store.last_snapshot_seconds);
  counter("hf3fs_meta_snapshot_last_bytes", "Size of the last snapshot.", "gauge", store.last_snapshot_bytes);
  counter("hf3fs_meta_recovery_seconds", "Time the last start spent recovering the data dir.", "gauge",
          store.recovery_seconds);
  return out;
}

}  // namespace hf3fs_meta::server
