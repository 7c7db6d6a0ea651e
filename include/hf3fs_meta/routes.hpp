// The protocol's routes, in one table: every fact about an endpoint that the server (routing,
// metrics, deduplication, its 500 details), the classifier and the client (its operation, whether
// a call may be repeated) need. Adding an endpoint is one row here plus its handler in Service and
// its method in Client (docs/design.md, "Adding an endpoint").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

// Declared in the order of kRoutes' rows: a route's value is its row (servers index per-route
// metrics by it), which inserting a row changes; files hold RouteInfo::wire instead. The last three
// are what routing answers when no endpoint takes the request.
enum class Route : std::uint8_t {
  initialize,
  batch_allocate,
  confirm_write,
  batch_exists,
  get_locations,
  clear,
  delete_keys,  // extension (like SGLang's delete_keys)
  stats,        // extension
  drop_rank,  // extension of the reference server
  namespaces,      // extension: GET /namespaces
  drop_namespace,  // extension: POST /namespaces/{name}/drop
  key_status,      // extension: POST /keys/status
  redirect,  // an endpoint's path with a trailing slash: 307
  method_not_allowed,
  not_found,
};

// Whether a call may be repeated after an ambiguous failure, when the request may have been applied
// (docs/design.md, "Retries"): DefaultIdempotencyPolicy reads it.
enum class Repeat : std::uint8_t {
  always,            // reads, and setting what is already set
  without_releases,  // released pages may belong to another key by the time a repeat arrives (unless
                     // the server knows the request id and answers the repeat without applying it)
  if_deduplicated,   // a repeat would apply twice, unless the server knows the request id (or the policy allows it)
  never,             // could undo what others did since the first attempt
};

// What the reference server keeps of a 2xx answer to answer a repeated X-Request-Id again without
// applying it (mock_server/dedup_cache.hpp): never the rendered answer, which may weigh megabytes.
enum class Dedup : std::uint8_t {
  none,    // not deduplicated: every request is applied
  status,  // the status alone (the answer has no body)
  pages,   // the status and a page per key of the request (the keys come from the repeat's own body)
};

// How a 500 says that the request's rank is not initialized (vLLM's wording differs by endpoint).
enum class MissingRank : std::uint8_t {
  plain,      // "Rank 3 not initialized"
  prefixed,   // "<failure_prefix>: Rank 3 not initialized"
  key_error,  // "<failure_prefix>: 3" (vLLM's KeyError(rank): its str() is the bare rank)
};

// A pattern's one path parameter (a route has at most one): "{rank}" or "{name}" (a namespace).
inline constexpr std::string_view kRankParameter = "{rank}";
inline constexpr std::string_view kNameParameter = "{name}";

// Extension: a server whose answers carry this header with the value 1 (the reference server's all
// do) takes keyed releases, confirm_write's pages_to_release entries `[key, page]` (key a string)
// beside bare pages, and frees a keyed one only while its page is allocated for that key
// (ReleaseKey). vLLM's server would put such a pair into its free list: send bare pages to it.
inline constexpr std::string_view kKeyedReleaseHeader = "X-Hf3fs-Keyed-Release";

// Extension (docs/protocol.md "Namespaces"): the namespace a request acts in. Absent, the
// default one, which answers as vLLM's server does. A server that knows namespaces echoes the header
// in its answer to a request that carried it; vLLM's server ignores it (and serves its one space).
inline constexpr std::string_view kNamespaceHeader = "X-Hf3fs-Namespace";
inline constexpr std::size_t kMaxNamespaceBytes = 64;
// A namespace name is 1 to kMaxNamespaceBytes of these: safe in a header, a path segment, a
// Prometheus label and a log line without escaping.
constexpr bool namespace_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}
constexpr bool valid_namespace_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNamespaceBytes) return false;
  for (const char c : name) {
    if (!namespace_char(c)) return false;
  }
  return true;
}

