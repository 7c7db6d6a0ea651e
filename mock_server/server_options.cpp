#include "server_options.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <limits>
#include <map>

#include <CLI/CLI.hpp>

#include "ha/etcd_client.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::server {
namespace {

constexpr std::chrono::milliseconds kDefaultLease{5000};  // Mooncake's lease

constexpr const char* kFooter = R"(
Once listening, prints `listening on http://HOST:PORT` (https with TLS) on stdout.
SIGINT/SIGTERM stop accepting, finish the requests in flight, and exit 0.
Under systemd (Type=notify, $NOTIFY_SOCKET): READY=1 once listening, STOPPING=1 on SIGINT/SIGTERM.)";

// An option whose value must not be empty (CLI11 accepts `--host ""`).
CLI::Validator not_empty(const char* value_name) {
  return CLI::Validator([](std::string& value) { return value.empty() ? "must not be empty" : ""; }, value_name);
}

// A name that goes into an etcd key as one path part.
CLI::Validator key_part(const char* value_name) {
  return CLI::Validator(
      [](std::string& value) {
        const bool fits = !value.empty() && value.size() <= 128 &&
                          value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                              std::string::npos;
        return fits ? "" : "must be 1-128 of the characters A-Z a-z 0-9 . _ -";
      },
      value_name);
}

// --ha-*: what the flags need of each other, once all are in. Empty: they fit.
std::string check_ha(const CLI::App& app, ServerOptions& o) {
  if (o.verify_ha_log) {
    return o.ha_etcd.empty() || o.ha_cluster.empty() ? "--verify-ha-log needs --ha-etcd and --ha-cluster" : "";
  }
  if (o.ha_etcd.empty()) {
    for (const char* flag : {"--ha-cluster", "--ha-name", "--ha-advertise", "--ha-lease-ms", "--ha-appends-in-flight",
                             "--ha-batch-wait-us"}) {
      if (app.count(flag) > 0) return std::string(flag) + " needs --ha-etcd";
    }
    return {};
  }
  if (o.data_dir.empty()) return "--ha-etcd needs --data-dir (a member keeps its snapshots there)";
  if (o.ha_cluster.empty()) return "--ha-etcd needs --ha-cluster";
  if (o.ha_name.empty()) return "--ha-etcd needs --ha-name";
  // A member behind the compacted log fetches the leader's snapshot, an operator's route, with this
  // token: it knows no other (a tenants file's operators are the clients').
  if (!o.tenants_file.empty() && o.auth_token.empty()) {
    return "--ha-etcd with --tenants-file needs --auth-token-file: a member fetches the leader's snapshot "
           "(an operator's route) with that token";
  }
  if (app.count("--max-body-bytes") == 0) {
    o.max_body_bytes = kHaMaxBodyBytes;
  } else if (o.max_body_bytes > kHaMaxBodyBytes) {
    return "--max-body-bytes " + std::to_string(o.max_body_bytes) + " is above " + std::to_string(kHaMaxBodyBytes) +
           ", the most --ha-etcd allows (etcd refuses requests above 1.5 MiB)";
  }
  return {};
}

// A duration given in milliseconds.
void milliseconds(CLI::App& app, const char* name, std::chrono::milliseconds& slot, const char* help) {
  app.add_option_function<std::int64_t>(
         name, [&slot](const std::int64_t& ms) { slot = std::chrono::milliseconds(ms); }, help)
      ->default_str(std::to_string(slot.count()))
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
}

