// hf3fs-meta-server: the reference metadata server of vLLM's HF3FS KV-cache connector.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/signal_set.hpp>

#include "hf3fs_meta/state.hpp"
#include "metrics.hpp"
#include "router.hpp"
#include "server.hpp"
#include "server_options.hpp"

namespace {

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hf3fs_meta;
  using namespace hf3fs_meta::server;

  auto parsed = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  const ServerOptions options = *parsed.options;
  // A client that goes away must not kill the server; socket writes already avoid SIGPIPE, stdout not.
  std::signal(SIGPIPE, SIG_IGN);

  try {
    MetadataState state(state_options(options));
    const unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    Metrics metrics(threads);
    Router router(options, state, metrics);
    Server server(options, router);
    const auto endpoint = server.listen();
    const std::string address = url_host(options.host) + ":" + std::to_string(endpoint.port());
    router.set_default_host(address);

    boost::asio::io_context signal_context(1);
    boost::asio::signal_set signals(signal_context, SIGINT, SIGTERM);
    int caught = 0;
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      caught = signal;
      server.stop();
    });
    std::thread signal_thread([&] { signal_context.run(); });

    const char* scheme = options.tls_cert.empty() ? "http" : "https";
    std::string lifecycle;  // the cache lifecycle, as the state model took it
    if (state.options().eviction == Eviction::lru) lifecycle += ", eviction lru";
    if (const auto lease = state.options().read_lease.count(); lease > 0) {
      lifecycle += ", read lease " + std::to_string(lease) + " ms";
    }
    if (const auto ttl = state.options().allocation_ttl.count(); ttl > 0) {
      lifecycle += ", allocation ttl " + std::to_string(ttl) + " ms";
    }
    std::fprintf(stderr,
                 "hf3fs-meta-server: listening on %s://%s (threads %u, max pages %lld, max connections %zu%s%s%s)\n",
                 scheme, address.c_str(), threads, static_cast<long long>(options.max_pages), server.max_connections(),
                 options.auth_token.empty() ? "" : ", bearer token required",
                 options.enable_fault_injection ? ", fault injection on" : "", lifecycle.c_str());
    std::printf("listening on %s://%s\n", scheme, address.c_str());
    std::fflush(stdout);

    server.run();
    signals.cancel();
    signal_thread.join();
    std::fprintf(stderr, "hf3fs-meta-server: stopped (%s), %llu requests served\n",
                 caught == SIGINT ? "SIGINT" : caught == SIGTERM ? "SIGTERM" : "no signal",
                 static_cast<unsigned long long>(server.requests_served()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf3fs-meta-server: %s\n", e.what());
    return 1;
  }
}
