// Client: validate -> encode -> Transport::post -> classify -> retry / re-initialize -> Result<T>.
#include "hf3fs_meta/client.hpp"

#include <atomic>
#include <charconv>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"

#include "client/endpoints.hpp"
#include "client/page_keys.hpp"
#include "client/rank_registry.hpp"
#include "client/retry_loop.hpp"
#include "client/validation.hpp"
#include "internal/answer_limit.hpp"
#include "internal/endpoint_url.hpp"
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta {

namespace {

using TimePoint = std::chrono::steady_clock::time_point;
using internal::CallSpec;

class SteadyClock final : public Clock {
 public:
  TimePoint now() override { return std::chrono::steady_clock::now(); }
};

class ThreadSleeper final : public Sleeper {
 public:
  void sleep_for(std::chrono::nanoseconds duration) override { std::this_thread::sleep_for(duration); }
};

double uniform01() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

template <class T>
Result<T> success_of(auto&& decoded) {
  if constexpr (std::is_void_v<T>) {
    return boost::outcome_v2::success();
  } else {
    return std::move(decoded).value();
  }
}

// The decoder of an answer whose body says nothing (a 2xx is the whole answer).
protocol::Decoded<void> no_body(const HttpResponse&) { return boost::outcome_v2::success(); }

// The connection's state: its policies, transport and registered ranks; each call is one HTTP
// exchange repeated by the retry loop (retry_loop.hpp).
struct Impl {
  explicit Impl(ClientOptions o)
      : options(std::move(o)),
        endpoints(configured_endpoints(options)),
        transport(options.transport ? options.transport
                                    : make_curl_transport(options.endpoints.empty() ? options.base_url
                                                                                    : options.endpoints.front(),
                                                          options.ca_file, options.max_answer_bytes)),
        retry(options.retry_policy ? options.retry_policy->clone() : std::make_unique<LimitedAttemptsRetryPolicy>()),
        backoff(options.backoff_policy ? options.backoff_policy->clone()
                                       : std::make_unique<ExponentialBackoffPolicy>()),
        idempotency(options.idempotency_policy ? options.idempotency_policy->clone()
                                               : std::make_unique<DefaultIdempotencyPolicy>()),
        clock(options.clock ? options.clock : std::make_shared<SteadyClock>()),
        sleeper(options.sleeper ? options.sleeper : std::make_shared<ThreadSleeper>()),
        observer(options.observer),
        budget(options.retry_budget),
        policies{*retry,   *backoff,       *idempotency,
                 budget,   *clock,         *sleeper,
                 observer.get(),
                 AttemptTimeouts{clamp_duration(options.connect_timeout), clamp_duration(options.request_timeout)},
                 &uniform01} {
    if (auto problem = internal::endpoint_list_problem(endpoint_list(options), endpoint_field(options))) {
      refuse_calls(*problem);
    } else if (auto problem = internal::token_problem(options.auth_token)) {
      refuse_calls("ClientOptions::auth_token: " + *problem);
    } else if (!options.namespace_name.empty()) {
      if (auto bad = internal::namespace_problem(options.namespace_name)) {
        refuse_calls("ClientOptions::namespace_name " + *bad);
      }
    }
    std::random_device rd;
    id_prefix = (std::uint64_t{rd()} << 32) ^ rd() ^
                static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }

  ClientOptions options;
  internal::Endpoints endpoints;
  std::shared_ptr<Transport> transport;
  std::unique_ptr<RetryPolicy> retry;
  std::unique_ptr<BackoffPolicy> backoff;
  std::unique_ptr<IdempotencyPolicy> idempotency;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<Sleeper> sleeper;
  std::shared_ptr<ClientObserver> observer;
  internal::RetryBudget budget;
  internal::RetryLoopPolicies policies;
  internal::RankRegistry ranks;
  // The window the server last declared (X-Request-Id-Dedup: <ms>), 0 while none: an ambiguous
  // allocate may be repeated only while its first attempt is younger than this.
  std::atomic<std::int64_t> dedup_window_ms{0};
  // Whether the server last said that it takes keyed releases (kKeyedReleaseHeader), and the key of
  // each page this client was allocated, for them.
  std::atomic<bool> keyed_releases{false};
  internal::PageKeys page_keys;
  // A token that cannot be sent (token_problem) or a bad namespace name (namespace_problem) refuses
  // every call before anything is sent.
  std::optional<Error> options_error;
  std::uint64_t id_prefix = 0;
  std::atomic<std::uint64_t> id_counter{0};

  // ClientOptions::endpoints, else base_url: as given, under the option's name.
  static std::vector<std::string> endpoint_list(const ClientOptions& o) {
    return o.endpoints.empty() ? std::vector<std::string>{o.base_url} : o.endpoints;
  }
  static std::string_view endpoint_field(const ClientOptions& o) {
    return o.endpoints.empty() ? "ClientOptions::base_url" : "ClientOptions::endpoints";
  }
  // Normalized; none when one is not an endpoint (the constructor then refuses every call).
  static std::vector<std::string> configured_endpoints(const ClientOptions& o) {
    std::vector<std::string> list = endpoint_list(o);
    if (internal::endpoint_list_problem(list, endpoint_field(o))) return {};
    for (std::string& endpoint : list) endpoint = internal::normalized_endpoint(endpoint);
    return list;
  }

  void refuse_calls(std::string detail) {
    options_error.emplace();
    options_error->code = errc::invalid_argument;
    options_error->detail = std::move(detail);
  }

  std::string next_request_id() {
    const std::uint64_t n = id_counter.fetch_add(1, std::memory_order_relaxed);
    char buf[40];
    auto [p, ec] = std::to_chars(buf, buf + 16, id_prefix, 16);
    (void)ec;
    // Zero-padded prefix: ids of one client share their first 16 characters.
    const std::size_t len = static_cast<std::size_t>(p - buf);
    std::string id(16 - len, '0');
    id.append(buf, len);
    id += '-';
    auto [q, ec2] = std::to_chars(buf, buf + sizeof buf, n, 16);
    (void)ec2;
    id.append(buf, static_cast<std::size_t>(q - buf));
    return id;
  }

  // `route` names the call's operation; Route::not_found stands for raw.
  CallSpec spec(Route route, std::optional<Rank> rank, const CallOptions& call, bool has_releases = false) {
    const auto length = clamp_duration(call.deadline ? *call.deadline : retry->deadline());
    const TimePoint start = clock->now();
    const RouteInfo& info = route_info(route);
    return CallSpec{info.operation, rank, has_releases, start, start + length, length, {}, info.names_pages};
  }

  // A request to `route` as the route table describes it: its path (with `path_rank`) and method.
  static HttpRequest request_for(Route route, std::string body, Rank path_rank = 0) {
    return HttpRequest{request_path(route, path_rank), std::move(body), {}, std::string(route_info(route).method)};
  }

  // A call about a list of keys (batch_exists, get_locations, delete_keys): the keys are checked,
  // then encode() makes the body and decode(body, keys.size()) reads one answer per key.
  template <class T, class Encode, class Decode>
  Result<T> key_call(Route route, std::optional<Rank> rank, const std::vector<std::string>& keys,
                     const CallOptions& call, Encode&& encode, Decode&& decode) {
    if (auto e = internal::check_lookup(route_info(route).operation, keys)) return std::move(*e);
    HttpRequest request = request_for(route, encode());
    return run<T>(spec(route, rank, call), request,
                  [&](const HttpResponse& r) { return decode(r.body, keys.size()); });
  }

  Result<std::string> do_initialize(Rank rank, std::int64_t num_pages, Role role, CallSpec s) {
    if (auto e = internal::check_initialize(rank, num_pages, role)) return std::move(*e);
    HttpRequest request = request_for(Route::initialize, protocol::encode_initialize_request(num_pages, role), rank);
    return run<std::string>(std::move(s), request,
                            [](const HttpResponse& r) { return protocol::decode_initialize_response(r.body); });
  }

  // One call: its request id and headers, then the retry loop over one exchange per attempt.
  // `decode` turns a 2xx answer into Decoded<T>.
  template <class T, class Decode>
  Result<T> run(CallSpec s, HttpRequest& request, Decode&& decode) {
    if (options_error) {
      Error e = *options_error;
      e.operation = s.operation;
      return e;
    }
    s.request_id = next_request_id();
    request.headers.push_back({"X-Request-Id", s.request_id});
    if (!options.auth_token.empty()) request.headers.push_back({"Authorization", "Bearer " + options.auth_token});
    if (!options.namespace_name.empty()) {
      request.headers.push_back({std::string(kNamespaceHeader), options.namespace_name});
    }
    const auto attempt = [&](const AttemptTimeouts& timeouts) {
      endpoints.current(request.endpoint);
      return exchange<T>(request, timeouts, decode);
    };
    // A restore is a call of its own (own request id and retries), within what is left of the
    // caller's deadline.
    const auto initialize = [this](Rank rank, std::int64_t num_pages, Role role, const CallSpec& caller) {
      return do_initialize(rank, num_pages, role,
                           CallSpec{Operation::initialize, std::nullopt, false, clock->now(), caller.deadline,
                                    caller.deadline_length, {}});
    };
    return internal::retry_loop<T>(policies, ranks, s, dedup_window_ms.load(std::memory_order_relaxed), attempt,
                                   initialize);
  }

  // One attempt: post to the current endpoint, then decode a 2xx or classify anything else; a
  // failure with no answer, or a member that is not the leader, moves the client's endpoint on.
  template <class T, class Decode>
  internal::AttemptOutcome<T> exchange(const HttpRequest& request, const AttemptTimeouts& timeouts, Decode& decode) {
    internal::AttemptOutcome<T> out{Error{}};
    TransportResult answer = transport->post(request, timeouts);
    // A transport that read an answer over the limit anyway (CurlTransport stops reading at it)
    // fails as CurlTransport does.
    if (answer && answer.value().body.size() > options.max_answer_bytes) {
      answer = TransportError{errc::protocol_error, true, internal::answer_too_large(options.max_answer_bytes)};
    }
    Error e;
    if (!answer) {
      TransportError& t = answer.error();
      e.code = t.code;
      e.detail = std::move(t.message);
      e.sent = t.sent;
      out.unreachable = t.unreachable;
      out.result = std::move(e);
      out.endpoint = request.endpoint;
      if (t.code != errc::protocol_error) endpoints.go_to_next(request.endpoint);
      return out;
    }
    HttpResponse& response = answer.value();
    e.status = response.status;
    e.sent = true;
    if (response.status >= 200 && response.status < 300) {
      take_declarations(response, out);
      out.answered_2xx = true;
      if (ignored_namespace(response)) {
        e.code = errc::protocol_error;
        e.detail = std::string(kIgnoredNamespace);
        out.result = std::move(e);
        return out;
      }
      auto decoded = decode(response);
      if (decoded) {
        out.result = success_of<T>(std::move(decoded));
        return out;
      }
      e.code = errc::protocol_error;
      e.detail = std::move(decoded).error().message;
      out.result = std::move(e);
      return out;
    }
    auto c = protocol::classify_error(response.status, response.content_type, response.body);
    out.endpoint = request.endpoint;
    if (c.not_leader) {
      // It speaks for another member: what it declares says nothing of the leader's.
      out.not_leader = true;
      out.leader = leader_named(response, request.endpoint);
      if (out.leader.empty()) {
        endpoints.go_to_next(request.endpoint);
      } else {
        endpoints.go_to_leader(request.endpoint, out.leader);
      }
    } else {
      take_declarations(response, out);
    }
    e.code = c.code;
    e.detail = std::move(c.detail);
    e.cause = std::move(c.cause);
    e.rank = c.rank;
    // A forgotten rank would be restored in the shared space of a server without namespaces.
    if (e.code == errc::rank_not_initialized && ignored_namespace(response)) {
      e.code = errc::protocol_error;
      e.detail = std::string(kIgnoredNamespace);
    }
    out.result = std::move(e);
    return out;
  }

  // What every answer of the server declares: whether it deduplicates now (one without the header, a
  // server restarted with deduplication off or another behind the same URL, withdraws the window),
  // and whether it takes keyed releases (likewise).
  template <class T>
  void take_declarations(const HttpResponse& response, internal::AttemptOutcome<T>& out) {
    std::int64_t window_ms = 0;
    if (auto h = response.header("X-Request-Id-Dedup")) {
      std::int64_t ms = 0;
      const auto [end, ec] = std::from_chars(h->data(), h->data() + h->size(), ms);
      if (ec == std::errc() && end == h->data() + h->size() && ms > 0) {
        window_ms = clamp_duration(std::chrono::milliseconds(ms)).count();
      }
    }
    out.dedup_window_ms = window_ms;
    if (dedup_window_ms.load(std::memory_order_relaxed) != window_ms) {
      dedup_window_ms.store(window_ms, std::memory_order_relaxed);
    }
    const bool keyed = response.header(kKeyedReleaseHeader) == std::optional<std::string_view>("1");
    if (keyed_releases.load(std::memory_order_relaxed) != keyed) keyed_releases.store(keyed, std::memory_order_relaxed);
  }

  // The leader a member's 503 "not the leader" names (kLeaderHeader), normalized; empty when it names
  // none, or nothing that is an endpoint, or an http:// one from an https:// member (the token and
  // the keys would then travel in clear).
  static std::string leader_named(const HttpResponse& response, std::string_view from) {
    const auto named = response.header(kLeaderHeader);
    if (!named || internal::endpoint_problem(*named)) return {};
    const auto scheme = [](std::string_view url) { return internal::endpoint_scheme_length(url); };
    if (scheme(from) == 8 && scheme(*named) != 8) return {};
    return internal::normalized_endpoint(*named);
  }

  // A request with X-Hf3fs-Namespace whose answer does not carry it back: the server does not know
  // namespaces (vLLM's) and acted in its one shared space (docs/protocol.md, "Namespaces").
  static constexpr std::string_view kIgnoredNamespace =
      "the server ignored X-Hf3fs-Namespace (vLLM's server has no namespaces): its answers come from the shared "
      "space";
  bool ignored_namespace(const HttpResponse& response) const {
    return !options.namespace_name.empty() &&
           response.header(kNamespaceHeader) != std::optional<std::string_view>(options.namespace_name);
  }

  void register_rank(Rank rank, std::int64_t num_pages, Role role) { ranks.add(rank, num_pages, role); }
  void unregister_rank(Rank rank) { ranks.remove(rank); }
};

class DefaultConnection final : public Connection {
 public:
  explicit DefaultConnection(ClientOptions options) : impl_(std::move(options)) {}

  Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role, const CallOptions& call) override;
  Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                         const CallOptions& call) override;
  void register_rank(Rank rank, std::int64_t num_pages, Role role) override;
  Result<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call) override;
  Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                             const std::vector<Page>& pages_to_release, const CallOptions& call) override;
  Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call) override;
  Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                         const CallOptions& call) override;
  Result<std::vector<bool>> delete_keys(const std::vector<std::string>& keys, const CallOptions& call) override;
  Result<StateStats> stats(const CallOptions& call) override;
  Result<void> clear(const CallOptions& call) override;
  Result<DropOutcome> drop_rank(Rank rank, const CallOptions& call) override;
  Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call) override;
  Result<std::vector<NamespaceSummary>> namespaces(const CallOptions& call) override;
  Result<NamespaceDropOutcome> drop_namespace(std::string_view name, const CallOptions& call) override;
  Result<KeyStatusAnswer> key_status(const std::vector<std::string>& keys, const CallOptions& call) override;

 private:
  Impl impl_;
};

