#include "router.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "admission.hpp"
#include "hf3fs_meta/protocol_server.hpp"
#include "internal/json.hpp"

namespace hf3fs_meta::server {
namespace {

constexpr std::string_view kJson = "application/json";


// A repeat gets the answer its first request got, rendered again from what the route keeps
// (routes.hpp, Dedup) and the repeat's body (the same body as the first's; a differing one is a
// conflict before this). An allocate's pages are given again only while each is still held for its
// key: one taken back since (reclaimed, dropped, deleted, evicted, cleared) may be another key's now,
// and the repeat's writer would write over it. Such a repeat gets 409, which the SDK does not repeat.
// (So /clear forgets no id: a repeat of one from before it is 409 too, never executed afresh.)
// (A confirm's answer names no page: giving its 204 again hands nothing out.)
// The pages are checked in the request's namespace (`ns`): after a drop of it, none is held, so a
// repeat is 409 there too.
void answer_again(const Request& request, std::string_view ns, Dedup what, const KeptAnswer& kept,
                  const MetadataState& state, Reply& reply) {
  if (what != Dedup::pages) {
    reply.status = kept.status;
    reply.content_type.clear();
    reply.body.clear();
    reply.location.clear();
    reply.allow.clear();
    return;
  }
  auto decoded = protocol::decode_allocate_request(request.body);
  if (!decoded || decoded.value().keys.size() != kept.pages.size()) {
    // Only a hash collision between two different bodies of one id gets here.
    reply.set_json(400, protocol::encode_detail("X-Request-Id " + request.request_id +
                                                 " was already used with a different body"));
    return;
  }
  std::vector<Page> pages(kept.pages.size());
  std::transform(kept.pages.begin(), kept.pages.end(), pages.begin(),
                 [](std::uint32_t p) { return p == 0xFFFFFFFFu ? kNoPage : Page{p}; });
  const Rank rank = decoded.value().rank;
  if (!state.holds(NamespaceRef{ns}, rank, pages, decoded.value().keys)) {
    // Ends "on rank R", as the state's own 409s do (the SDK's classifier reads the rank there).
    reply.set_json(409,
             protocol::encode_detail("X-Request-Id " + request.request_id +
                                     ": the pages of its answer were taken back since (reclaimed, dropped, deleted, "
                                     "evicted or cleared); allocate again under a new request id, on rank " +
                                     std::to_string(rank)));
    return;
  }
  reply.set_json(kept.status,
           protocol::encode_allocate_response(decoded.value().rank, decoded.value().keys, pages));
}

// Ids are echoed in answers and logs: visible ASCII only, so nothing raw is ever echoed.
constexpr std::size_t kMaxRequestIdBytes = 128;
bool valid_request_id(std::string_view id) noexcept {
  return id.size() <= kMaxRequestIdBytes &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// The most pages an allocate body can ask for: every key is a `[key, prefix_key]` pair, so it opens
// a '[' of its own (brackets inside strings only make the bound looser).
std::size_t most_pages(std::string_view body) noexcept {
  return static_cast<std::size_t>(std::count(body.begin(), body.end(), '['));
}

void set_method_not_allowed(Reply& reply, std::string_view allow) {
  reply.set_json(405, protocol::encode_detail("Method Not Allowed"));
  reply.allow = allow;
}

// A 503 of the data dir's, with its JSON detail.
ServiceAnswer unavailable(std::string body) {
  ServiceAnswer answer;
  answer.status = 503;
  answer.content_type = kJson;
  answer.body = std::move(body);
  return answer;
}

// The 503 body of a change refused because the journal had failed before it.
std::string nothing_applied(const std::string& error) {
  return protocol::encode_detail("the data dir cannot be written (" + error + "): nothing applied");
}

// The 503 body of a change whose journal record could not be written, or replicated (--ha-etcd,
// whose error says whether the change may yet be applied): rolled back here since.
std::string not_acknowledged(const std::string& error, bool replicated) {
  if (replicated) return protocol::encode_detail(error + "; rolled back on this member");
  return protocol::encode_detail("the change could not be written to the data dir (" + error +
                                 "): not acknowledged, and rolled back");
}

// The 503 body of a member that is not the leader (routes.hpp, kNotLeaderDetailPrefix).
std::string not_leader() { return protocol::encode_detail(std::string(kNotLeaderDetailPrefix) + ": nothing applied"); }

// /healthz of an HA member: its role, the leader it knows, the last change it applied, and why it
// cannot apply the log when it cannot.
void append_ha_health(std::string& body, const ha::Role& role, std::uint64_t applied_seq) {
  body.pop_back();  // the closing brace
  body += R"(,"role":")";
  body += ha::to_string(role.answered());
  body += R"(","leader":)";
  internal::append_json_string(body, role.leader());
  body += R"(,"applied_seq":)";
  body += std::to_string(applied_seq);
  if (const std::string error = role.log_error(); !error.empty()) {
    body += R"(,"log_error":)";  // why it cannot apply the log: never a silent lag
    internal::append_json_string(body, error);
  }
  body += '}';
}

// One namespace's share of the request-id memory: --namespace-dedup-max-bytes, by default a quarter
// of --dedup-max-bytes (so at least four tenants can fill theirs at once).
std::size_t namespace_dedup_budget(const ServerOptions& options) {
  if (options.namespace_dedup_max_bytes != 0) return std::min(options.namespace_dedup_max_bytes, options.dedup_max_bytes);
  return options.dedup_max_bytes / 4;
}

}  // namespace

