#include "metrics.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <utility>

#include <prometheus/text_serializer.h>

#include "hf3fs_meta/protocol.hpp"

namespace hf3fs_meta::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// One sample of a counter or gauge family.
void add(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric& m = f.metric.emplace_back();
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
}

// A family of one unlabelled sample.
MetricFamily single(std::string name, std::string help, MetricType type, double value) {
  MetricFamily f = family(std::move(name), std::move(help), type);
  add(f, value);
  return f;
}

double value_of(const std::atomic<std::uint64_t>& v) {
  return static_cast<double>(v.load(std::memory_order_relaxed));
}

// The state's figures, one set per namespace (MetadataState::all_stats, by name), each sample labelled
// with its namespace first: a family's samples share one label set, so the default-only
// server labels its samples too (namespace="default"). Only namespaces that exist appear, so
// StateOptions::max_namespaces bounds the samples.
using NamespaceStats = std::vector<std::pair<std::string, StateStats>>;

// hf3fs_meta_namespaces, hf3fs_meta_ranks, hf3fs_meta_rank_pages and
// hf3fs_meta_releases_kept_mapped_total.
void add_rank_families(const NamespaceStats& spaces, std::vector<MetricFamily>& out) {
  out.push_back(single("hf3fs_meta_namespaces", "Namespaces that exist, the default one included.", MetricType::Gauge,
                       static_cast<double>(spaces.size())));
  MetricFamily ranks = family("hf3fs_meta_ranks", "Ranks initialized.", MetricType::Gauge);
  MetricFamily pages = family("hf3fs_meta_rank_pages", "Pages of a rank, by state.", MetricType::Gauge);
  MetricFamily kept = family("hf3fs_meta_releases_kept_mapped_total",
                             "Releases refused because a key maps to the page.", MetricType::Counter);
  for (const auto& [ns, figures] : spaces) {
    add(ranks, static_cast<double>(figures.ranks.size()), {{"namespace", ns}});
    for (const auto& [rank, stats] : figures.ranks) {
      const std::string label = std::to_string(rank);
      for (const auto& [name, member] : protocol::kRankStatsFields) {
        if (member == &RankStats::num_pages) continue;  // the sum of the others
        add(pages, static_cast<double>(stats.*member),
            {{"namespace", ns}, {"rank", label}, {"state", std::string(name)}});
      }
      add(kept, static_cast<double>(stats.kept_on_release), {{"namespace", ns}, {"rank", label}});
    }
  }
  out.push_back(std::move(ranks));
  out.push_back(std::move(pages));
  out.push_back(std::move(kept));
}

// hf3fs_meta_keys and the cache lifecycle's figures, as GET /stats names them.
void add_key_families(const NamespaceStats& spaces, std::vector<MetricFamily>& out) {
  MetricFamily keys = family("hf3fs_meta_keys", "Keys known.", MetricType::Gauge);
  for (const auto& [ns, figures] : spaces) {
    add(keys, static_cast<double>(figures.keys_complete + figures.keys_incomplete), {{"namespace", ns}});
  }
  out.push_back(std::move(keys));
  for (const auto& [name, member, counter, help] : protocol::kStateStatsFields) {
    MetricFamily f = family("hf3fs_meta_" + std::string(name) + (counter ? "_total" : ""), std::string(help),
                            counter ? MetricType::Counter : MetricType::Gauge);
    for (const auto& [ns, figures] : spaces) add(f, static_cast<double>(figures.*member), {{"namespace", ns}});
    out.push_back(std::move(f));
  }
}

void add_dedup_families(const DedupCache::Stats& dedup, std::vector<MetricFamily>& out) {
  out.push_back(single("hf3fs_meta_request_id_cache_hits_total", "Repeated X-Request-Id answered from the cache.",
                       MetricType::Counter, static_cast<double>(dedup.hits)));
  out.push_back(single("hf3fs_meta_request_id_cache_entries", "X-Request-Id answers kept or in flight.",
                       MetricType::Gauge, static_cast<double>(dedup.entries)));
  out.push_back(single("hf3fs_meta_request_id_cache_bytes",
                       "Bytes the X-Request-Id answers weigh (--dedup-max-bytes bounds it).", MetricType::Gauge,
                       static_cast<double>(dedup.bytes)));
  out.push_back(single("hf3fs_meta_request_id_cache_refused_total",
                       "Requests answered 503: every kept answer inside its window.", MetricType::Counter,
                       static_cast<double>(dedup.refused)));
}