// High availability (docs/protocol.md "High availability"): a member that is not the
// leader (a standby, a candidate, or a leader whose lease may have lapsed) answers every protocol
// route 503 with a JSON detail starting with kNotLeaderDetailPrefix, and applies nothing, so that
// any call may be repeated, whatever its idempotency. When it knows the leader, the answer carries
// kLeaderHeader with the leader's advertised base URL ("http://127.0.0.1:18001"); the client goes
// there, else to its next endpoint.
inline constexpr std::string_view kLeaderHeader = "X-Hf3fs-Leader";
inline constexpr std::string_view kNotLeaderDetailPrefix = "not the leader";

struct RouteInfo {
  Route route = Route::not_found;
  // The route's number in files (a request id's records in a data dir's journal and snapshots):
  // given once, never changed and never reused by another row, whatever the row's place here. A
  // new row takes a number no row ever had; a removed row's number stays retired.
  std::uint8_t wire = 0;
  // An endpoint's path ("{rank}" stands for the path's rank segment), else the routing outcome's
  // name. Either way it is the route's name in metrics, logs and to_string().
  std::string_view name{};
  std::string_view method{};        // the one method the endpoint takes (also the 405's Allow)
  Operation operation = Operation::raw;  // the Client call that sends it
  std::string_view failure_prefix{};  // vLLM's prefix of this endpoint's 500 details, e.g. "Allocation failed"
  errc failure_code = errc::server_error;  // what a 500 with that prefix means
  MissingRank missing_rank = MissingRank::plain;
  Dedup dedup = Dedup::none;  // the reference server applies it once per X-Request-Id, keeping this
  Repeat repeat = Repeat::never;
  bool changes_state = false;  // with --data-dir, journaled before it is answered
  // The request names pages of its rank's state (a confirm): once the server forgot the rank and the
  // client initialized it again, those pages belong to nothing, so the call is not repeated.
  bool names_pages = false;
  // With --tenants-file, only an operator's token may call it (it sees or changes every namespace).
  bool operator_only = false;

  constexpr bool is_endpoint() const noexcept { return name.starts_with('/'); }
};

inline constexpr RouteInfo kRoutes[] = {
    {.route = Route::initialize,
     .wire = 0,
     .name = "/rank/{rank}/initialize",
     .method = "POST",
     .operation = Operation::initialize,
     .repeat = Repeat::always,
     .changes_state = true},
    {.route = Route::batch_allocate,
     .wire = 1,
     .name = "/keys/batch_allocate",
     .method = "POST",
     .operation = Operation::allocate,
     .failure_prefix = "Allocation failed",
     .failure_code = errc::allocation_failed,
     .missing_rank = MissingRank::prefixed,
     .dedup = Dedup::pages,
     .repeat = Repeat::if_deduplicated,
     .changes_state = true},
    {.route = Route::confirm_write,
     .wire = 2,
     .name = "/keys/confirm_write",
     .method = "POST",
     .operation = Operation::confirm_write,
     .failure_prefix = "Confirmation failed",
     .failure_code = errc::confirmation_failed,
     .missing_rank = MissingRank::key_error,
     .dedup = Dedup::status,
     .repeat = Repeat::without_releases,
     .changes_state = true,
     .names_pages = true},
    {.route = Route::batch_exists,
     .wire = 3,
     .name = "/keys/batch_exists",
     .method = "POST",
     .operation = Operation::batch_exists,
     .failure_prefix = "Key existence check failed",
     .failure_code = errc::existence_check_failed,
     .missing_rank = MissingRank::prefixed,
     .repeat = Repeat::always},
    {.route = Route::get_locations,
     .wire = 4,
     .name = "/keys/get_locations",
     .method = "POST",
     .operation = Operation::get_locations,
     .failure_prefix = "Failed to get key locations",
     .failure_code = errc::location_lookup_failed,
     .missing_rank = MissingRank::prefixed,
     .repeat = Repeat::always},
    {.route = Route::clear,
     .wire = 5,
     .name = "/clear",
     .method = "POST",
     .operation = Operation::clear,
     .repeat = Repeat::never,
     .changes_state = true},
    // Extensions of the reference server (docs/protocol.md, "Extensions"); no 500s of their own.
    // A repeated delete could delete the key saved again since the first attempt.
    {.route = Route::delete_keys,
     .wire = 6,
     .name = "/keys/delete",
     .method = "POST",
     .operation = Operation::delete_keys,
     .repeat = Repeat::never,
     .changes_state = true},
    {.route = Route::stats, .wire = 7, .name = "/stats", .method = "GET", .operation = Operation::stats, .repeat = Repeat::always},
    // Never repeated: it could drop a rank initialized again since the first attempt.
    {.route = Route::drop_rank,
     .wire = 8,
     .name = "/rank/{rank}/drop",
     .method = "POST",
     .operation = Operation::drop_rank,
     .repeat = Repeat::never,
     .changes_state = true},
    // Namespaces (docs/protocol.md, "Namespaces"). Wire numbers 9-11 are the routing
    // outcomes', so these take 12-14. Dropping a namespace is never repeated: it could drop one
    // created again since the first attempt.
    {.route = Route::namespaces,
     .wire = 12,
     .name = "/namespaces",
     .method = "GET",
     .operation = Operation::namespaces,
     .repeat = Repeat::always,
     .operator_only = true},
    {.route = Route::drop_namespace,
     .wire = 13,
     .name = "/namespaces/{name}/drop",
     .method = "POST",
     .operation = Operation::drop_namespace,
     .repeat = Repeat::never,
     .changes_state = true,
     .operator_only = true},
    {.route = Route::key_status,
     .wire = 14,
     .name = "/keys/status",
     .method = "POST",
     .operation = Operation::key_status,
     .repeat = Repeat::always},
    {.route = Route::redirect, .wire = 9, .name = "redirect"},
    {.route = Route::method_not_allowed, .wire = 10, .name = "method_not_allowed"},
    {.route = Route::not_found, .wire = 11, .name = "not_found"},
};
inline constexpr std::size_t kRouteCount = std::size(kRoutes);