// Each flag is one line here: its name, the ServerOptions member it sets, its help and its range.
void define(CLI::App& app, ServerOptions& o) {
  app.add_option("--host", o.host, "address to bind (vLLM's server binds 0.0.0.0)")
      ->capture_default_str()
      ->check(not_empty("HOST"));
  app.add_option("--port", o.port, "port to bind (18000 as vLLM's; 0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--threads", o.threads, "I/O threads (default: the machine's cores)")->check(CLI::Range(1, 1024));
  app.add_option("--max-pages", o.max_pages, "largest num_pages a worker rank may ask for")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{std::numeric_limits<std::int32_t>::max()}));
  app.add_option("--max-ranks", o.max_ranks, "ranks that may exist at once")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{std::numeric_limits<std::uint32_t>::max() - 1}));
  app.add_option("--max-total-pages", o.max_total_pages, "pages of all ranks together, 12 bytes each")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--namespace-max-total-pages", o.namespace_max_total_pages,
                 "pages of all ranks of one namespace together (X-Hf3fs-Namespace; the default namespace "
                 "too): a worker's initialize beyond it gets 400 naming the namespace, nothing created")
      ->default_str("--max-total-pages")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--namespace-max-ranks", o.namespace_max_ranks,
                 "ranks of one namespace at once (X-Hf3fs-Namespace; the default namespace too): a worker's "
                 "initialize beyond it gets 400 naming the namespace and its own figures, nothing created")
      ->default_str("--max-ranks")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{std::numeric_limits<std::uint32_t>::max() - 1}));
  app.add_option("--max-namespaces", o.max_namespaces,
                 "namespaces that may exist at once, the default one included (so 1 allows none but it): a "
                 "worker's initialize that would create one more gets 400 naming the namespace")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--max-key-bytes", o.max_key_bytes,
                 "longest key (or prefix key) a request may name, in bytes: a request with a longer one gets "
                 "400 naming it, on every route that takes keys, nothing applied (vLLM's keys are 32 or 64 "
                 "characters)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32));
  define_front_limits(app, o);
  app.add_option("--dedup-max-bytes", o.dedup_max_bytes,
                 "memory for X-Request-Id answers (kept across a clean restart with --data-dir); when it is "
                 "full of answers inside their window, new ids get 503, and an answer larger than all of it "
                 "413; 0 turns deduplication (and the X-Request-Id-Dedup header) off")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 40));
  app.add_option("--namespace-dedup-max-bytes", o.namespace_dedup_max_bytes,
                 "the most of --dedup-max-bytes one namespace's X-Request-Id answers may hold (the default "
                 "namespace too): beyond it that namespace's new ids get 503 while the others still have room")
      ->default_str("a quarter of --dedup-max-bytes")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  milliseconds(app, "--dedup-ttl-ms", o.dedup_ttl,
               "the window: how long an X-Request-Id answer is kept (advertised as X-Request-Id-Dedup)");
  app.add_option_function<std::string>(
      "--auth-token-file",
      [&o](const std::string& path) {
        std::string error;
        auto token = internal::read_token_file(path, error);
        if (!token) throw CLI::ValidationError("--auth-token-file", error);
        o.auth_token = std::move(*token);
      },
      "every route but /healthz then needs `Authorization: Bearer TOKEN`, TOKEN being the file's content "
      "without surrounding whitespace (else 401); /metrics too (default: no authentication). With "
      "--tenants-file, one more operator token");
  app.add_option("--tenants-file", o.tenants_file,
                 "namespaces per token (multi-tenant): one `TOKEN NAMESPACE` per line, NAMESPACE `*` for an "
                 "operator (a field that starts with `#` begins a comment). Every route but /healthz then needs "
                 "`Authorization: Bearer TOKEN` of the file (else 401); a tenant's requests act in its namespace "
                 "(X-Hf3fs-Namespace naming another: 403); /metrics, /_faults and /namespaces need an operator "
                 "(else 403). SIGHUP reads the file again; one that does not parse keeps the tokens in use "
                 "(default: none)")
      ->check(not_empty("FILE"));
  auto* cert = app.add_option("--tls-cert", o.tls_cert, "serve HTTPS (TLS 1.2+) with this PEM certificate chain...")
                   ->check(CLI::ExistingFile);
  auto* key = app.add_option("--tls-key", o.tls_key, "...and this PEM private key; both or neither (default: HTTP)")
                  ->check(CLI::ExistingFile);
  cert->needs(key);
  key->needs(cert);
  app.add_option("--eviction", o.eviction,
                 "lru: an allocate on a rank short of pages first evicts least recently used complete keys "
                 "holding a page there (on every rank; never its own keys, never a leased key), instead of "
                 "answering -1")
      ->transform(CLI::CheckedTransformer(std::map<std::string, Eviction>{{"none", Eviction::none},
                                                                          {"lru", Eviction::lru}}))
      ->default_str("none");
  app.add_option_function<std::int64_t>(
         "--read-lease-ms", [&o](const std::int64_t& ms) { o.read_lease = std::chrono::milliseconds(ms); },
         "a key that batch_exists finds, get_locations returns or allocate reuses is not evicted for this "
         "long, and a deleted key's pages drain back to their pool only when it ends (0: no lease); with "
         "--data-dir, after a restart every key counts as leased for this long")
      ->default_str(std::to_string(kDefaultLease.count()) + " with --eviction lru, else 0")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  app.add_option_function<std::int64_t>(
         "--allocation-ttl-ms",
         [&o](const std::int64_t& ms) { o.allocation_ttl = std::chrono::milliseconds(ms); },
         "a page allocated and not confirmed within this, a key not complete this long after its first "
         "confirmation, and a page orphaned this long, return to their pools; a late confirm is 409 (0: never); "
         "with --data-dir, timed in wall-clock time across restarts")
      ->default_str("0")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  // Durability (README "Durability").
  app.add_option("--data-dir", o.data_dir,
                 "keep the state in this directory (created if missing): recover from it before listening, "
                 "journal every change (evictions, reclaims and deletions included), take snapshots (default: "
                 "memory only)")
      ->check(not_empty("DIR"));
  app.add_option_function<std::string>(
         "--fsync", [&o](const std::string& mode) { o.fsync = *durable::parse_fsync_mode(mode); },
         "with --data-dir: always = a change is answered once its record is on disk (one fdatasync covers "
         "every record written meanwhile); everysec = the record is written before the answer and synced "
         "within about a second (a power loss may cost that second); no = written before the answer, "
         "synced when the OS decides")
      ->default_str(std::string(durable::to_string(o.fsync)))
      ->check(CLI::Validator(
          [](std::string& mode) {
            return durable::parse_fsync_mode(mode) ? "" : "must be one of " + durable::fsync_mode_names(", ");
          },
          durable::fsync_mode_names("|")));
  app.add_option("--snapshot-after-bytes", o.snapshot_after_bytes,
                 "with --data-dir: take a snapshot once the journal has grown by this many bytes since the last "
                 "one (0: never for size; a clean shutdown still takes one)")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 50));
  app.add_option("--verify-data-dir", o.verify_data_dir,
                 "check this data dir offline (without its lock, writing nothing), print a summary ('sound', or "
                 "'cut N bytes after change S' for a torn end a start would cut), and exit: 0 if it recovers, 2 if not")
      ->check(not_empty("DIR"));
  app.add_flag("--verify-ha-log", o.verify_ha_log,
               "check the replicated log of the cluster --ha-cluster on --ha-etcd offline (reading only): every "
               "entry whole, its checksums right, each beginning after the one before, the last at the tip; "
               "print a summary and exit: 0 if it is sound, 2 if not or if etcd could not be read");
  // High availability (docs/design.md "High availability on etcd").
  app.add_option_function<std::string>(
         "--ha-etcd", [&o](const std::string& list) { o.ha_etcd = ha::parse_etcd_endpoints(list).value(); },
         "run as a member of an HA cluster on these etcd client URLs (http, comma separated): one member "
         "leads and answers; the others follow its log and answer 503 'not the leader' with the "
         "X-Hf3fs-Leader header. Needs --data-dir, --ha-cluster and --ha-name (and with --tenants-file, "
         "--auth-token-file: the token a member fetches the leader's snapshot with); --max-body-bytes is "
         "then at most (and by default) 1048576")
      ->check(CLI::Validator(
          [](std::string& list) {
            auto parsed = ha::parse_etcd_endpoints(list);
            return parsed ? std::string() : parsed.error();
          },
          "URL[,URL...]"));
  app.add_option("--ha-cluster", o.ha_cluster, "with --ha-etcd: the cluster's name, its keys under /hf3fs-meta/NAME/")
      ->check(key_part("NAME"));
  app.add_option("--ha-name", o.ha_name, "with --ha-etcd: this member's name, unique in the cluster")
      ->check(key_part("NAME"));
  app.add_option("--ha-advertise", o.ha_advertise,
                 "with --ha-etcd: the URL clients reach this member at, given to them by the others "
                 "(default: the URL it listens on)")
      ->check(not_empty("URL"));
  app.add_option_function<std::int64_t>(
         "--ha-lease-ms",
         [&o](const std::int64_t& ms) { o.ha_lease = std::chrono::seconds((ms + 999) / 1000); },
         "with --ha-etcd: the leader's etcd lease, rounded up to whole seconds (etcd's unit; at least 2 "
         "seconds with etcd's default timing). The leader answers only while its lease surely lives; a "
         "failover takes about this long plus a second")
      ->default_str(std::to_string(std::chrono::milliseconds(o.ha_lease).count()))
      ->check(CLI::Range(std::int64_t{2000}, std::int64_t{3600000}));
  app.add_option("--ha-appends-in-flight", o.ha_appends_in_flight,
                 "with --ha-etcd: the leader's appends to the replicated log in flight at once, each a batch "
                 "of the changes made while the others were under way (1: one at a time)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{16}));
  app.add_option_function<std::int64_t>(
         "--ha-batch-wait-us", [&o](const std::int64_t& us) { o.ha_batch_wait = std::chrono::microseconds(us); },
         "with --ha-etcd: how long the leader may hold an append back for the clients its last append "
         "answered to send their next changes, so that one append carries them all (0: never)")
      ->default_str(std::to_string(o.ha_batch_wait.count()))
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{100000}));
  app.add_flag("--enable-fault-injection", o.enable_fault_injection, "serve the fault-injection route (tests only)");
  app.add_flag("--log-requests", o.log_requests, "log every request on stderr");
  app.footer(kFooter);
}

}  // namespace