void add_limit_families(const LimitCounters& limits, std::vector<MetricFamily>& out) {
  out.push_back(single("hf3fs_meta_body_bytes_in_flight",
                       "Request body bytes received and not yet answered (--max-inflight-body-bytes bounds it).",
                       MetricType::Gauge, value_of(limits.body_bytes_in_flight)));
  out.push_back(single("hf3fs_meta_body_budget_refused_total", "Requests answered 503: the body budget was full.",
                       MetricType::Counter, value_of(limits.body_refused)));
  out.push_back(single("hf3fs_meta_connections", "Connections open (--max-connections bounds it).", MetricType::Gauge,
                       value_of(limits.connections)));
  out.push_back(single("hf3fs_meta_connections_evicted_total",
                       "Idle connections closed to admit a new one at --max-connections.", MetricType::Counter,
                       value_of(limits.connections_evicted)));
  out.push_back(single("hf3fs_meta_connections_refused_total",
                       "New connections closed at --max-connections because none was idle.", MetricType::Counter,
                       value_of(limits.connections_refused)));
  out.push_back(single("hf3fs_meta_accept_failures_total", "accept() failures (out of descriptors...), survived.",
                       MetricType::Counter, value_of(limits.accept_failures)));
  out.push_back(single("hf3fs_meta_session_failures_total", "Exceptions that closed one connection, never the server.",
                       MetricType::Counter, value_of(limits.session_failures)));
}

}  // namespace

RequestCounters::RequestCounters(std::size_t shards)
    : shard_count_(std::max<std::size_t>(shards, 1)), shards_(new Shard[shard_count_]) {}

RequestCounters::~RequestCounters() = default;

// The request path's cost of recording one answer, CPU time per request, bench_metrics (Release,
// 2 cores shared with other builds, load average 3.6; median of 5 repetitions):
//   these sharded counters:                          19.6 ns on 1 thread, 20.3 ns on each of 2
//   prometheus-cpp's Counter + Histogram children,   41.2 ns on 1 thread, 75.5 ns on each of 2
//   looked up once (their best case here)
// so the request path keeps these, and prometheus-cpp gets them at scrape time (Collect).
void RequestCounters::record(std::size_t shard, RouteLabel route, int status,
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

std::vector<MetricFamily> RequestCounters::Collect() const {
  // No namespace label here: these are counted on the request path, in shards per I/O
  // thread of a counter per route and status (600 8-byte atomics per route label, RouteLabel::kCount
  // of them: 80-100 KB a shard); a namespace dimension would multiply that by the namespaces allowed
  // (about 100 MB per I/O thread at 1024) and put a lookup by name on the request path. The
  // per-namespace figures are the state's families.
  MetricFamily requests =
      family("hf3fs_meta_requests_total", "Requests answered, by route and status.", MetricType::Counter);
  for (std::size_t r = 0; r < RouteLabel::kCount; ++r) {
    const auto name = RouteLabel::at(r).name();
    for (std::size_t status = 0; status < 600; ++status) {
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < shard_count_; ++i)
        total += shards_[i].requests[r][status].load(std::memory_order_relaxed);
      if (total == 0) continue;
      add(requests, static_cast<double>(total), {{"route", std::string(name)}, {"status", std::to_string(status)}});
    }
  }

  MetricFamily duration = family("hf3fs_meta_request_duration_seconds",
                                 "Time from a complete request to its answer.", MetricType::Histogram);
  ClientMetric::Histogram& histogram = duration.metric.emplace_back().histogram;
  std::uint64_t cumulative = 0;
  std::uint64_t sum_ns = 0;
  for (std::size_t i = 0; i < shard_count_; ++i) sum_ns += shards_[i].latency_sum_ns.load(std::memory_order_relaxed);
  for (std::size_t b = 0; b <= kBuckets.size(); ++b) {
    for (std::size_t i = 0; i < shard_count_; ++i) cumulative += shards_[i].buckets[b].load(std::memory_order_relaxed);
    // The serializer adds the +Inf bucket: the sample count.
    if (b < kBuckets.size()) histogram.bucket.push_back({cumulative, kBuckets[b]});
  }
  histogram.sample_count = cumulative;
  histogram.sample_sum = static_cast<double>(sum_ns) / 1e9;

  std::vector<MetricFamily> out;
  out.push_back(std::move(requests));
  out.push_back(std::move(duration));
  return out;
}

Metrics::Metrics(std::size_t shards)
    : requests_(shards),
      num_pages_mismatches_(prometheus::BuildCounter()
                                .Name("hf3fs_meta_initialize_num_pages_mismatch_total")
                                .Help("Initializes of an existing rank with another num_pages (the rank was kept "
                                      "as it was).")
                                .Register(registry_)
                                .Add({})) {}

Metrics::~Metrics() = default;

