// --tenants-file (docs/protocol.md, "Tenants"): which bearer tokens the server accepts and
// the namespace each acts in. One `TOKEN NAMESPACE` per line; NAMESPACE `*` makes an operator, who
// acts in any namespace (X-Hf3fs-Namespace) and may read /metrics, use /_faults and list or drop
// namespaces. The table is keyed by the SHA-256 of each token, so that how long a lookup takes says
// nothing about the tokens stored. SIGHUP re-reads the file (main.cpp): the table is swapped whole,
// and a connection's cache (TenantCache) notices by the generation.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hf3fs_meta::server {

// Who a token is.
struct Principal {
  bool operator_access = false;  // `*`: any namespace, and the server's own routes
  std::string ns;                // a tenant's namespace; empty for the default one (and for operators)
};

class TenantTable {
 public:
  using Digest = std::array<unsigned char, 32>;  // SHA-256

  // The table, or an error naming the file and the line (`--tenants-file F: line 3: ...`).
  struct Parsed {
    std::shared_ptr<const TenantTable> table;  // null when `error` is set
    std::string error;
  };
  // `text` is the file's content, `path` its name in errors. `operator_token` (--auth-token-file's;
  // empty: none) is entered as an operator; the file may name it again only as `*`.
  static Parsed parse(std::string_view path, std::string_view text, std::string_view operator_token);
  // parse() of the file's content; an unreadable file is an error too.
  static Parsed read(const std::string& path, std::string_view operator_token);

  // The principal of `token`, or null. Hashes the token: a connection caches the result (Tenants).
  const Principal* find(std::string_view token) const;

  std::size_t tokens() const noexcept { return entries_.size(); }
  std::size_t operators() const noexcept { return operators_; }

 private:
  struct Entry {
    Digest digest;
    Principal principal;
    std::size_t line = 0;  // 0: --auth-token-file's
  };
  static Digest digest(std::string_view token);

  std::vector<Entry> entries_;  // sorted by digest
  std::size_t operators_ = 0;
};

// A connection's last lookup, kept across its requests (Exchange::tenant; never reset per request):
// a keep-alive client sending the same token costs a load of the generation and a comparison.
struct TenantCache {
  std::string token;                          // the token `principal` was looked up for
  std::uint64_t generation = 0;               // of the table below; 0: nothing cached
  std::shared_ptr<const TenantTable> table;   // keeps `principal` alive across a reload
  const Principal* principal = nullptr;       // null: an unknown token
};

// The server's table, swapped whole by reload (SIGHUP) while requests are served.
class Tenants {
 public:
  explicit Tenants(std::shared_ptr<const TenantTable> table);

  // The principal of `token` (null: unknown), through the connection's cache: the digest is computed
  // once per connection and token, and again after a reload.
  const Principal* resolve(std::string_view token, TenantCache& cache) const;

  // Re-reads `path`: on success the new table serves the next request of every connection; on an
  // error (returned as parse() words it) the table in use stays.
  TenantTable::Parsed reload(const std::string& path, std::string_view operator_token);

  std::shared_ptr<const TenantTable> table() const;

 private:
  mutable std::mutex mutex_;  // guards table_ (a shared_ptr is not atomic to copy)
  std::shared_ptr<const TenantTable> table_;
  std::atomic<std::uint64_t> generation_{1};
};

}  // namespace hf3fs_meta::server
