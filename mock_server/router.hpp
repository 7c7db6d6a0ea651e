// The server's router: what the server answers to a complete request, without knowing about sockets.
// The protocol routes go to Service; the router adds the server's own routes (kServerRoutes),
// request-id deduplication and fault injection. An answer may need the connection to wait (a delay
// fault, or a repeat of a request id still in flight), so the router is driven in steps.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>

#include "dedup_cache.hpp"
#include "durable/store.hpp"
#include "fault_injector.hpp"
#include "ha/role.hpp"
#include "hf3fs_meta/service.hpp"
#include "metrics.hpp"
#include "request_parser.hpp"
#include "server_options.hpp"
#include "tenants.hpp"

namespace hf3fs_meta::server {

struct Reply {
  int status = 200;
  std::string content_type;  // empty: no content-type header (204)
  std::string body;
  std::string location;  // absolute, for 307
  std::string allow;     // for 405
  std::string retry_after;  // seconds, for a 503 of the server's own limits
  std::string leader;       // kLeaderHeader, for an HA member's 503 "not the leader"
  // A body sent in place of `body` from a mapped file (GET /_ha/snapshot: as large as the state),
  // so that it is never copied whole onto the heap; released once the answer is sent.
  std::shared_ptr<const durable::FileBytes> file;

  // An answer with a JSON body (the router's, and admission's refusals).
  void set_json(int status_, std::string body_) {
    status = status_;
    content_type = "application/json";
    body = std::move(body_);
    location.clear();
    allow.clear();
  }
  // The answer to an error nothing handled (out of memory, a bug): uvicorn's, as vLLM's server gives.
  void set_unhandled_error() {
    status = 500;
    content_type = "text/plain; charset=utf-8";
    body = "Internal Server Error";
    location.clear();
    allow.clear();
  }
};

// Where a request is in the router. The stages run once each, in this order; a stage that makes the
// connection wait (a repeat of an id in flight, a delay fault, an fsync) returns, and the next
// Router::step resumes at the stage after it (a repeat's wait: at dedup again).
enum class Stage : std::uint8_t {
  admit,   // the bearer token, the server's own routes, routing, fault rules
  dedup,   // the request-id cache: a claim, a kept answer, or a wait for the first request's
  delay,   // a delay fault's wait
  serve,   // Service::handle under the journal (skipped when dedup answered)
  sync,    // --fsync always: the wait for the record's (or the kept answer's) fsync
  finish,  // a failed sync's rollback, the claim's answer, a close-after fault
};

// The progress of one request through the router; reused from one request to the next.
struct Exchange {
  RouteLabel label = Route::not_found;
  RoutedTarget target;  // routed once, handed to Service::handle
  // The namespace the request acts in, set by admit: the header's checked value, or the
  // tenant's namespace; empty for the default one. Views the request or the tenant table.
  std::string_view ns;
  Stage stage = Stage::admit;
  std::size_t thread = 0;  // the I/O thread the connection lives on (Backend::thread_started)
  bool answered = false;  // dedup answered (a kept answer or a refusal): nothing to serve
  std::uint64_t durable_seq = 0;  // --fsync always: the record the reply waits for
  std::string durable_error;      // set by the journal's syncer before the session is woken
  // --fsync always: the answer the claim keeps once the record is synced (a repeat is never given
  // an answer that a failed sync turns into a 503 and a rollback takes back).
  int claim_status = 0;
  std::vector<Page> claim_pages;
  FaultAction action;
  DedupCache::Claim claim;
  std::shared_ptr<DedupCache::Entry> wait_entry;
  Reply reply;
  // --tenants-file: the connection's last token lookup, kept from one request to the next (reset()
  // leaves it), so that a keep-alive client does not pay a digest per request.
  TenantCache tenant;
  // The connection's share of the front's body budget (set by the front, kept by reset()): a backend
  // that makes copies of the body (the proxy: decoded, re-encoded) takes their bytes from it too.
  BodyShare body_share;

