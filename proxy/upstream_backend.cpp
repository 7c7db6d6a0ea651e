#include "upstream_backend.hpp"

#include <utility>


#include "hf3fs_meta/policies.hpp"
#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta::proxy {
namespace {

using server::Exchange;
using server::Reply;
using server::Request;
using server::ServerRoute;
using server::Stage;

// /healthz asks the upstream with this bound at most (the deadline when shorter): a probe's answer
// must come before the prober's own timeout.
constexpr std::chrono::milliseconds kHealthDeadline{2000};
// A vLLM request may make this many attempts within its deadline; a restart (nothing accepts the
// connection) and a failover (503 not the leader) are ridden out whatever the count.
constexpr int kMaxAttempts = 8;

// A counter without labels, registered in `registry`.
prometheus::Counter& counter(prometheus::Registry& registry, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

ClientOptions client_options(const ProxyOptions& options, std::shared_ptr<ClientObserver> observer) {
  ClientOptions client;
  client.endpoints = options.upstream;
  client.auth_token = options.token;
  client.namespace_name = options.namespace_name;
  client.ca_file = options.ca_file;
  client.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(kMaxAttempts, options.deadline);
  client.observer = std::move(observer);
  return client;
}

// The server routes any server may have (/_faults with --enable-fault-injection, /_ha/snapshot with
// --ha-etcd): the proxy's answer to them does not depend on the upstream's flags.
constexpr server::ServerRoutesOn kEveryServerRoute{.faults = true, .ha = true};

}  // namespace

UpstreamCounters::UpstreamCounters(prometheus::Registry& registry, bool several_endpoints)
    : several_endpoints_(several_endpoints),
      retries_(counter(registry, "hf3fs_meta_proxy_retries_total",
                       "Upstream attempts the SDK repeated (after a failure it classed as repeatable).")),
      failovers_(counter(registry, "hf3fs_meta_proxy_failovers_total",
                         "Of those, the ones sent to another upstream member: after a 503 not the leader, or a "
                         "connection that failed with more than one --upstream.")),
      reinitializations_(counter(registry, "hf3fs_meta_proxy_reinitializations_total",
                                 "Ranks the SDK initialized again after the upstream said it had forgotten them.")) {}

void UpstreamCounters::on_retry(const RetryEvent& event) {
  retries_.Increment();
  const Error& e = event.error;
  const bool not_leader = e.status == 503 && e.detail.starts_with(kNotLeaderDetailPrefix);
  if (not_leader || (several_endpoints_ && !e.status)) failovers_.Increment();
}

void UpstreamCounters::on_reinitialize(const ReinitializeEvent&) { reinitializations_.Increment(); }

UpstreamBackend::UpstreamBackend(const ProxyOptions& options)
    : options_(options),
      metrics_(options.front.threads),
      counters_(std::make_shared<UpstreamCounters>(registry_, options.upstream.size() > 1)),
      forwarded_(prometheus::BuildCounter()
                     .Name("hf3fs_meta_proxy_forwarded_total")
                     .Help("Protocol requests, by route and outcome: ok (the upstream's 2xx), answered (its "
                           "refusal, passed on), local (bad input, answered without a round trip), unavailable "
                           "(no answer within --deadline-ms: 503), failed (an error in the proxy, out of memory: 500), busy (no room "
                           "in --max-inflight-body-bytes for the request's copies: 503, nothing sent).")
                     .Register(registry_)),
      latency_(prometheus::BuildHistogram()
                   .Name("hf3fs_meta_proxy_upstream_duration_seconds")
                   .Help("Time a request spent upstream, the SDK's retries included.")
                   .Register(registry_)
                   .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})),
      client_(client_options(options, counters_)) {}

UpstreamBackend::~UpstreamBackend() = default;

void UpstreamBackend::thread_started(std::size_t index, boost::asio::io_context& io) {
  if (transports_.size() <= index) transports_.resize(index + 1);
  transports_[index] = internal::make_async_transport(io, options_.upstream, options_.ca_file);
}

// On the thread, whose io_context has no work left: no call is in flight.
void UpstreamBackend::thread_ended(std::size_t index) { transports_[index].reset(); }