Result<std::string> DefaultConnection::initialize(Rank rank, std::int64_t num_pages, Role role,
                                                  const CallOptions& call) {
  return impl_.do_initialize(rank, num_pages, role, impl_.spec(Route::initialize, std::nullopt, call));
}

Result<std::string> DefaultConnection::ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                                          const CallOptions& call) {
  // A scheduler's initialize changes nothing on the server, so there is nothing to restore: it
  // neither registers the rank nor replaces a worker's registration of it.
  if (role != Role::worker) return initialize(rank, num_pages, role, call);
  // Refused before anything is registered: a rank that could never be initialized is not one.
  if (auto e = internal::check_initialize(rank, num_pages, role)) return std::move(*e);
  // Registered first, then sent: a worker that starts during an outage (its first initialize fails)
  // is still restored when the server comes back and says "not initialized".
  impl_.register_rank(rank, num_pages, role);
  auto result = initialize(rank, num_pages, role, call);
  // The server refuses these parameters for good: restoring with them could never succeed.
  if (!result && result.error().code == errc::invalid_initialization) impl_.unregister_rank(rank);
  return result;
}

void DefaultConnection::register_rank(Rank rank, std::int64_t num_pages, Role role) {
  // Checked when the rank is restored: the restore then fails with invalid_argument.
  impl_.register_rank(rank, num_pages, role);
}