constexpr bool routes_in_order() {
  for (std::size_t i = 0; i < kRouteCount; ++i) {
    if (static_cast<std::size_t>(kRoutes[i].route) != i) return false;
  }
  return static_cast<std::size_t>(Route::not_found) + 1 == kRouteCount;
}
static_assert(routes_in_order(), "kRoutes has one row per Route, in declaration order");

constexpr bool wire_numbers_unique() {
  for (std::size_t i = 0; i < kRouteCount; ++i) {
    for (std::size_t j = i + 1; j < kRouteCount; ++j) {
      if (kRoutes[i].wire == kRoutes[j].wire) return false;
    }
  }
  return true;
}
static_assert(wire_numbers_unique(), "two rows of kRoutes share a wire number");

constexpr const RouteInfo& route_info(Route route) noexcept { return kRoutes[static_cast<std::size_t>(route)]; }
constexpr std::string_view to_string(Route route) noexcept { return route_info(route).name; }
// The route's number in files, and the route a number in a file names (none: a number no row has,
// e.g. a newer server's route).
constexpr std::uint8_t wire_number(Route route) noexcept { return route_info(route).wire; }
constexpr std::optional<Route> route_of_wire(std::uint8_t wire) noexcept {
  for (const auto& row : kRoutes) {
    if (row.wire == wire) return row.route;
  }
  return std::nullopt;
}
// The path pattern of an endpoint ("/keys/batch_allocate", "/rank/{rank}/initialize").
constexpr std::string_view path_of(Route route) noexcept { return route_info(route).name; }

// The endpoint a Client operation sends to; nullptr for Operation::raw.
constexpr const RouteInfo* route_of(Operation operation) noexcept {
  for (const auto& row : kRoutes) {
    if (row.is_endpoint() && row.operation == operation) return &row;
  }
  return nullptr;
}

// The path to send to: the pattern with `rank` in place of "{rank}" ("/rank/3/initialize").
std::string request_path(Route route, Rank rank = 0);
// The same for a pattern with "{name}": `name` in its place ("/namespaces/m1/drop"), as given (a
// valid_namespace_name needs no percent-encoding).
std::string request_path(Route route, std::string_view name);

}  // namespace hf3fs_meta