Router::Router(const ServerOptions& options, MetadataState& state, Metrics& metrics, durable::Store* store)
    : options_(options),
      service_(state),
      metrics_(metrics),
      dedup_(DedupCache::Options{options.dedup_max_bytes, options.dedup_ttl, {}, namespace_dedup_budget(options)}),
      store_(store) {
  if (options.tenants) tenants_ = std::make_unique<Tenants>(options.tenants);
  // Always on: keyed releases cost a client nothing to ignore (vLLM's ignores the header).
  dedup_header_ = std::string(kKeyedReleaseHeader) + ": 1\r\n";
  if (dedup_.enabled()) dedup_header_ += "x-request-id-dedup: " + std::to_string(dedup_.window().count()) + "\r\n";
}

durable::Result<void> Router::journal_writable() const {
  if (!store_) return boost::outcome_v2::success();
  return store_->journal().writable();
}

bool Router::settle(Reply& reply) {
  if (!store_) return true;
  auto settled = store_->settle();
  if (settled) return true;
  std::fprintf(stderr, "hf3fs-meta-server: %s\n", settled.error().message.c_str());
  reply.set_json(503, protocol::encode_detail("the data dir failed and the changes it did not acknowledge could not be "
                                               "rolled back (" + settled.error().message + "); nothing is served until they are"));
  return false;
}

void Router::serve_snapshot(Reply& reply) const {
  if (!store_) {
    reply.set_json(503, protocol::encode_detail("no data dir: no snapshot"));
    return;
  }
  auto mapped = store_->newest_snapshot();
  if (!mapped) {
    reply.set_json(503, protocol::encode_detail("the snapshot cannot be read: " + mapped.error().message));
  } else if (mapped.value().bytes().empty()) {
    reply.set_json(503, protocol::encode_detail("no snapshot yet"));
  } else {
    reply.set_json(200, {});
    reply.content_type = "application/octet-stream";
    reply.file = std::make_shared<const durable::FileBytes>(std::move(mapped).value());
  }
}

void Router::refuse_not_leader(Reply& reply) const {
  reply.set_json(503, not_leader());
  reply.leader = role_->leader();
}

void Router::await_durable(Exchange& exchange, std::function<void()> wake) {
  store_->journal().when_durable(exchange.durable_seq,
                                 [&exchange, wake = std::move(wake)](const durable::Result<void>& durable) {
                                   if (!durable) exchange.durable_error = durable.error().message;
                                   wake();
                                 });
}