Result<std::vector<Page>> DefaultConnection::allocate(Rank rank, const std::vector<BlockKey>& keys,
                                                      const CallOptions& call) {
  constexpr auto route = Route::batch_allocate;
  if (auto e = internal::check_allocate(keys)) return std::move(*e);
  HttpRequest request = Impl::request_for(route, protocol::encode_allocate_request(rank, keys));
  auto pages = impl_.run<std::vector<Page>>(
      impl_.spec(route, rank, call), request,
      [&](const HttpResponse& r) { return protocol::decode_allocate_response(r.body, keys); });
  // Remembered only for a server that takes keyed releases: nothing to keep for any other.
  if (pages && impl_.keyed_releases.load(std::memory_order_relaxed)) {
    impl_.page_keys.remember(rank, keys, pages.value());
  }
  return pages;
}

Result<void> DefaultConnection::confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                                              const std::vector<Page>& pages_to_release, const CallOptions& call) {
  constexpr auto route = Route::confirm_write;
  if (auto e = internal::check_confirm_write(confirmations, pages_to_release)) return std::move(*e);
  // A page this client was allocated is released as [key, page] to a server that takes keyed
  // releases, so that a late release cannot free the page after it went to another key.
  std::vector<ReleaseKey> release_keys;
  if (!pages_to_release.empty() && impl_.keyed_releases.load(std::memory_order_relaxed)) {
    release_keys = impl_.page_keys.release_keys(rank, pages_to_release);
  }
  HttpRequest request = Impl::request_for(
      route, protocol::encode_confirm_write_request(rank, confirmations, pages_to_release, release_keys));
  auto done = impl_.run<void>(impl_.spec(route, rank, call, !pages_to_release.empty()), request, no_body);
  if (done) impl_.page_keys.forget(rank, confirmations, pages_to_release);
  return done;
}

