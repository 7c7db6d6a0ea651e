// hf3fs-meta-proxy's backend for the server's HTTP front (server.hpp): each protocol request is
// forwarded through the SDK's calls that do not block (internal::AsyncClient), on the I/O thread that
// read it, over that thread's own libcurl multi transport; the connection waits, as it waits for an
// fsync in the server, until the call's answer wakes it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "client/async_client.hpp"
#include "client/async_transport.hpp"
#include "forward.hpp"
#include "hf3fs_meta/client.hpp"
#include "metrics.hpp"
#include "proxy_options.hpp"
#include "router.hpp"

namespace hf3fs_meta::proxy {

// The SDK's retries, failovers and re-initializations, counted for /metrics.
class UpstreamCounters final : public ClientObserver {
 public:
  explicit UpstreamCounters(prometheus::Registry& registry, bool several_endpoints);
  void on_retry(const RetryEvent& event) override;
  void on_reinitialize(const ReinitializeEvent& event) override;

 private:
  bool several_endpoints_;
  prometheus::Counter& retries_;
  prometheus::Counter& failovers_;
  prometheus::Counter& reinitializations_;
};

class UpstreamBackend final : public server::Backend {
 public:
  // The Client is made from `options` (its endpoints, namespace, token, CA file and deadline).
  explicit UpstreamBackend(const ProxyOptions& options);
  ~UpstreamBackend() override;

  Next step(const server::Request& request, server::Exchange& exchange) override;
  void await(Next next, const server::Request& request, server::Exchange& exchange,
             std::function<void()> wake) override;
  void thread_started(std::size_t index, boost::asio::io_context& io) override;
  void thread_ended(std::size_t index) override;
  server::Metrics& metrics() noexcept override { return metrics_; }
  const std::string& answer_headers() const noexcept override { return no_headers_; }

  // With a token: a warning line for stderr when the upstream takes it as an operator's, or when it
  // could not tell within `bound` (the deadline when shorter); empty for a tenant's. Blocks.
  std::string token_warning(std::chrono::milliseconds bound);

  // The proxy's own host:port, for a 307's location when the request had no Host.
  void set_default_host(std::string host_port) { default_host_ = std::move(host_port); }

 private:
  void check_health(internal::AsyncTransport& transport, server::Reply& reply, std::function<void()> wake);
  void serve_metrics(server::Reply& reply) const;
  // 403 for an operator's route (`route`, its path pattern), saying `why` it is not forwarded.
  void refuse_operator_route(std::string_view route, std::string_view why, server::Reply& reply) const;
  std::string namespace_text() const;  // --namespace's, or "the default one"

  const ProxyOptions& options_;
  server::Metrics metrics_;
  prometheus::Registry registry_;
  std::shared_ptr<UpstreamCounters> counters_;
  prometheus::Family<prometheus::Counter>& forwarded_;
  prometheus::Histogram& latency_;
  internal::AsyncClient client_;
  // One per I/O thread (server::Exchange::thread), made on it: a libcurl multi handle and its
  // connections to the upstream.
  std::vector<std::unique_ptr<internal::AsyncTransport>> transports_;
  std::string default_host_;
  const std::string no_headers_;
};

}  // namespace hf3fs_meta::proxy
