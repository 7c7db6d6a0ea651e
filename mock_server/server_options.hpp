// Command-line options of hf3fs-meta-server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "durable/journal.hpp"
#include "tenants.hpp"

namespace CLI {
class App;
}

namespace hf3fs_meta::server {

struct ServerOptions {
  // The name the front's own log lines start with: the proxy shares the front (proxy/).
  std::string program = "hf3fs-meta-server";
  std::string host = "127.0.0.1";
  std::uint16_t port = 18000;
  unsigned threads = 0;  // 0: the machine's cores
  std::int64_t max_pages = std::int64_t{1} << 24;
  std::int64_t max_ranks = 1024;
  std::int64_t max_total_pages = std::int64_t{1} << 28;
  // Namespaces (docs/protocol.md, "Namespaces"): the pages of all ranks of one namespace
  // (0: max_total_pages), and how many namespaces may exist at once, the default one included.
  std::int64_t namespace_max_total_pages = 0;
  std::int64_t namespace_max_ranks = 0;
  std::int64_t max_namespaces = 1024;
  std::size_t max_body_bytes = std::size_t{16} << 20;
  std::size_t max_key_bytes = 1024;  // StateOptions::max_key_bytes (at least 1 here)
  std::size_t max_inflight_body_bytes = std::size_t{256} << 20;  // all connections together
  std::size_t max_connections = 4096;  // also kept below the process's descriptor limit
  std::size_t dedup_max_bytes = std::size_t{256} << 20;  // 0: no request-id deduplication
  std::size_t namespace_dedup_max_bytes = 0;             // one namespace's share (0: a quarter of the above)
  std::chrono::milliseconds dedup_ttl{60000};
  std::chrono::milliseconds idle_timeout{30000};
  // Non-empty: every route but /healthz needs `Authorization: Bearer <auth_token>` (--auth-token-file).
  std::string auth_token;
  // Non-empty (--tenants-file): every route but /healthz needs a token of this file, which says the
  // namespace it acts in (auth_token, if set, is one more operator token). `tenants` is the table read
  // when the options were parsed; SIGHUP reads the file again (main.cpp).
  std::string tenants_file;
  std::shared_ptr<const TenantTable> tenants;
  // Both set: serve HTTPS with this PEM certificate chain and private key (--tls-cert, --tls-key).
  std::string tls_cert;
  std::string tls_key;
  bool enable_fault_injection = false;
  bool log_requests = false;
  // The cache lifecycle, off unless asked for.
  Eviction eviction = Eviction::none;
  std::optional<std::chrono::milliseconds> read_lease;  // unset: 5000 with eviction, else 0
  std::chrono::milliseconds allocation_ttl{0};          // 0: nothing is reclaimed
  // Durability (README "Durability"): empty data_dir keeps everything in memory only.
  std::string data_dir;
  durable::FsyncMode fsync = durable::FsyncMode::everysec;
  std::uint64_t snapshot_after_bytes = std::uint64_t{64} << 20;
  std::string verify_data_dir;  // check this data dir offline, print a summary, exit
  bool verify_ha_log = false;   // check the cluster's replicated log offline, print a summary, exit
  // High availability on etcd (docs/design.md "High availability"): empty ha_etcd, a
  // single server. The lease is whole seconds (etcd's), at least 2.
  std::vector<std::string> ha_etcd;
  std::string ha_cluster;
  std::string ha_name;
  std::string ha_advertise;  // empty: the URL the server listens on
  std::chrono::seconds ha_lease{3};
  // Appends to the log in flight at once (Journal::Options::replicate_in_flight).
  std::size_t ha_appends_in_flight = 1;
  // How long an append may wait for the clients the last one answered (Journal::Options::replicate_gather).
  std::chrono::microseconds ha_batch_wait{1000};
};

// --ha-etcd: the request bodies' limit (and its default), so that a record and its batch stay
// below etcd's request limit (1.5 MiB by default) once base64 has grown them by a third.
inline constexpr std::size_t kHaMaxBodyBytes = std::size_t{1} << 20;

// The HTTP front's flags (--max-body-bytes, --max-inflight-body-bytes, --max-connections,
// --idle-timeout-ms), defined on `app` into `o`: hf3fs-meta-proxy's front takes them too.
void define_front_limits(CLI::App& app, ServerOptions& o);

// The state model's options these make.
StateOptions state_options(const ServerOptions& options);

struct ParsedOptions {
  std::optional<ServerOptions> options;  // empty: exit with `exit_code` after printing `message`
  int exit_code = 0;
  std::string message;  // --help text (stdout) or the error (stderr)
};

// args excludes the program name. A flag is added in one place: a member above and its line in
// server_options.cpp (name, help, range).
ParsedOptions parse_options(const std::vector<std::string>& args);

}  // namespace hf3fs_meta::server
