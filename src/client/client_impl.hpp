// The state and the call path of the SDK's default connection (client.cpp) and of its calls that do
// not block (async_client.hpp): one call is prepared (checked, encoded, with its decoder), then run
// by the retry loop, either blocking in the transport or called back by an AsyncTransport.
#pragma once

#include <atomic>
#include <charconv>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"

#include "client/async_transport.hpp"
#include "client/endpoints.hpp"
#include "client/page_keys.hpp"
#include "client/rank_registry.hpp"
#include "client/retry_loop.hpp"
#include "client/validation.hpp"
#include "internal/answer_limit.hpp"
#include "internal/endpoint_url.hpp"
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::internal {

// One call, ready to run: its loop's view, its request and the decoder of its 2xx; or the input's
// refusal, when nothing may be sent.
template <class T>
struct Prepared {
  std::optional<Error> refused;
  CallSpec spec;
  HttpRequest request;
  std::function<protocol::Decoded<T>(const HttpResponse&)> decode;
  // What the client keeps of the call's result (the keys of pages allocated...), when anything.
  std::function<void(const Result<T>&)> keep{};

  static Prepared refusal(Error e) { return Prepared{std::move(e), {}, {}, {}}; }
};

using TimePoint = std::chrono::steady_clock::time_point;

class SteadyClock final : public Clock {
 public:
  TimePoint now() override { return std::chrono::steady_clock::now(); }
};

class ThreadSleeper final : public Sleeper {
 public:
  void sleep_for(std::chrono::nanoseconds duration) override { std::this_thread::sleep_for(duration); }
};

inline double uniform01() {
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
inline protocol::Decoded<void> no_body(const HttpResponse&) { return boost::outcome_v2::success(); }

// The connection's state: its policies, transport and registered ranks. Each call is prepared
// (prepared_calls.cpp), then its one HTTP exchange is repeated by the retry loop (retry_loop.hpp):
// blocking in run(), or called back in an AsyncCall (below).
struct ClientImpl {
  explicit ClientImpl(ClientOptions o)
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
    if (auto problem = endpoint_list_problem(endpoint_list(options), endpoint_field(options))) {
      refuse_calls(*problem);
    } else if (auto problem = token_problem(options.auth_token)) {
      refuse_calls("ClientOptions::auth_token: " + *problem);
    } else if (!options.namespace_name.empty()) {
      if (auto bad = namespace_problem(options.namespace_name)) {
        refuse_calls("ClientOptions::namespace_name " + *bad);
      }
    }
    std::random_device rd;
    id_prefix = (std::uint64_t{rd()} << 32) ^ rd() ^
                static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }

  ClientOptions options;
  Endpoints endpoints;
  std::shared_ptr<Transport> transport;
  std::unique_ptr<RetryPolicy> retry;
  std::unique_ptr<BackoffPolicy> backoff;
  std::unique_ptr<IdempotencyPolicy> idempotency;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<Sleeper> sleeper;
  std::shared_ptr<ClientObserver> observer;
  RetryBudget budget;
  RetryLoopPolicies policies;
  RankRegistry ranks;
  // The window the server last declared (X-Request-Id-Dedup: <ms>), 0 while none: an ambiguous
  // allocate may be repeated only while its first attempt is younger than this.
  std::atomic<std::int64_t> dedup_window_ms{0};
  // Whether the server last said that it takes keyed releases (kKeyedReleaseHeader), and the key of
  // each page this client was allocated, for them.
  std::atomic<bool> keyed_releases{false};
  PageKeys page_keys;
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
    if (endpoint_list_problem(list, endpoint_field(o))) return {};
    for (std::string& endpoint : list) endpoint = normalized_endpoint(endpoint);
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

  // A call about a list of keys (batch_exists, get_locations, delete_keys, key_status): the keys are
  // checked, then encode() makes the body and decode(body, keys.size()) reads one answer per key.
  template <class T, class Encode, class Decode>
  Prepared<T> key_call(Route route, std::optional<Rank> rank, const std::vector<std::string>& keys,
                       const CallOptions& call, Encode&& encode, Decode decode) {
    if (auto e = check_lookup(route_info(route).operation, keys)) return Prepared<T>::refusal(std::move(*e));
    return Prepared<T>{std::nullopt, spec(route, rank, call), request_for(route, encode()),
                       [decode, n = keys.size()](const HttpResponse& r) { return decode(r.body, n); }};
  }

  Prepared<std::string> initialize_with(Rank rank, std::int64_t num_pages, Role role, CallSpec s) {
    if (auto e = check_initialize(rank, num_pages, role)) return Prepared<std::string>::refusal(std::move(*e));
    return Prepared<std::string>{
        std::nullopt, std::move(s),
        request_for(Route::initialize, protocol::encode_initialize_request(num_pages, role), rank),
        [](const HttpResponse& r) { return protocol::decode_initialize_response(r.body); }};
  }

  // The restore of a registered rank (restore_rank's `initialize`): a call of its own (own request
  // id and retries), within what is left of the caller's deadline; it blocks.
  Result<std::string> restore(Rank rank, std::int64_t num_pages, Role role, const CallSpec& caller) {
    return run(initialize_with(rank, num_pages, role,
                              CallSpec{Operation::initialize, std::nullopt, false, clock->now(), caller.deadline,
                                       caller.deadline_length, {}}));
  }

  // Each typed call of Connection, prepared (prepared_calls.cpp). Arguments are viewed, not copied:
  // they stay valid until the call ends.
  Prepared<std::string> prepare_initialize(Rank rank, std::int64_t num_pages, Role role, const CallOptions& call);
  // Registers a worker's rank first (so that a worker that starts during an outage is restored), and
  // forgets it when the server refuses its parameters for good.
  Prepared<std::string> prepare_ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                                   const CallOptions& call);
  Prepared<std::vector<Page>> prepare_allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call);
  Prepared<void> prepare_confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                                       const std::vector<Page>& pages_to_release, const CallOptions& call);
  Prepared<std::vector<bool>> prepare_batch_exists(const std::vector<std::string>& keys, const CallOptions& call);
  Prepared<std::vector<std::optional<Page>>> prepare_get_locations(Rank rank, const std::vector<std::string>& keys,
                                                                   const CallOptions& call);
  Prepared<std::vector<bool>> prepare_delete_keys(const std::vector<std::string>& keys, const CallOptions& call);
  Prepared<StateStats> prepare_stats(const CallOptions& call);
  Prepared<void> prepare_clear(const CallOptions& call);
  Prepared<DropOutcome> prepare_drop_rank(Rank rank, const CallOptions& call);
  Prepared<RawResponse> prepare_raw(std::string_view path, std::string_view body, const CallOptions& call);
  Prepared<std::vector<NamespaceSummary>> prepare_namespaces(const CallOptions& call);
  Prepared<NamespaceDropOutcome> prepare_drop_namespace(std::string_view name, const CallOptions& call);
  Prepared<KeyStatusAnswer> prepare_key_status(const std::vector<std::string>& keys, const CallOptions& call);

  // Refused before anything is sent: the input (Prepared::refused), or the options (options_error).
  template <class T>
  std::optional<Error> refusal(Prepared<T>& p) const {
    if (p.refused) return std::move(p.refused);
    if (!options_error) return std::nullopt;
    Error e = *options_error;
    e.operation = p.spec.operation;
    return e;
  }

  // The call's request id and the headers every request of this client carries.
  template <class T>
  void stamp(Prepared<T>& p) {
    p.spec.request_id = next_request_id();
    auto& headers = p.request.headers;
    headers.push_back({"X-Request-Id", p.spec.request_id});
    if (!options.auth_token.empty()) headers.push_back({"Authorization", "Bearer " + options.auth_token});
    if (!options.namespace_name.empty()) headers.push_back({std::string(kNamespaceHeader), options.namespace_name});
  }

  // One call, blocking: the retry loop over one exchange per attempt.
  template <class T>
  Result<T> run(Prepared<T> p) {
    if (auto refused = refusal(p)) return std::move(*refused);
    stamp(p);
    const auto attempt = [&](const AttemptTimeouts& timeouts) {
      endpoints.current(p.request.endpoint);
      return outcome<T>(p.request, transport->post(p.request, timeouts), p.decode);
    };
    const auto initialize = [this](Rank rank, std::int64_t num_pages, Role role, const CallSpec& caller) {
      return restore(rank, num_pages, role, caller);
    };
    Result<T> result =
        retry_loop<T>(policies, ranks, p.spec, dedup_window_ms.load(std::memory_order_relaxed), attempt, initialize);
    if (p.keep) p.keep(result);
    return result;
  }

  // One attempt's answer (or its failure): decode a 2xx or classify anything else; a failure with no
  // answer, or a member that is not the leader, moves the client's endpoint on.
  template <class T>
  AttemptOutcome<T> outcome(const HttpRequest& request, TransportResult answer,
                            const std::function<protocol::Decoded<T>(const HttpResponse&)>& decode) {
    AttemptOutcome<T> out{Error{}};
    // A transport that read an answer over the limit anyway (CurlTransport stops reading at it)
    // fails as CurlTransport does.
    if (answer && answer.value().body.size() > options.max_answer_bytes) {
      answer = TransportError{errc::protocol_error, true, answer_too_large(options.max_answer_bytes)};
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
      // It speaks for another member: what it declares says nothing of the leader's features, and
      // its silence withdraws nothing. But a member's request-id answers are in the cluster's
      // replicated log, whoever leads: a window it declares holds for the leader too, which is what
      // a client that has seen no leader yet needs to repeat an allocate across a failover.
      take_cluster_dedup(response, out);
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
  void take_declarations(const HttpResponse& response, AttemptOutcome<T>& out) {
    const std::int64_t window_ms = declared_dedup_window(response);
    out.dedup_window_ms = window_ms;
    if (dedup_window_ms.load(std::memory_order_relaxed) != window_ms) {
      dedup_window_ms.store(window_ms, std::memory_order_relaxed);
    }
    const bool keyed = response.header(kKeyedReleaseHeader) == std::optional<std::string_view>("1");
    if (keyed_releases.load(std::memory_order_relaxed) != keyed) keyed_releases.store(keyed, std::memory_order_relaxed);
  }

  // X-Request-Id-Dedup: <ms> of an answer, clamped; 0 without a valid one.
  static std::int64_t declared_dedup_window(const HttpResponse& response) {
    const auto h = response.header("X-Request-Id-Dedup");
    if (!h) return 0;
    std::int64_t ms = 0;
    const auto [end, ec] = std::from_chars(h->data(), h->data() + h->size(), ms);
    if (ec != std::errc() || end != h->data() + h->size() || ms <= 0) return 0;
    return clamp_duration(std::chrono::milliseconds(ms)).count();
  }
  // A standby's window, taken only by a client that knows none (see outcome()).
  template <class T>
  void take_cluster_dedup(const HttpResponse& response, AttemptOutcome<T>& out) {
    const std::int64_t window_ms = declared_dedup_window(response);
    if (window_ms == 0 || dedup_window_ms.load(std::memory_order_relaxed) != 0) return;
    out.dedup_window_ms = window_ms;
    dedup_window_ms.store(window_ms, std::memory_order_relaxed);
  }

  // The leader a member's 503 "not the leader" names (kLeaderHeader), normalized; empty when it names
  // none, or nothing that is an endpoint, or an http:// one from an https:// member (the token and
  // the keys would then travel in clear).
  static std::string leader_named(const HttpResponse& response, std::string_view from) {
    const auto named = response.header(kLeaderHeader);
    if (!named || endpoint_problem(*named)) return {};
    const auto scheme = [](std::string_view url) { return endpoint_scheme_length(url); };
    if (scheme(from) == 8 && scheme(*named) != 8) return {};
    return normalized_endpoint(*named);
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

// A Connection over `impl`, which other users (an AsyncClient) may share (client.cpp).
std::shared_ptr<Connection> connection_over(std::shared_ptr<ClientImpl> impl);

// A call driven by an AsyncTransport (drive_async in retry_loop.hpp): its attempts and backoffs are
// called back on the transport's thread; a restore, which blocks, runs on `blocking` and the loop
// goes on on the transport's thread.
template <class T>
class AsyncCall : public std::enable_shared_from_this<AsyncCall<T>> {
 public:
  using Then = std::function<void(Result<T>)>;
  AsyncCall(std::shared_ptr<ClientImpl> client, Prepared<T> p, AsyncTransport& transport, boost::asio::thread_pool& blocking,
            Then then)
      : client_(std::move(client)), p_(std::move(p)), transport_(transport), blocking_(blocking),
        then_(std::move(then)),
        loop(client_->policies, client_->ranks, p_.spec, client_->dedup_window_ms.load(std::memory_order_relaxed)) {}

  // Runs the call; `then` may run before this returns (a refusal), else on the transport's thread.
  static void start(std::shared_ptr<ClientImpl> client, Prepared<T> p, AsyncTransport& transport, boost::asio::thread_pool& blocking,
                    Then then) {
    if (auto refused = client->refusal(p)) return then(std::move(*refused));
    client->stamp(p);
    auto call = std::make_shared<AsyncCall>(std::move(client), std::move(p), transport, blocking, std::move(then));
    drive_async(call, call->loop.begin());
  }

  void attempt(const AttemptTimeouts& timeouts, std::function<void(AttemptOutcome<T>)> next) {
    client_->endpoints.current(p_.request.endpoint);
    transport_.async_post(p_.request, timeouts,
                          [self = this->shared_from_this(), next = std::move(next)](TransportResult answer) {
                            next(self->client_->template outcome<T>(self->p_.request, std::move(answer),
                                                                    self->p_.decode));
                          });
  }
  void wait(std::chrono::nanoseconds delay, std::function<void()> next) { transport_.after(delay, std::move(next)); }
  using Step = typename RetryLoop<T>::Step;
  void restore(std::function<void(Step)> next) {
    // The transport's io_context is kept running meanwhile: nothing else of this call is queued there.
    boost::asio::post(blocking_, [self = this->shared_from_this(), next = std::move(next),
                                  work = boost::asio::make_work_guard(transport_.io_context())]() mutable {
      auto initialize = [&](Rank rank, std::int64_t num_pages, Role role, const CallSpec& caller) {
        return self->client_->restore(rank, num_pages, role, caller);
      };
      Step step = self->loop.restore(initialize);
      self->transport_.after(std::chrono::nanoseconds(0), [next = std::move(next), step] { next(step); });
    });
  }
  void finish(Result<T> result) {
    if (p_.keep) p_.keep(result);
    then_(std::move(result));
  }

 private:
  std::shared_ptr<ClientImpl> client_;
  Prepared<T> p_;
  AsyncTransport& transport_;
  boost::asio::thread_pool& blocking_;
  Then then_;

 public:
  RetryLoop<T> loop;  // after p_, whose spec it views
};

}  // namespace hf3fs_meta::internal