void Router::await(Next next, const Request&, Exchange& exchange, std::function<void()> wake) {
  if (next == Next::durable) return await_durable(exchange, std::move(wake));
  dedup_.wait(exchange.wait_entry, std::move(wake));
}

bool Router::serve_server_route(const Request& request, std::string_view path, Exchange& exchange) {
  auto& reply = exchange.reply;
  if (const ServerRouteInfo* found = find_server_route(path, routes_on())) {
    const ServerRouteInfo& row = *found;
    exchange.label = row.route;
    switch (row.route) {
      case ServerRoute::healthz:
        if (request.method != "GET") break;
        if (auto writable = journal_writable(); !writable) {
          // Reads are still answered; state changes get 503 until a snapshot succeeds.
          std::string body = protocol::encode_detail(writable.error().message);
          body.insert(1, R"("status":"degraded",)");
          reply.set_json(200, std::move(body));
        } else {
          reply.set_json(200, R"({"status":"ok"})");
        }
        if (role_) append_ha_health(reply.body, *role_, service_.state().seq());
        return true;
      case ServerRoute::metrics:
        if (request.method != "GET") break;
        reply.status = 200;
        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
      {
        auto more = store_ ? durability_families(store_->stats(), store_->journal().stats(), !store_->journal().writable())
                           : std::vector<prometheus::MetricFamily>{};
        if (role_) {
          auto ha = ha_families(*role_, service_.state().seq());
          more.insert(more.end(), std::make_move_iterator(ha.begin()), std::make_move_iterator(ha.end()));
        }
        reply.body = metrics_.render(service_.state(), dedup_.stats(), std::move(more));
      }
        reply.location.clear();
        reply.allow.clear();
        return true;
      case ServerRoute::faults:
        serve_faults(request, exchange);
        return true;
      case ServerRoute::ha_snapshot:
        if (request.method != "GET") break;
        serve_snapshot(reply);
        return true;
      case ServerRoute::bad_request:
      case ServerRoute::unauthorized:
        break;
    }
    set_method_not_allowed(reply, row.allow);
    return true;
  }
  return false;
}

void Router::serve_faults(const Request& request, Exchange& exchange) {
  auto& reply = exchange.reply;
  if (request.method == "DELETE") {
    const auto removed = faults_.clear();
    durable::clear_disk_errors();
    reply.set_json(200, "{\"removed\":" + std::to_string(removed) + "}");
    return;
  }
  if (request.method != "POST") {
    set_method_not_allowed(reply, route_info(ServerRoute::faults).allow);
    return;
  }
  auto parsed = parse_fault_request(request.body);
  if (!parsed.request) {
    reply.set_json(400, protocol::encode_detail(parsed.error));
    return;
  }
  // Every member takes a disk fault, its own process's (kServerRoutes: any_role); the other rules
  // act on protocol requests or on the state, which only the leader serves and changes.
  if (role_ && !role_->leading() && !parsed.request->disk) {
    refuse_not_leader(reply);
    return;
  }
  if (parsed.request->disk) {
    const auto& disk = *parsed.request->disk;
    durable::inject_disk_error(disk.op, disk.err, disk.times);
    reply.set_json(200, R"({"disk_error":true})");
    return;
  }
  if (parsed.request->forget_state) {
    if (!settle(reply)) return;
    durable::Result<void> written = boost::outcome_v2::success();
    {
      std::shared_lock<std::shared_mutex> gate;
      if (store_) gate = store_->gate();
      if (auto writable = journal_writable(); !writable) {
        reply.set_json(503, nothing_applied(writable.error().message));
        return;
      }
      durable::Journal::reset_thread_seq();
      service_.state().clear_all();  // a restart forgets every namespace
      if (store_) written = store_->journal().write_through(durable::Journal::thread_seq());
    }
    if (!written) {
      // As for any change whose record failed (serve_protocol): rolled back, not acknowledged.
      if (settle(reply)) reply.set_json(503, not_acknowledged(written.error().message, store_->journal().replicates()));
      return;
    }
    dedup_.clear();
    reply.set_json(200, R"({"forgotten":true})");
    return;
  }
  const auto rules = faults_.add(std::move(parsed.request->rule));
  reply.set_json(200, "{\"rules\":" + std::to_string(rules) + "}");
}