Result<std::vector<bool>> DefaultConnection::batch_exists(const std::vector<std::string>& keys,
                                                          const CallOptions& call) {
  return impl_.key_call<std::vector<bool>>(
      Route::batch_exists, std::nullopt, keys, call, [&] { return protocol::encode_batch_exists_request(keys); },
      protocol::decode_batch_exists_response);
}

Result<std::vector<std::optional<Page>>> DefaultConnection::get_locations(Rank rank,
                                                                          const std::vector<std::string>& keys,
                                                                          const CallOptions& call) {
  return impl_.key_call<std::vector<std::optional<Page>>>(
      Route::get_locations, rank, keys, call, [&] { return protocol::encode_get_locations_request(rank, keys); },
      protocol::decode_get_locations_response);
}

Result<std::vector<bool>> DefaultConnection::delete_keys(const std::vector<std::string>& keys,
                                                         const CallOptions& call) {
  return impl_.key_call<std::vector<bool>>(
      Route::delete_keys, std::nullopt, keys, call, [&] { return protocol::encode_delete_keys_request(keys); },
      protocol::decode_delete_keys_response);
}

Result<StateStats> DefaultConnection::stats(const CallOptions& call) {
  constexpr auto route = Route::stats;
  HttpRequest request = Impl::request_for(route, std::string());
  return impl_.run<StateStats>(impl_.spec(route, std::nullopt, call), request,
                               [](const HttpResponse& r) { return protocol::decode_stats_response(r.body); });
}

