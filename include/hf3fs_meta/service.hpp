// Service: the HF3FS metadata protocol as a function, (method, target, body) -> answer, over a
// MetadataState. The reference server puts sockets around it; InProcessTransport calls it directly.
// It answers exactly as vLLM's server does for every well-formed request, except the deliberate
// deviations of PROTOCOL.md.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {

enum class Route {
  initialize,      // POST /rank/{rank}/initialize
  batch_allocate,  // POST /keys/batch_allocate
  confirm_write,   // POST /keys/confirm_write
  batch_exists,    // POST /keys/batch_exists
  get_locations,   // POST /keys/get_locations
  clear,           // POST /clear
  redirect,        // a route with a trailing slash: 307
  method_not_allowed,
  not_found,
};
std::string_view to_string(Route route) noexcept;  // "/keys/batch_allocate", "not_found", ...
// Routes are numbered 0..kRouteCount-1 in declaration order: a server keeps per-route metrics in an
// array indexed by static_cast<std::size_t>(route).
inline constexpr std::size_t kRouteCount = static_cast<std::size_t>(Route::not_found) + 1;

struct ServiceAnswer {
  int status = 200;
  std::string content_type;  // "application/json", "text/plain; charset=utf-8", or empty with no body
  std::string body;
  std::string location;  // 307: the target to redirect to, as a path (the server makes it absolute)
  std::string allow;     // 405: the Allow header ("POST")
  // For the server's metrics and logs: the route the request went to (as route_of gives it), the
  // number of items the request carried (keys or confirmations; 0 when refused), and the pages a
  // confirm_write kept because a key still maps to them (PROTOCOL.md, deliberate deviations).
  Route route = Route::not_found;
  std::size_t items = 0;
  std::size_t kept_mapped = 0;
};

class Service {
 public:
  explicit Service(MetadataState& state) : state_(state) {}

  // The route a request goes to, from its method and target (a query string is ignored).
  static Route route_of(std::string_view method, std::string_view target);  // may allocate

  ServiceAnswer handle(std::string_view method, std::string_view target, std::string_view body);

  MetadataState& state() noexcept { return state_; }

 private:
  MetadataState& state_;
};

}  // namespace hf3fs_meta
