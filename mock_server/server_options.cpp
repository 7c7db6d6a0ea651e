#include "server_options.hpp"

#include <charconv>
#include <limits>
#include <string_view>

#include "internal/token_file.hpp"

namespace hf3fs_meta::server {
namespace {

template <class T>
bool parse_number(std::string_view text, T min, T max, T& out) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) return false;
  out = value;
  return true;
}

}  // namespace

std::string usage() {
  return "Usage: hf3fs-meta-server [options]\n"
         "The reference metadata server of vLLM's HF3FS KV-cache connector.\n"
         "\n"
         "  --host HOST               address to bind (default 127.0.0.1; vLLM's server binds 0.0.0.0)\n"
         "  --port PORT               port to bind (default 18000, as vLLM; 0 picks a free port)\n"
         "  --threads N               I/O threads (default: the machine's cores)\n"
         "  --max-pages N             largest num_pages a worker rank may ask for (default 16777216)\n"
         "  --max-ranks N             ranks that may exist at once (default 1024)\n"
         "  --max-total-pages N       pages of all ranks together, 12 bytes each (default 268435456)\n"
         "  --max-body-bytes N        larger request bodies get 413 (default 16777216)\n"
         "  --dedup-capacity N        X-Request-Id answers kept (default 10000)\n"
         "  --dedup-ttl-ms N          how long an X-Request-Id answer is kept (default 60000)\n"
         "  --idle-timeout-ms N       a connection that does not complete a request within this time\n"
         "                            is closed (default 30000)\n"
         "  --auth-token-file PATH    every route but /healthz then needs `Authorization: Bearer TOKEN`,\n"
         "                            TOKEN being the file's content without surrounding whitespace\n"
         "                            (else 401); /metrics too (default: no authentication)\n"
         "  --tls-cert PATH           serve HTTPS (TLS 1.2+) with this PEM certificate chain...\n"
         "  --tls-key PATH            ...and this PEM private key; both or neither (default: HTTP)\n"
         "  --enable-fault-injection  serve POST/DELETE /_faults (tests only)\n"
         "  --log-requests            log every request on stderr\n"
         "  --help                    print this and exit\n"
         "\n"
         "Once listening, prints `listening on http://HOST:PORT` (https with TLS) on stdout.\n"
         "SIGINT/SIGTERM stop accepting, finish the requests in flight, and exit 0.\n";
}

ParsedOptions parse_options(const std::vector<std::string>& args) {
  ServerOptions options;
  auto fail = [](std::string message) {
    return ParsedOptions{std::nullopt, 2, std::move(message) + "\n(see --help)\n"};
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    std::string_view value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= args.size()) return false;
      value = args[++i];
      return true;
    };
    auto bad = [&] { return fail("hf3fs-meta-server: bad value for " + std::string(arg) + ": '" + std::string(value) + "'"); };
    if (arg == "--help" || arg == "-h") return ParsedOptions{std::nullopt, 0, usage()};
    if (arg == "--enable-fault-injection") {
      options.enable_fault_injection = true;
    } else if (arg == "--log-requests") {
      options.log_requests = true;
    } else if (arg == "--host" || arg == "--port" || arg == "--threads" || arg == "--max-pages" ||
               arg == "--max-ranks" || arg == "--max-total-pages" ||
               arg == "--max-body-bytes" || arg == "--dedup-capacity" || arg == "--dedup-ttl-ms" ||
               arg == "--idle-timeout-ms" || arg == "--auth-token-file" || arg == "--tls-cert" ||
               arg == "--tls-key") {
      if (!take()) return fail("hf3fs-meta-server: " + std::string(arg) + " needs a value");
      if (arg == "--auth-token-file") {
        std::string error;
        auto token = internal::read_token_file(std::string(value), error);
        if (!token) return fail("hf3fs-meta-server: --auth-token-file: " + error);
        options.auth_token = std::move(*token);
      } else if (arg == "--tls-cert" || arg == "--tls-key") {
        if (value.empty()) return bad();
        (arg == "--tls-cert" ? options.tls_cert : options.tls_key) = std::string(value);
      } else if (arg == "--host") {
        if (value.empty()) return bad();
        options.host = std::string(value);
      } else if (arg == "--port") {
        if (!parse_number<std::uint16_t>(value, 0, 65535, options.port)) return bad();
      } else if (arg == "--threads") {
        if (!parse_number<unsigned>(value, 1, 1024, options.threads)) return bad();
      } else if (arg == "--max-pages") {
        if (!parse_number<std::int64_t>(value, 1, std::numeric_limits<std::int32_t>::max(), options.max_pages))
          return bad();
      } else if (arg == "--max-ranks") {
        if (!parse_number<std::int64_t>(value, 1, std::numeric_limits<std::uint32_t>::max() - 1, options.max_ranks))
          return bad();
      } else if (arg == "--max-total-pages") {
        if (!parse_number<std::int64_t>(value, 1, std::numeric_limits<std::int64_t>::max(), options.max_total_pages))
          return bad();
      } else if (arg == "--max-body-bytes") {
        if (!parse_number<std::size_t>(value, 1, std::size_t{1} << 32, options.max_body_bytes)) return bad();
      } else if (arg == "--dedup-capacity") {
        if (!parse_number<std::size_t>(value, 0, std::size_t{1} << 30, options.dedup_capacity)) return bad();
      } else {
        std::int64_t ms = 0;
        if (!parse_number<std::int64_t>(value, 1, std::int64_t{1} << 40, ms)) return bad();
        (arg == "--dedup-ttl-ms" ? options.dedup_ttl : options.idle_timeout) = std::chrono::milliseconds(ms);
      }
    } else {
      return fail("hf3fs-meta-server: unknown argument '" + std::string(args[i]) + "'");
    }
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return fail("hf3fs-meta-server: --tls-cert and --tls-key go together");
  }
  return ParsedOptions{options, 0, {}};
}

}  // namespace hf3fs_meta::server
