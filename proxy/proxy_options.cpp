#include "proxy_options.hpp"

#include <charconv>
#include <cstdint>
#include <utility>

#include <CLI/CLI.hpp>

#include "hf3fs_meta/connection.hpp"
#include "internal/endpoint_url.hpp"
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::proxy {
namespace {

constexpr const char* kFooter = R"(
vLLM's HF3FS connector talks to http://localhost:18000 with no token, no timeout and no request id;
the proxy answers it there as the server would, and calls the upstream through the SDK: a fresh
request id per call (exactly-once retries), failover between --upstream members, re-initializing the
ranks this node initialized when the upstream forgot them, all within --deadline-ms (then 503).
Once listening, prints `listening on http://HOST:PORT` on stdout. GET /healthz: 200 when an
upstream leader answers, else 503. GET /metrics: Prometheus text (the proxy's own; the server's
/metrics, /_faults and /_ha/snapshot are never forwarded: 403). With --token-file, asks the upstream
once at start whether the token is an operator's (GET /namespaces) and warns on stderr if so.
SIGINT/SIGTERM stop accepting, finish the requests in flight, and exit 0. SIGHUP is logged and
ignored (nothing is reloaded: restart the proxy to change its flags or token).
Under systemd (Type=notify, $NOTIFY_SOCKET): READY=1 once listening, STOPPING=1 on SIGINT/SIGTERM.)";

// --listen HOST:PORT (an IPv6 host in brackets): "" when it parses into `front`, else why not.
std::string parse_listen(const std::string& value, server::ServerOptions& front) {
  const auto colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) return "expected HOST:PORT, e.g. 127.0.0.1:18000";
  std::string host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return "expected HOST:PORT, e.g. 127.0.0.1:18000";
  const std::string_view port_text = std::string_view(value).substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return "the port must be 0 to 65535 (0 picks a free one)";
  }
  front.host = std::move(host);
  front.port = static_cast<std::uint16_t>(port);
  return {};
}

void define(CLI::App& app, ProxyOptions& o) {
  app.add_option_function<std::string>(
         "--listen",
         [&o](const std::string& value) {
           if (auto problem = parse_listen(value, o.front); !problem.empty()) {
             throw CLI::ValidationError("--listen", problem);
           }
         },
         "address and port vLLM connects to (its connector always uses localhost:18000)")
      ->default_str(kDefaultListen);
  app.add_option_function<std::string>(
         "--upstream",
         [&o](const std::string& list) {
           o.upstream = split_endpoints(list);
           if (auto problem = internal::endpoint_list_problem(o.upstream, "--upstream")) {
             throw CLI::ValidationError(*problem);
           }
         },
         "the metadata server's base URL, or an HA service's members separated by ',' (the SDK follows "
         "the leader among them)")
      ->required();
  app.add_option_function<std::string>(
         "--namespace",
         [&o](const std::string& name) {
           if (auto problem = internal::namespace_problem(name)) throw CLI::ValidationError("--namespace", *problem);
           o.namespace_name = name;
         },
         "the namespace every call acts in upstream (default: the default namespace)");
  app.add_option_function<std::string>(
         "--token-file",
         [&o](const std::string& path) {
           std::string error;
           auto token = internal::read_token_file(path, error);
           if (!token) throw CLI::ValidationError("--token-file", error);
           o.token = std::move(*token);
         },
         "file holding the bearer token sent upstream (vLLM sends none)");
  app.add_option("--ca-file", o.ca_file, "PEM file of the CA of an https:// upstream (default: the system's CAs)")
      ->check(CLI::ExistingFile);
  app.add_option_function<std::int64_t>(
         "--deadline-ms", [&o](const std::int64_t& ms) { o.deadline = std::chrono::milliseconds(ms); },
         "how long one vLLM request may take upstream, retries and failovers included; then 503")
      ->default_str(std::to_string(o.deadline.count()))
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--threads", o.threads,
                 "I/O threads; each makes its connections' upstream calls itself, without blocking")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_flag("--allow-operator-routes", o.allow_operator_routes,
               "forward GET /namespaces and POST /namespaces/{name}/drop, which act beyond --namespace (an "
               "operator's token needed upstream); without it they are refused with 403");
  server::define_front_limits(app, o.front);
  app.get_option("--max-inflight-body-bytes")
      ->description("bytes held at once for all requests in flight: their bodies, counted as they arrive, and the "
                    "copies the proxy makes of each (decoded, re-encoded upstream, its answer's), counted before "
                    "it is sent; a request without room gets 503, one that could never fit 413");
  app.add_flag("--log-requests", o.front.log_requests, "log every request on stderr");
  app.footer(kFooter);
}

}  // namespace

ParsedProxyOptions parse_proxy_options(const std::vector<std::string>& args) {
  ProxyOptions options;
  options.front.program = "hf3fs-meta-proxy";
  (void)parse_listen(kDefaultListen, options.front);
  CLI::App app("A sidecar that gives vLLM's HF3FS connector the hf3fs-meta SDK's guarantees.", "hf3fs-meta-proxy");
  define(app, options);
  app.set_version_flag("--version", std::string("hf3fs-meta-proxy ") + HF3FS_META_VERSION,
                       "print the version and exit");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them reversed
  } catch (const CLI::CallForHelp&) {
    return ParsedProxyOptions{std::nullopt, 0, app.help()};
  } catch (const CLI::CallForVersion& e) {
    return ParsedProxyOptions{std::nullopt, 0, std::string(e.what()) + "\n"};
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes are 100 and up; every usage error exits 2.
    return ParsedProxyOptions{std::nullopt, 2, "hf3fs-meta-proxy: " + std::string(e.what()) + "\n(see --help)\n"};
  }
  options.front.threads = options.threads;
  return ParsedProxyOptions{std::move(options), 0, {}};
}

}  // namespace hf3fs_meta::proxy