Result<void> DefaultConnection::clear(const CallOptions& call) {
  constexpr auto route = Route::clear;
  HttpRequest request = Impl::request_for(route, std::string());
  auto done = impl_.run<void>(impl_.spec(route, std::nullopt, call), request, no_body);
  if (done) impl_.page_keys.clear();
  return done;
}

Result<DropOutcome> DefaultConnection::drop_rank(Rank rank, const CallOptions& call) {
  constexpr auto route = Route::drop_rank;
  HttpRequest request = Impl::request_for(route, std::string(), rank);
  auto dropped = impl_.run<DropOutcome>(impl_.spec(route, rank, call), request,
                                        [](const HttpResponse& r) { return protocol::decode_drop_response(r.body); });
  if (dropped) impl_.page_keys.forget_rank(rank);
  return dropped;
}

Result<RawResponse> DefaultConnection::raw(std::string_view path, std::string_view body, const CallOptions& call) {
  HttpRequest request{std::string(path), std::string(body), {}};
  return impl_.run<RawResponse>(impl_.spec(Route::not_found, std::nullopt, call), request,
                                 [](const HttpResponse& r) -> protocol::Decoded<RawResponse> {
                                   return RawResponse{r.status, r.content_type, r.body};
                                 });
}

Result<std::vector<NamespaceSummary>> DefaultConnection::namespaces(const CallOptions& call) {
  constexpr auto route = Route::namespaces;
  HttpRequest request = Impl::request_for(route, std::string());
  return impl_.run<std::vector<NamespaceSummary>>(
      impl_.spec(route, std::nullopt, call), request,
      [](const HttpResponse& r) { return protocol::decode_namespaces_response(r.body); });
}

