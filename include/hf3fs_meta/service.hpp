// Service: the HF3FS metadata protocol as a function, (method, target, body) -> answer, over a
// MetadataState. The reference server puts sockets around it; InProcessTransport calls it directly.
// It answers exactly as vLLM's server does for every well-formed request, except the deliberate
// deviations of docs/protocol.md.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {

struct ServiceAnswer {
  int status = 200;
  std::string content_type;  // "application/json", "text/plain; charset=utf-8", or empty with no body
  std::string body;
  std::string location;  // 307: the target to redirect to, as a path (the server makes it absolute)
  std::string allow;     // 405: the Allow header ("POST")
  // batch_allocate answered 200: its pages, in request order. What request-id deduplication keeps
  // to answer a repeat (routes.hpp, Dedup::pages), rather than the rendered body.
  std::vector<Page> pages;
  // An initialize of an existing rank with another num_pages: the rank's count, kept (vLLM's answer;
  // the server logs and counts it, since a redeploy with smaller files needs POST /rank/{rank}/drop).
  std::int64_t num_pages_kept = 0;
};

// A request's target routed as Starlette routes it (percent-decoded path; 405 for another method;
// 307 for an endpoint's path with a trailing slash). The views point into the target routed, which
// must outlive this; the server routes once, keeps this, and hands it back to handle().
struct RoutedTarget {
  Route route = Route::not_found;
  Route endpoint = Route::not_found;  // the endpoint the path names, whatever the method
  std::string_view raw;    // the path as sent, query removed
  std::string_view query;  // after '?', may be empty
  std::string decoded;     // the percent-decoded path, when `raw` has a '%'
  bool percent_decoded = false;
  // The segment of path() in place of the pattern's one parameter ({rank} or {name}), if it has one.
  std::size_t param_at = 0, param_size = 0;

  std::string_view path() const noexcept { return percent_decoded ? std::string_view(decoded) : raw; }
  std::string_view param_segment() const noexcept { return path().substr(param_at, param_size); }
  std::string_view rank_segment() const noexcept { return param_segment(); }  // a {rank} route's
  std::string_view name_segment() const noexcept { return param_segment(); }  // a {name} route's
};

class Service {
 public:
  explicit Service(MetadataState& state) : state_(state) {}

  // Routes a request by its method and target (a query string is ignored). Reusing `out` keeps
  // its buffer. May allocate (a percent-encoded path).
  static void route(std::string_view method, std::string_view target, RoutedTarget& out);
  static RoutedTarget route(std::string_view method, std::string_view target);

  // Answers a request routed by route(), in namespace `ns` (a valid name, or empty: the default one;
  // docs/protocol.md, "Namespaces"): every state call acts in it, /clear and /stats included.
  ServiceAnswer handle(const RoutedTarget& target, std::string_view body, std::string_view ns = {});
  // route() then handle().
  ServiceAnswer handle(std::string_view method, std::string_view target, std::string_view body,
                       std::string_view ns = {});

  MetadataState& state() noexcept { return state_; }

 private:
  ServiceAnswer handle_namespaces(const RoutedTarget& target, std::string_view body, NamespaceRef ns);

  MetadataState& state_;
};

}  // namespace hf3fs_meta
