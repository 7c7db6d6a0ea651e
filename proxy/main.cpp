// hf3fs-meta-proxy: vLLM's protocol on localhost:18000, the SDK's towards the metadata service.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "proxy_options.hpp"
#include "server.hpp"
#include "service_notify.hpp"
#include "upstream_backend.hpp"

namespace {

// How long the start waits for the upstream to say whether --token-file's token is an operator's.
constexpr std::chrono::milliseconds kTokenCheckBound{500};

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

std::string joined(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& item : list) {
    if (!out.empty()) out += ',';
    out += item;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hf3fs_meta;
  using namespace hf3fs_meta::proxy;

  auto parsed = parse_proxy_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  const ProxyOptions options = *parsed.options;
  std::signal(SIGPIPE, SIG_IGN);
  // Bodies and their copies of a MiB or more get pages of their own, given back to the system when
  // freed. By default glibc raises this threshold to the largest block freed (up to 32 MiB), after
  // which such blocks come from its heaps and stay in the RSS once the request is answered: 8
  // concurrent 16 MiB bodies then left 383 MiB of RSS against 130 MiB (docs/performance.md).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  try {
    UpstreamBackend backend(options);
    server::Server server(options.front, backend);
    boost::asio::ip::tcp::endpoint endpoint;
    try {
      endpoint = server.listen();
    } catch (const boost::system::system_error& e) {
      std::fprintf(stderr, "hf3fs-meta-proxy: --listen: cannot listen on %s port %u: %s\n",
                   url_host(options.front.host).c_str(), static_cast<unsigned>(options.front.port),
                   e.code().message().c_str());
      return 2;
    }
    const std::string address = url_host(options.front.host) + ":" + std::to_string(endpoint.port());
    backend.set_default_host(address);

    boost::asio::io_context signal_context(1);
    // SIGHUP, which operators send to reload, would end the proxy by default: it has nothing to
    // reload (its flags and token file are read at start), so it says so and goes on.
    boost::asio::signal_set signals(signal_context, SIGINT, SIGTERM, SIGHUP);
    int caught = 0;
    std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                              int signal) {
      if (ec) return;
      if (signal == SIGHUP) {
        std::fputs("hf3fs-meta-proxy: SIGHUP ignored (flags and --token-file are read at start only: restart to "
                   "change them)\n",
                   stderr);
        return signals.async_wait(on_signal);
      }
      caught = signal;
      server::notify_service_manager("hf3fs-meta-proxy", "STOPPING=1");
      server.stop();
    };
    signals.async_wait(on_signal);
    std::thread signal_thread([&] { signal_context.run(); });

    // Before the ready line, so that it is the first thing an operator reads; bounded, so that a
    // proxy started before its upstream still starts at once.
    if (!options.token.empty()) {
      if (const std::string warning = backend.token_warning(kTokenCheckBound); !warning.empty()) {
        std::fprintf(stderr, "%s\n", warning.c_str());
      }
    }
    std::fprintf(stderr,
                 "hf3fs-meta-proxy: ready (upstream %s%s%s, deadline %lld ms, %u I/O threads, max connections %zu)\n",
                 joined(options.upstream).c_str(), options.namespace_name.empty() ? "" : ", namespace ",
                 options.namespace_name.c_str(), static_cast<long long>(options.deadline.count()), options.threads,
                 server.max_connections());
    std::printf("listening on http://%s\n", address.c_str());
    std::fflush(stdout);
    // Type=notify: ready when the listening line is printed (the upstream may still be down: the
    // proxy answers vLLM regardless, within its deadline).
    server::notify_service_manager("hf3fs-meta-proxy", "READY=1\nSTATUS=listening on http://" + address);

    server.run();
    signals.cancel();
    signal_thread.join();
    std::fprintf(stderr, "hf3fs-meta-proxy: stopped (%s), %llu requests served\n",
                 caught == SIGINT ? "SIGINT" : caught == SIGTERM ? "SIGTERM" : "no signal",
                 static_cast<unsigned long long>(server.requests_served()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf3fs-meta-proxy: %s\n", e.what());
    return 1;
  }
}