std::string Metrics::render(const MetadataState& state, const DedupCache::Stats& dedup,
                            std::vector<MetricFamily> more) const {
  std::vector<MetricFamily> families = requests_.Collect();
  const NamespaceStats spaces = state.all_stats();  // one lock: every namespace at one instant
  add_rank_families(spaces, families);
  auto registered = registry_.Collect();
  std::move(registered.begin(), registered.end(), std::back_inserter(families));
  add_key_families(spaces, families);
  add_dedup_families(dedup, families);
  add_limit_families(limits, families);
  std::move(more.begin(), more.end(), std::back_inserter(families));

  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

std::string Metrics::render_front(std::vector<MetricFamily> more) const {
  std::vector<MetricFamily> families = requests_.Collect();
  add_limit_families(limits, families);
  std::move(more.begin(), more.end(), std::back_inserter(families));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

std::vector<MetricFamily> durability_families(const durable::StoreStats& store, const durable::JournalStats& journal,
                                              bool failed) {
  const auto counter = MetricType::Counter;
  const auto gauge = MetricType::Gauge;
  const auto n = [](std::uint64_t v) { return static_cast<double>(v); };
  std::vector<MetricFamily> out;
  out.push_back(single("hf3fs_meta_journal_records_total", "Journal records appended.", counter, n(journal.records)));
  out.push_back(single("hf3fs_meta_journal_bytes_total", "Journal bytes written.", counter, n(journal.bytes)));
  out.push_back(single("hf3fs_meta_journal_fsyncs_total", "fdatasync calls on journal files.", counter,
                       n(journal.fsyncs)));
  out.push_back(single("hf3fs_meta_journal_fsync_seconds_total", "Time spent in those fdatasync calls.", counter,
                       n(journal.fsync_ns_total) / 1e9));
  out.push_back(single("hf3fs_meta_journal_fsync_seconds_max", "The longest fdatasync.", gauge,
                       n(journal.fsync_ns_max) / 1e9));
  out.push_back(single("hf3fs_meta_disk_errors_total", "Journal writes or syncs that failed.", counter,
                       n(journal.disk_errors)));
  out.push_back(single("hf3fs_meta_disk_failed",
                       "1 while state changes are refused because the data dir cannot be written.", gauge,
                       failed ? 1.0 : 0.0));
  out.push_back(single("hf3fs_meta_snapshots_total", "Snapshots written.", counter, n(store.snapshots)));
  out.push_back(single("hf3fs_meta_snapshot_failures_total", "Snapshots that failed.", counter,
                       n(store.snapshot_failures)));
  out.push_back(single("hf3fs_meta_snapshot_seconds_total", "Time spent taking snapshots.", counter,
                       store.snapshot_seconds_total));
  out.push_back(single("hf3fs_meta_snapshot_last_seconds", "Duration of the last snapshot.", gauge,
                       store.last_snapshot_seconds));
  out.push_back(single("hf3fs_meta_snapshot_last_bytes", "Size of the last snapshot.", gauge,
                       n(store.last_snapshot_bytes)));
  out.push_back(single("hf3fs_meta_recovery_seconds", "Time the last start spent recovering the data dir.", gauge,
                       store.recovery_seconds));
  return out;
}

std::vector<MetricFamily> ha_families(const ha::Role& role, std::uint64_t applied_seq) {
  const auto counter = MetricType::Counter;
  const auto gauge = MetricType::Gauge;
  const ha::HaCounters& c = role.counters();
  std::vector<MetricFamily> out;
  MetricFamily roles = family("hf3fs_meta_ha_role", "1 for this member's role (leader, standby, candidate).", gauge);
  for (const auto name : {ha::RoleName::leader, ha::RoleName::standby, ha::RoleName::candidate}) {
    add(roles, role.answered() == name ? 1.0 : 0.0, {{"role", std::string(ha::to_string(name))}});
  }
  out.push_back(std::move(roles));
  out.push_back(single("hf3fs_meta_ha_leader_changes_total", "Times another leader was named than the last one.",
                       counter, static_cast<double>(role.leader_changes())));
  out.push_back(single("hf3fs_meta_ha_appends_total", "Batches appended to the replicated log as leader (etcd Txns).",
                       counter, value_of(c.appends)));
  out.push_back(single("hf3fs_meta_ha_append_seconds_total", "Time in those Txns.", counter,
                       value_of(c.append_ns_total) / 1e9));
  out.push_back(single("hf3fs_meta_ha_append_seconds_max", "The longest of them.", gauge,
                       value_of(c.append_ns_max) / 1e9));
  out.push_back(single("hf3fs_meta_ha_batch_bytes_total", "Journal record bytes in those batches.", counter,
                       value_of(c.batch_bytes_total)));
  const auto tip = c.tip.load(std::memory_order_relaxed);
  out.push_back(single("hf3fs_meta_ha_log_tip", "The last record in the replicated log, as this member saw it.",
                       gauge, static_cast<double>(tip)));
  out.push_back(single("hf3fs_meta_ha_applied_seq", "The last change this member applied.", gauge,
                       static_cast<double>(applied_seq)));
  out.push_back(single("hf3fs_meta_ha_replication_lag", "Records in the log this member has not applied.", gauge,
                       tip > applied_seq ? static_cast<double>(tip - applied_seq) : 0.0));
  out.push_back(single("hf3fs_meta_ha_compactions_total", "Log compactions done as leader.", counter,
                       value_of(c.compactions)));
  out.push_back(single("hf3fs_meta_ha_snapshot_fetches_total", "Snapshots fetched from the leader.", counter,
                       value_of(c.snapshot_fetches)));
  out.push_back(single("hf3fs_meta_ha_log_apply_failures_total",
                       "Times following the log ended on an entry this member could not apply.", counter,
                       value_of(c.log_failures)));
  out.push_back(single("hf3fs_meta_ha_log_unappliable",
                       "1 while this member cannot apply the log (/healthz says why), else 0.", gauge,
                       role.log_error().empty() ? 0.0 : 1.0));
  return out;
}

}  // namespace hf3fs_meta::server
