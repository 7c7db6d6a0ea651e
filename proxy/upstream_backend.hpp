// hf3fs-meta-proxy's backend for the server's HTTP front (server.hpp): each protocol request is
// forwarded through the SDK's Client, whose calls block: on the I/O thread that read it when its
// connection is the only one there (server::Exchange::alone), else on a pool of worker threads, the
// connection waiting, as it waits for an fsync in the server, until the worker wakes it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/thread_pool.hpp>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

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
  bool blocks_when_alone() const noexcept override { return true; }
  server::Metrics& metrics() noexcept override { return metrics_; }
  const std::string& answer_headers() const noexcept override { return no_headers_; }

  // The proxy's own host:port, for a 307's location when the request had no Host.
  void set_default_host(std::string host_port) { default_host_ = std::move(host_port); }
  // Waits for the upstream calls in flight; none is started after.
  void stop();

 private:
  // run(), with an exception answered as the server answers one.
  void answer(const server::Request& request, server::Exchange& exchange) noexcept;
  void run(const server::Request& request, server::Exchange& exchange);
  void check_health(server::Reply& reply);
  void serve_metrics(server::Reply& reply) const;

  const ProxyOptions& options_;
  server::Metrics metrics_;
  prometheus::Registry registry_;
  std::shared_ptr<UpstreamCounters> counters_;
  prometheus::Family<prometheus::Counter>& forwarded_;
  prometheus::Histogram& latency_;
  prometheus::Counter& inline_calls_;
  Client client_;
  boost::asio::thread_pool pool_;
  std::string default_host_;
  const std::string no_headers_;
};

}  // namespace hf3fs_meta::proxy