// Service::handle, as a sequence: settle any earlier failure, run the call under the store's gate
// (its record written), settle a failure of that record, then log, keep the answer for the request
// id, and copy it into the reply.
void Router::serve_protocol(const Request& request, Exchange& exchange) {
  // Nothing is served while a journal failure's unacknowledged changes are still applied.
  if (!settle_or_refuse(exchange)) return;
  Served served = handle_gated(request, exchange);
  // A failed record: the change (and any other not acknowledged) is rolled back before the 503.
  if (!settle_or_refuse(exchange)) return;
  if (served.answer.num_pages_kept != 0) report_num_pages_kept(request, served.answer.num_pages_kept);
  keep_answer(exchange, served);
  set_reply(request, std::move(served.answer), exchange.reply);
}

bool Router::settle_or_refuse(Exchange& exchange) {
  if (!store_ || settle(exchange.reply)) return true;
  if (exchange.claim) exchange.claim.complete(503, {}, 0);
  return false;
}

Router::Served Router::handle_gated(const Request& request, Exchange& exchange) {
  if (!store_) return Served{service_.handle(exchange.target, request.body, exchange.ns), 0};
  // See Store::gate; released on return, before serve_protocol's settle().
  const std::shared_lock<std::shared_mutex> gate = store_->gate();
  if (!route_info(exchange.target.route).changes_state) {
    return Served{service_.handle(exchange.target, request.body, exchange.ns), 0};
  }
  if (auto writable = store_->journal().writable(); !writable) {
    return Served{unavailable(nothing_applied(writable.error().message)), 0};
  }
  // Asked again under the gate: a member stepping down waits for the gates held (Store::barrier),
  // and a change that takes one after that must not reach the state.
  if (role_ && !role_->leading()) {
    exchange.reply.leader = role_->leader();
    return Served{unavailable(not_leader()), 0};
  }
  return handle_journaled(request, exchange);
}

Router::Served Router::handle_journaled(const Request& request, Exchange& exchange) {
  // The change's record carries the request id, so that a restarted server still knows the answer.
  durable::DedupTag tag;
  if (exchange.claim) {
    // The namespace's name goes to the journal's retained answers (the snapshot's tags), not into the
    // record's tag bytes: the record carries its namespace itself (record.hpp).
    tag = durable::DedupTag{exchange.target.route, request.request_id, DedupCache::body_hash(request.body),
                            request.body.size(), std::string(exchange.ns)};
  }
  durable::Journal::reset_thread_seq();
  // Constructed in place from Service's answer (no move of it on the hot path); a braced list runs
  // in order: the call, then the seq of the record it appended.
  Served served{[&] {
                  durable::TagScope scope(exchange.claim ? &tag : nullptr);
                  return service_.handle(exchange.target, request.body, exchange.ns);
                }(),
                durable::Journal::thread_seq()};
  if (served.seq == 0) return served;  // no record appended: nothing to write
  if (auto written = store_->journal().write_through(served.seq); !written) {
    served.answer = unavailable(not_acknowledged(written.error().message, store_->journal().replicates()));
    served.seq = 0;
  }
  return served;  // (the one object returned: constructed in the caller's place)
}

void Router::report_num_pages_kept(const Request& request, std::int64_t kept) {
  metrics_.count_num_pages_mismatch();
  const RouteInfo& drop = route_info(Route::drop_rank);
  std::fprintf(stderr,
               "hf3fs-meta-server: %.*s asked for another num_pages than the rank has (%lld): the rank is kept "
               "as it is; %.*s %.*s first to resize it\n",
               static_cast<int>(request.target.size()), request.target.data(), static_cast<long long>(kept),
               static_cast<int>(drop.method.size()), drop.method.data(), static_cast<int>(drop.name.size()),
               drop.name.data());
}