  void reset() {
    label = Route::not_found;
    target.route = Route::not_found;
    ns = {};
    stage = Stage::admit;
    answered = false;
    durable_seq = 0;
    durable_error.clear();
    claim_pages.clear();
    action = {};
    claim.reset();
    wait_entry.reset();
    reply.retry_after.clear();
    reply.leader.clear();
    reply.file.reset();
  }
};

// What the server's front (server.hpp) drives with each complete request: the Router (the state
// model), or hf3fs-meta-proxy's upstream backend (proxy/). A step may make the connection wait for
// something the backend started; the backend wakes it, and the front steps again.
class Backend {
 public:
  enum class Next {
    reply,  // answer exchange.reply
    close,  // drop the connection without answering (fault)
    fail,   // throw in the session, as a failure beyond the router would (fault)
    delay,  // wait exchange.action.delay, then step again
    wait,   // await(Next::wait, ...): the backend's own wait (a repeat of an id in flight, an upstream call)
    durable,  // await(Next::durable, ...): the exchange's record on disk
  };
  virtual ~Backend() = default;
  virtual Next step(const Request& request, Exchange& exchange) = 0;
  // After step() returned `next` (wait or durable): calls `wake` once, from any thread, when the
  // exchange may step again. `request` and `exchange` stay as they are until then.
  virtual void await(Next next, const Request& request, Exchange& exchange, std::function<void()> wake) = 0;
  // The front's I/O threads, each running its own io_context: thread_started before any runs (the
  // io_context of Exchange::thread `index`), thread_ended on that thread once its io_context ran
  // out of work, before the io_context goes. For a backend that does its own I/O on them (the proxy).
  virtual void thread_started(std::size_t /*index*/, boost::asio::io_context& /*io*/) {}
  virtual void thread_ended(std::size_t /*index*/) {}
  virtual Metrics& metrics() noexcept = 0;
  // Header lines ("name: value\r\n") every answer carries.
  virtual const std::string& answer_headers() const noexcept = 0;
};

class Router final : public Backend {
 public:
  using Outcome = std::optional<Next>;  // a stage's: nullopt goes on to the next stage

  // `store`: the data dir of a durable server (null: memory only).
  Router(const ServerOptions& options, MetadataState& state, Metrics& metrics, durable::Store* store = nullptr);

  // Calls `wake` (from any thread) once the exchange's record is on disk, or its sync failed.
  void await_durable(Exchange& exchange, std::function<void()> wake);

  Next step(const Request& request, Exchange& exchange) override;
  void await(Next next, const Request& request, Exchange& exchange, std::function<void()> wake) override;
  // kKeyedReleaseHeader, and, while request-id deduplication is on, its window in ms.
  const std::string& answer_headers() const noexcept override { return dedup_header_; }

  void set_default_host(std::string host_port) { default_host_ = std::move(host_port); }
  // --ha-etcd: the member's role (which must outlive the router). Without one the server serves as
  // a single one; with one, only while it leads (every route but /healthz and /metrics).
  void set_role(const ha::Role* role) noexcept { role_ = role; }

  DedupCache& dedup() noexcept { return dedup_; }
  Metrics& metrics() noexcept override { return metrics_; }
  // --tenants-file's table (null without it), which SIGHUP reloads.
  Tenants* tenants() noexcept { return tenants_.get(); }

 private:
  // The stages (Stage), in their order.
  Outcome admit(const Request& request, Exchange& exchange);
  Outcome deduplicate(const Request& request, Exchange& exchange);
  Next finish(Exchange& exchange);

  bool serve_server_route(const Request& request, std::string_view path, Exchange& exchange);
  void serve_faults(const Request& request, Exchange& exchange);
  void serve_protocol(const Request& request, Exchange& exchange);
  // serve_protocol's steps, in their order.
  struct Served {
    ServiceAnswer answer;
    std::uint64_t seq = 0;  // the journal record of the change, written (0: none, or it failed)
  };
  // settle(); when it fails (the reply set to 503), the claim is completed with the 503: false.
  bool settle_or_refuse(Exchange& exchange);
  // Service::handle under the store's gate; a state change refused (503) while the journal is
  // failed, else through handle_journaled.
  Served handle_gated(const Request& request, Exchange& exchange);
  // A state change, tagged with the request id, its record written; a record that fails turns the
  // answer into a 503.
  Served handle_journaled(const Request& request, Exchange& exchange);
  // An initialize that kept the rank's other num_pages: counted and logged.
  void report_num_pages_kept(const Request& request, std::int64_t kept);
  // The claim's answer: now, or (--fsync always) once finish() sees the record synced.
  void keep_answer(Exchange& exchange, Served& served);
  void set_reply(const Request& request, ServiceAnswer&& answer, Reply& reply) const;
  // Store::settle; false (the reply set to 503) when the rollback failed.
  bool settle(Reply& reply);
  // Journal::writable; a server without a data dir always is.
  durable::Result<void> journal_writable() const;

  const ServerOptions& options_;
  Service service_;
  Metrics& metrics_;
  DedupCache dedup_;
  std::string dedup_header_;
  FaultInjector faults_;
  durable::Store* store_ = nullptr;
  std::string default_host_;
  std::unique_ptr<Tenants> tenants_;  // from options.tenants
  const ha::Role* role_ = nullptr;
  ServerRoutesOn routes_on() const noexcept { return {options_.enable_fault_injection, role_ != nullptr}; }
  // 503 "not the leader: nothing applied", naming the leader when known.
  void refuse_not_leader(Reply& reply) const;
  // GET /_ha/snapshot (--ha-etcd): the newest snapshot file, whole.
  void serve_snapshot(Reply& reply) const;
};

}  // namespace hf3fs_meta::server