// The HTTP front's limits, which hf3fs-meta-proxy takes too.
void define_front_limits(CLI::App& app, ServerOptions& o) {
  app.add_option("--max-body-bytes", o.max_body_bytes, "larger request bodies get 413")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32));
  app.add_option("--max-inflight-body-bytes", o.max_inflight_body_bytes,
                 "request body bytes held at once by all connections, counted as they arrive; a body that "
                 "would go beyond gets 503")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  app.add_option("--max-connections", o.max_connections,
                 "connections open at once; at the limit the longest-idle one is closed to admit a new one "
                 "(always kept below the descriptor limit minus 64)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  milliseconds(app, "--idle-timeout-ms", o.idle_timeout,
               "a connection that does not complete a request within this time is closed");
}

ParsedOptions parse_options(const std::vector<std::string>& args) {
  ServerOptions options;
  CLI::App app("The reference metadata server of vLLM's HF3FS KV-cache connector.", "hf3fs-meta-server");
  define(app, options);
  app.set_version_flag("--version", std::string("hf3fs-meta-server ") + HF3FS_META_VERSION,
                       "print the version and exit");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them reversed
  } catch (const CLI::CallForHelp&) {
    return ParsedOptions{std::nullopt, 0, app.help()};
  } catch (const CLI::CallForVersion& e) {
    return ParsedOptions{std::nullopt, 0, std::string(e.what()) + "\n"};
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes are 100 and up; every usage error exits 2.
    return ParsedOptions{std::nullopt, 2, "hf3fs-meta-server: " + std::string(e.what()) + "\n(see --help)\n"};
  }
  if (auto ha = check_ha(app, options); !ha.empty()) {
    return ParsedOptions{std::nullopt, 2, "hf3fs-meta-server: " + ha + "\n(see --help)\n"};
  }
  if (!options.tenants_file.empty()) {
    // Read once all flags are in: --auth-token-file's token joins the table as an operator.
    auto read = TenantTable::read(options.tenants_file, options.auth_token);
    if (!read.table) return ParsedOptions{std::nullopt, 2, "hf3fs-meta-server: " + read.error + "\n"};
    options.tenants = std::move(read.table);
  }
  return ParsedOptions{options, 0, {}};
}

StateOptions state_options(const ServerOptions& options) {
  StateOptions state;
  state.max_pages = options.max_pages;
  state.max_ranks = options.max_ranks;
  state.max_total_pages = options.max_total_pages;
  state.max_key_bytes = options.max_key_bytes;
  state.namespace_max_ranks = options.namespace_max_ranks;  // 0 (not given): max_ranks
  state.namespace_max_total_pages = options.namespace_max_total_pages;  // 0 (not given): max_total_pages
  state.max_namespaces = options.max_namespaces;
  state.eviction = options.eviction;
  state.read_lease = options.read_lease.value_or(
      options.eviction == Eviction::lru ? kDefaultLease : std::chrono::milliseconds(0));
  state.allocation_ttl = options.allocation_ttl;
  if (!options.data_dir.empty() || !options.verify_data_dir.empty()) {
    // Reclaim times are journaled: in wall-clock time, so that a page allocated before a restart is
    // reclaimed --allocation-ttl-ms after its allocation, not after the restart.
    state.clock = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
    };
  }
  return state;
}

}  // namespace hf3fs_meta::server