void Router::keep_answer(Exchange& exchange, Served& served) {
  if (served.seq != 0 && store_->journal().acknowledged_late()) {
    // Kept once the record is synced (finish): a repeat never gets an answer a failed sync takes back.
    exchange.durable_seq = served.seq;
    if (exchange.claim) {
      exchange.claim_status = served.answer.status;
      exchange.claim_pages = std::move(served.answer.pages);
    }
  } else if (exchange.claim) {
    // Completed after the record is written (acknowledged, for everysec and no): a repeat waiting on
    // the claim is never answered first.
    exchange.claim.complete(served.answer.status, served.answer.pages, served.seq);
  }
}

void Router::set_reply(const Request& request, ServiceAnswer&& answer, Reply& reply) const {
  reply.status = answer.status;
  reply.content_type = std::move(answer.content_type);
  reply.body = std::move(answer.body);
  reply.allow = std::move(answer.allow);
  reply.location.clear();
  if (!answer.location.empty()) {
    reply.location = options_.tls_cert.empty() ? "http://" : "https://";
    reply.location += request.host.empty() ? default_host_ : request.host;
    reply.location += answer.location;
  }
}

Router::Next Router::step(const Request& request, Exchange& exchange) {
  for (;;) {
    const Stage stage = exchange.stage;
    // Advanced before the stage runs: a stage that returns resumes at the next one (dedup's wait
    // sets it back to run again).
    exchange.stage = static_cast<Stage>(static_cast<std::uint8_t>(stage) + 1);
    Outcome next;
    switch (stage) {
      case Stage::admit:
        next = admit(request, exchange);
        break;
      case Stage::dedup:
        next = deduplicate(request, exchange);
        break;
      case Stage::delay:
        if (exchange.action.kind == FaultAction::Kind::delay) next = Next::delay;
        break;
      case Stage::serve:
        if (!exchange.answered) serve_protocol(request, exchange);
        break;
      case Stage::sync:
        if (exchange.durable_seq != 0) next = Next::durable;
        break;
      case Stage::finish:
        return finish(exchange);
    }
    if (next) return *next;
  }
}

Router::Outcome Router::admit(const Request& request, Exchange& exchange) {
  auto& reply = exchange.reply;
  std::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  const Principal* principal = nullptr;  // --tenants-file: who asks (never null past here with it)
  if (tenants_ && path != route_info(ServerRoute::healthz).name) {
    principal = admit_tenant(*tenants_, routes_on(), request, path, exchange);
    if (!principal) return Next::reply;
  } else if (!options_.auth_token.empty() && path != route_info(ServerRoute::healthz).name &&
             (request.auth_headers > 1 || !bearer_matches(request.authorization, options_.auth_token))) {
    refuse_unauthenticated(request, exchange);
    return Next::reply;
  }
  if (role_ && !role_->leading()) {
    const ServerRouteInfo* row = find_server_route(path, routes_on());
    if (!row || !row->any_role) {
      refuse_not_leader(reply);
      return Next::reply;
    }
  }
  if (serve_server_route(request, path, exchange)) return Next::reply;

  Service::route(request.method, request.target, exchange.target);
  exchange.label = exchange.target.route;
  // Without the header and without tenants: the default namespace, for one branch.
  if ((request.ns_headers != 0 || principal) && !choose_namespace(request, principal, exchange)) {
    return Next::reply;
  }
  if (!options_.enable_fault_injection) return std::nullopt;
  exchange.action = faults_.match(path, route_info(exchange.target.route).is_endpoint());
  switch (exchange.action.kind) {
    case FaultAction::Kind::status:
      reply.set_json(exchange.action.status, std::move(exchange.action.body));
      return Next::reply;
    case FaultAction::Kind::close_before:
      return Next::close;
    case FaultAction::Kind::exception:
      return Next::fail;
    default:
      return std::nullopt;
  }
}