Result<NamespaceDropOutcome> DefaultConnection::drop_namespace(std::string_view name, const CallOptions& call) {
  constexpr auto route = Route::drop_namespace;
  if (auto e = internal::check_namespace_name(route_info(route).operation, name)) return std::move(*e);
  HttpRequest request{request_path(route, name), std::string(), {}, std::string(route_info(route).method)};
  return impl_.run<NamespaceDropOutcome>(
      impl_.spec(route, std::nullopt, call), request,
      [&](const HttpResponse& r) { return protocol::decode_drop_namespace_response(r.body, name); });
}

Result<KeyStatusAnswer> DefaultConnection::key_status(const std::vector<std::string>& keys, const CallOptions& call) {
  return impl_.key_call<KeyStatusAnswer>(
      Route::key_status, std::nullopt, keys, call, [&] { return protocol::encode_key_status_request(keys); },
      protocol::decode_key_status_response);
}

}  // namespace

std::vector<std::string> split_endpoints(std::string_view list) { return internal::split_endpoint_list(list); }

std::shared_ptr<Connection> make_connection(ClientOptions options) {
  return std::make_shared<DefaultConnection>(std::move(options));
}

Client::Client(ClientOptions options) : connection_(make_connection(std::move(options))) {}
// Refused here rather than at the first call, which would dereference it.
Client::Client(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {
  if (!connection_) throw std::invalid_argument("hf3fs_meta::Client: the connection is null");
}

}  // namespace hf3fs_meta
