// Command-line options of hf3fs-meta-proxy.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "server_options.hpp"

namespace hf3fs_meta::proxy {

struct ProxyOptions {
  // The HTTP front vLLM speaks to: --listen's host and port, and the server's connection and body
  // limits (define_front_limits). Its other members keep their defaults; it has `threads` I/O
  // threads, so that each of up to threads - 1 connections (a node's vLLM processes) can be alone
  // on one and make its calls there (server::Exchange::alone); worker 0's holds the acceptor.
  server::ServerOptions front;
  // The SDK's side: ClientOptions::endpoints, namespace_name, auth_token and ca_file.
  std::vector<std::string> upstream;
  std::string namespace_name;
  std::string token;
  std::string ca_file;
  // Each vLLM request's bound: the SDK's retries, failovers and re-initializations happen within it,
  // then vLLM gets 503.
  std::chrono::milliseconds deadline{30000};
  // I/O threads: each reads its connections' requests and makes their upstream calls itself,
  // without blocking (libcurl's multi interface), as many at once as its connections ask.
  unsigned threads = 2;
  // Forward the protocol's operator routes (RouteInfo::operator_only: listing and dropping
  // namespaces), which reach beyond --namespace; refused with 403 without it.
  bool allow_operator_routes = false;
};

inline constexpr const char* kDefaultListen = "127.0.0.1:18000";

struct ParsedProxyOptions {
  std::optional<ProxyOptions> options;  // empty: exit with `exit_code` after printing `message`
  int exit_code = 0;
  std::string message;  // --help text (stdout) or the error (stderr)
};

// args excludes the program name. Bad flags exit 2 with a message naming the flag.
ParsedProxyOptions parse_proxy_options(const std::vector<std::string>& args);

}  // namespace hf3fs_meta::proxy