Router::Outcome Router::deduplicate(const Request& request, Exchange& exchange) {
  auto& reply = exchange.reply;
  const Dedup kept = route_info(exchange.target.route).dedup;
  if (kept == Dedup::none || !dedup_.enabled() || request.request_id.empty()) return std::nullopt;
  if (!valid_request_id(request.request_id)) {
    reply.set_json(400,
             protocol::encode_detail("X-Request-Id must be at most " + std::to_string(kMaxRequestIdBytes) +
                                     " visible ASCII characters"));
    exchange.answered = true;
    return std::nullopt;
  }
  auto acquired = dedup_.acquire(exchange.ns, static_cast<int>(exchange.target.route), request.request_id,
                                 request.body, kept == Dedup::pages ? most_pages(request.body) : 0);
  exchange.wait_entry.reset();
  switch (acquired.kind) {
    case DedupCache::Kind::owner:
      exchange.claim = std::move(acquired.claim);
      break;
    case DedupCache::Kind::hit:
      answer_again(request, exchange.ns, kept, acquired.answer, service_.state(), reply);
      // Not before the first answer's record is as durable as that answer was.
      if (store_ && store_->journal().acknowledged_late() && reply.status < 300) {
        exchange.durable_seq = acquired.answer.seq;
      }
      break;
    case DedupCache::Kind::conflict:
      reply.set_json(400,
               protocol::encode_detail("X-Request-Id " + request.request_id + " was already used with a different body"));
      break;
    case DedupCache::Kind::wait:
      exchange.wait_entry = std::move(acquired.entry);
      exchange.stage = Stage::dedup;  // the first request's answer, then this stage again
      return Next::wait;
    case DedupCache::Kind::full:
      reply.set_json(503, protocol::encode_detail(
                              std::string(acquired.namespace_share ? "Request-id deduplication is full for this "
                                                                     "namespace: every answer it keeps is inside its "
                                                                   : "Request-id deduplication is full: every kept "
                                                                     "answer is inside its ") +
                              std::to_string(dedup_.window().count()) + " ms window; nothing was applied, retry later"));
      reply.retry_after = std::to_string((acquired.retry_after.count() + 999) / 1000);
      break;
    case DedupCache::Kind::too_large:
      // Not 503: waiting never makes room for an answer larger than the whole budget.
      reply.set_json(413, protocol::encode_detail(
                              "the answer to this X-Request-Id could never fit " +
                              std::string(acquired.namespace_share ? "a namespace's share of request-id memory ("
                                                                   : "--dedup-max-bytes (") +
                              std::to_string(acquired.namespace_share ? dedup_.namespace_budget()
                                                                      : options_.dedup_max_bytes) +
                              " bytes); nothing was applied: send it without X-Request-Id or in smaller batches"));
      break;
  }
  exchange.answered = acquired.kind != DedupCache::Kind::owner;  // a kept answer or a refusal
  return std::nullopt;
}

Router::Next Router::finish(Exchange& exchange) {
  if (!exchange.durable_error.empty()) {
    const std::string error = std::move(exchange.durable_error);
    exchange.durable_error.clear();
    if (settle(exchange.reply)) {
      // Replicated (--ha-etcd): the error says whether the change may yet be in the log.
      exchange.reply.set_json(503, store_->journal().replicates()
                                       ? not_acknowledged(error, true)
                                       : protocol::encode_detail("the change was written but not synced to disk (" +
                                                                 error + "): not acknowledged, and rolled back"));
    }
    if (exchange.claim) exchange.claim.complete(503, {}, 0);
  } else if (exchange.claim && exchange.durable_seq != 0) {
    exchange.claim.complete(exchange.claim_status, exchange.claim_pages, exchange.durable_seq);
  }
  return exchange.action.kind == FaultAction::Kind::close_after ? Next::close : Next::reply;
}

}  // namespace hf3fs_meta::server