server::Backend::Next UpstreamBackend::step(const Request& request, Exchange& exchange) {
  if (exchange.stage == Stage::finish) return Next::reply;  // woken: the worker set the reply
  auto& reply = exchange.reply;
  reply.retry_after.clear();
  reply.leader.clear();
  std::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  // The server's own routes, as any server has them: /healthz and /metrics are the proxy's own, the
  // server's other operator routes (/_faults, /_ha/snapshot) are never forwarded.
  if (const server::ServerRouteInfo* row = server::find_server_route(path, kEveryServerRoute)) {
    const bool own = row->route == ServerRoute::healthz || row->route == ServerRoute::metrics;
    exchange.label = row->route;
    if (!own && row->operator_only) {
      refuse_operator_route(row->name, "it is the server's own and never forwarded", reply);
      return Next::reply;
    }
    if (own && request.method != "GET") {
      reply.set_json(405, protocol::encode_detail("Method Not Allowed"));
      reply.allow = row->allow;
      return Next::reply;
    }
    if (row->route == ServerRoute::metrics) {
      serve_metrics(reply);
      return Next::reply;
    }
    if (row->route == ServerRoute::healthz) {
      exchange.stage = Stage::finish;
      return Next::wait;  // the health check asks the upstream: on a worker
    }
  }
  Service::route(request.method, request.target, exchange.target);
  exchange.label = exchange.target.route;
  if (const RouteInfo& row = route_info(exchange.target.route); row.operator_only && !options_.allow_operator_routes) {
    refuse_operator_route(row.name, "start it with --allow-operator-routes to forward it", reply);
    return Next::reply;
  }
  if (request.ns_headers != 0 && (request.ns_headers > 1 || request.ns != options_.namespace_name)) {
    reply.set_json(400, protocol::encode_detail(std::string(kNamespaceHeader) +
                                                ": hf3fs-meta-proxy acts in the namespace of its --namespace flag (" +
                                                (options_.namespace_name.empty() ? std::string("the default one")
                                                                                 : options_.namespace_name) +
                                                "); send that or no header"));
    return Next::reply;
  }
  if (!route_info(exchange.target.route).is_endpoint()) {
    answer_locally(exchange.target, request.body, request.host.empty() ? default_host_ : request.host, reply);
    return Next::reply;
  }
  exchange.stage = Stage::finish;
  return Next::wait;
}

void UpstreamBackend::await(Next, const Request& request, Exchange& exchange, std::function<void()> wake) {
  internal::AsyncTransport& transport = *transports_[exchange.thread];
  if (exchange.label.index() == server::RouteLabel(ServerRoute::healthz).index()) {
    return check_health(transport, exchange.reply, std::move(wake));
  }
  const auto started = std::chrono::steady_clock::now();
  forward(client_, transport, exchange.target, request.body, options_.deadline, exchange.body_share, exchange.reply,
          [this, &exchange, started, wake = std::move(wake)](Outcome outcome) {
            if (outcome == Outcome::busy) metrics_.limits.body_refused.fetch_add(1, std::memory_order_relaxed);
            if (outcome != Outcome::local && outcome != Outcome::busy) {
              latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            }
            forwarded_
                .Add({{"route", std::string(to_string(exchange.target.route))},
                      {"outcome", std::string(to_string(outcome))}})
                .Increment();
            wake();
          });
}

void UpstreamBackend::refuse_operator_route(std::string_view route, std::string_view why, Reply& reply) const {
  reply.set_json(403, protocol::encode_detail("hf3fs-meta-proxy: " + std::string(route) +
                                              " is an operator's route, beyond the namespace this proxy acts in (" +
                                              namespace_text() + "): " + std::string(why)));
}

std::string UpstreamBackend::namespace_text() const {
  return options_.namespace_name.empty() ? std::string("the default one") : options_.namespace_name;
}

std::string UpstreamBackend::token_warning(std::chrono::milliseconds bound) {
  // The server tells an operator's token from a tenant's by its tenants file (`*`), or takes any
  // caller as an operator without one; the proxy can only ask. GET /namespaces is the one read that
  // only an operator may make (a tenant's token gets 403 before anything is read), and its answer
  // is a line per namespace.
  const auto listed = client_.client().namespaces(CallOptions{std::min(options_.deadline, bound)});
  if (listed) {
    return "hf3fs-meta-proxy: warning: the upstream takes --token-file's token as an operator's (it answered GET "
           "/namespaces, " +
           std::to_string(listed.value().size()) +
           " namespaces): whoever reaches this proxy holds it; give the proxy its namespace's tenant token";
  }
  if (listed.error().status == 403) return {};  // a tenant's
  return "hf3fs-meta-proxy: warning: could not tell whether --token-file's token is an operator's: " +
         listed.error().message();
}

void UpstreamBackend::check_health(internal::AsyncTransport& transport, Reply& reply, std::function<void()> wake) {
  // GET /stats is a read every member that leads answers (a tenant's token included): an answer
  // means a leader serves this proxy's namespace with its token.
  client_.stats(transport, CallOptions{std::min(options_.deadline, kHealthDeadline)},
                [&reply, wake = std::move(wake)](Result<StateStats> stats) {
                  if (stats) {
                    reply.set_json(200, R"({"status":"ok"})");
                  } else {
                    std::string body =
                        protocol::encode_detail("no upstream leader answered: " + stats.error().message());
                    body.insert(1, R"("status":"unavailable",)");
                    reply.set_json(503, std::move(body));
                  }
                  wake();
                });
}

void UpstreamBackend::serve_metrics(Reply& reply) const {
  reply.set_json(200, metrics_.render_front(registry_.Collect()));
  reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
}

}  // namespace hf3fs_meta::proxy
