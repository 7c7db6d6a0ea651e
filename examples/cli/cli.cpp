#include "cli.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "hf3fs_meta/client.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::cli {
namespace {

constexpr std::string_view kUsageText = R"(usage: hf3fs-meta [--url URL] [--token-file PATH] [--ca-file PATH] [--timeout-ms N] [--attempts N] [--json] COMMAND
  init RANK --pages N [--role worker|scheduler]
  allocate RANK KEY[:PREFIX]... [--ensure-pages N]
  confirm RANK [KEY=PAGE]... [--release PAGE]...     (at least one of them)
  exists KEY...
  locations RANK KEY... [--ensure-pages N]
  clear
  raw PATH BODY        post BODY as it is, and show how the SDK classifies the answer

  --url         the metadata server (default $HF3FS_META_URL, else http://127.0.0.1:18000)
  --token-file  send the file's content (without surrounding whitespace) as a bearer token
                (default: $HF3FS_META_TOKEN if set; for a server with --auth-token-file)
  --ca-file     for an https:// URL: the PEM file of the CA that signed the server's
                certificate (default: the system's CAs)
  --timeout-ms  the request timeout of one attempt (default 5000)
  --attempts    the retry policy's maximum attempts (default 4; a repeat after a
                re-initialization is always allowed)
  --json        print one JSON object on stdout
  --ensure-pages N  register the rank without sending anything, so that a "not initialized"
                answer re-initializes it with N pages and repeats the call
exit status: 0 success, 1 the server refused, 2 usage or invalid argument,
             3 no usable answer (connection, timeout, unavailable), 4 protocol error
)";

struct UsageError {
  std::string message;
};

template <class Int>
std::optional<Int> parse_int(std::string_view text) {
  Int value{};
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// The command line, split into global options, the command, its positionals and its options.
struct CommandLine {
  std::string url;
  std::optional<std::string> token_file;
  std::string ca_file;
  std::optional<std::int64_t> timeout_ms;
  std::optional<int> attempts;
  bool json = false;
  std::string command;
  std::vector<std::string> positionals;
  std::optional<std::int64_t> pages;
  std::optional<std::string> role;
  std::optional<std::int64_t> ensure_pages;
  std::vector<Page> releases;
};

std::variant<CommandLine, UsageError> parse(const std::vector<std::string>& args, const Environment& env) {
  CommandLine cl;
  cl.url = env.default_url.empty() ? "http://127.0.0.1:18000" : env.default_url;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      (void)name;
      return args[++i];
    };
    auto int_option = [&](std::string_view name, std::optional<std::int64_t>& slot) -> std::optional<UsageError> {
      auto text = value(name);
      if (!text) return UsageError{std::string(name) + " needs a value"};
      auto parsed = parse_int<std::int64_t>(*text);
      if (!parsed) return UsageError{std::string(name) + ": '" + *text + "' is not an integer"};
      slot = parsed;
      return std::nullopt;
    };
    if (arg == "--json") {
      cl.json = true;
    } else if (arg == "--url") {
      auto text = value(arg);
      if (!text) return UsageError{"--url needs a value"};
      cl.url = *text;
    } else if (arg == "--token-file") {
      cl.token_file = value(arg);
      if (!cl.token_file) return UsageError{"--token-file needs a value"};
    } else if (arg == "--ca-file") {
      auto text = value(arg);
      if (!text) return UsageError{"--ca-file needs a value"};
      cl.ca_file = *text;
    } else if (arg == "--timeout-ms") {
      if (auto e = int_option(arg, cl.timeout_ms)) return *e;
      if (*cl.timeout_ms <= 0) return UsageError{"--timeout-ms must be positive"};
    } else if (arg == "--attempts") {
      std::optional<std::int64_t> n;
      if (auto e = int_option(arg, n)) return *e;
      if (*n < 1 || *n > 100) return UsageError{"--attempts must be between 1 and 100"};
      cl.attempts = static_cast<int>(*n);
    } else if (arg == "--pages") {
      if (auto e = int_option(arg, cl.pages)) return *e;
    } else if (arg == "--ensure-pages") {
      if (auto e = int_option(arg, cl.ensure_pages)) return *e;
      if (*cl.ensure_pages <= 0) return UsageError{"--ensure-pages must be positive"};
    } else if (arg == "--role") {
      auto text = value(arg);
      if (!text) return UsageError{"--role needs a value"};
      cl.role = *text;
    } else if (arg == "--release") {
      std::optional<std::int64_t> page;
      if (auto e = int_option(arg, page)) return *e;
      cl.releases.push_back(*page);
    } else if (arg == "--help" || arg == "-h") {
      cl.command = "help";
    } else if (arg.size() > 1 && arg[0] == '-' && arg[1] == '-') {
      return UsageError{"unknown option " + arg};
    } else if (cl.command.empty()) {
      cl.command = arg;
    } else {
      cl.positionals.push_back(arg);
    }
  }
  return cl;
}

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

// An integer, or null when there is none.
void write_optional(Writer& w, const std::optional<std::int64_t>& value) {
  if (value) {
    w.Int64(*value);
  } else {
    w.Null();
  }
}

// What the observer saw of the one call a CLI run makes.
class CallRecorder final : public ClientObserver {
 public:
  void on_attempt(const AttemptEvent& e) override { attempts = e.attempt; }
  void on_reinitialize(const ReinitializeEvent&) override { reinitialized = true; }
  void on_success(const SuccessEvent& e) override {
    attempts = e.attempts;
    reinitialized = e.reinitialized;
  }
  int attempts = 0;
  bool reinitialized = false;
};

int exit_status_of(errc code) {
  switch (code) {
    case errc::invalid_argument:
      return kUsage;
    case errc::connection_failed:
    case errc::timeout:
    case errc::unavailable:
      return kNoAnswer;
    case errc::protocol_error:
      return kProtocol;
    default:
      return kServerRefused;
  }
}

int report_error(const CommandLine& cl, const Error& e, std::ostream& out, std::ostream& err) {
  if (cl.json) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("error");
    w.StartObject();
    w.Key("code");
    write_string(w, to_string(e.code));
    w.Key("status");
    write_optional(w, e.status);
    w.Key("operation");
    write_string(w, to_string(e.operation));
    w.Key("detail");
    write_string(w, e.detail);
    w.Key("cause");
    if (e.cause.empty()) {
      w.Null();
    } else {
      write_string(w, e.cause);
    }
    w.Key("rank");
    write_optional(w, e.rank);
    w.Key("sent");
    w.Bool(e.sent);
    w.Key("attempts");
    w.Int(e.attempts);
    w.Key("reinitialized");
    w.Bool(e.reinitialized);
    w.Key("request_id");
    write_string(w, e.request_id);
    w.Key("message");
    write_string(w, e.message());
    w.EndObject();
    w.EndObject();
    out << buf.GetString() << '\n';
  } else {
    err << "hf3fs-meta: " << to_string(e.code) << ": " << e.message() << '\n';
  }
  return exit_status_of(e.code);
}

// A success: `fields` writes the command's own members; attempts and reinitialized follow.
template <class Fields, class Text>
int report_success(const CommandLine& cl, const CallRecorder& calls, std::ostream& out, std::ostream& err,
                   Fields&& fields, Text&& text) {
  if (cl.json) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    fields(w);
    w.Key("attempts");
    w.Int(calls.attempts);
    w.Key("reinitialized");
    w.Bool(calls.reinitialized);
    w.EndObject();
    out << buf.GetString() << '\n';
  } else {
    text(out);
    if (calls.attempts > 1 || calls.reinitialized) {
      err << "(" << calls.attempts << " attempts" << (calls.reinitialized ? ", rank re-initialized" : "")
          << ")\n";
    }
  }
  return kSuccess;
}

void write_raw_body(Writer& w, const std::string& body) {
  if (body.empty()) {
    w.Null();
    return;
  }
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (doc.HasParseError()) {
    write_string(w, body);  // not JSON: show it as text
  } else {
    doc.Accept(w);
  }
}

int usage_error(const CommandLine* cl, const std::string& message, std::ostream& out, std::ostream& err) {
  if (cl != nullptr && cl->json) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("error");
    w.StartObject();
    w.Key("code");
    w.String("usage");
    w.Key("message");
    write_string(w, message);
    w.EndObject();
    w.EndObject();
    out << buf.GetString() << '\n';
  } else {
    err << "hf3fs-meta: " << message << "\n" << "run 'hf3fs-meta --help' for usage\n";
  }
  return kUsage;
}

std::optional<Rank> rank_arg(const CommandLine& cl) {
  if (cl.positionals.empty()) return std::nullopt;
  return parse_int<Rank>(cl.positionals[0]);
}

}  // namespace

int run(const std::vector<std::string>& args, const Environment& env, std::ostream& out, std::ostream& err) {
  auto parsed = parse(args, env);
  if (auto* u = std::get_if<UsageError>(&parsed)) return usage_error(nullptr, u->message, out, err);
  const CommandLine& cl = std::get<CommandLine>(parsed);
  if (cl.command.empty() || cl.command == "help") {
    (cl.command.empty() ? err : out) << kUsageText;
    return cl.command.empty() ? kUsage : kSuccess;
  }

  std::string token = env.default_token;
  if (cl.token_file) {
    std::string error;
    auto read = internal::read_token_file(*cl.token_file, error);
    if (!read) return usage_error(&cl, "--token-file: " + error, out, err);
    token = std::move(*read);
  }

  auto calls = std::make_shared<CallRecorder>();
  ClientOptions options;
  options.base_url = cl.url;
  options.auth_token = std::move(token);
  options.ca_file = cl.ca_file;
  options.transport = env.transport;
  options.observer = calls;
  if (cl.timeout_ms) options.request_timeout = std::chrono::milliseconds(*cl.timeout_ms);
  if (cl.attempts) options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(*cl.attempts);
  Client client(std::move(options));

  auto fail = [&](const std::string& message) { return usage_error(&cl, message, out, err); };
  auto need_rank = [&](const char* what) -> std::optional<Rank> {
    auto rank = rank_arg(cl);
    if (!rank) fail(std::string(what) + " needs RANK, an integer, first");
    return rank;
  };
  const std::vector<std::string> rest =
      cl.positionals.empty() ? std::vector<std::string>{}
                             : std::vector<std::string>(cl.positionals.begin() + 1, cl.positionals.end());
  if (cl.ensure_pages && cl.command != "allocate" && cl.command != "locations" && cl.command != "confirm") {
    return fail("--ensure-pages goes with allocate, locations or confirm");
  }
  // Registered before the call, so that a "not initialized" answer restores the rank and repeats.
  if (auto rank = rank_arg(cl); cl.ensure_pages && rank) client.register_rank(*rank, *cl.ensure_pages);

  if (cl.command == "init") {
    auto rank = need_rank("init");
    if (!rank) return kUsage;
    if (cl.positionals.size() != 1) return fail("init takes RANK only");
    Role role = Role::worker;
    if (cl.role) {
      if (*cl.role == "scheduler") {
        role = Role::scheduler;
      } else if (*cl.role != "worker") {
        return fail("--role must be worker or scheduler");
      }
    }
    if (!cl.pages && role == Role::worker) return fail("init needs --pages N");
    auto r = client.initialize(*rank, cl.pages.value_or(0), role);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err, [&](Writer& w) { w.Key("message"); write_string(w, r.value()); },
        [&](std::ostream& o) { o << r.value() << '\n'; });
  }

  if (cl.command == "allocate") {
    auto rank = need_rank("allocate");
    if (!rank) return kUsage;
    if (rest.empty()) return fail("allocate needs at least one KEY");
    std::vector<BlockKey> keys;
    for (const auto& item : rest) {
      auto colon = item.find(':');
      keys.push_back(colon == std::string::npos ? BlockKey{item, ""}
                                                : BlockKey{item.substr(0, colon), item.substr(colon + 1)});
    }
    auto r = client.allocate(*rank, keys);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err,
        [&](Writer& w) {
          w.Key("rank");
          w.Int64(*rank);
          w.Key("allocations");
          w.StartArray();
          for (const auto& a : r.value()) {
            w.StartObject();
            w.Key("key");
            write_string(w, a.key);
            w.Key("page");
            w.Int64(a.page);
            w.EndObject();
          }
          w.EndArray();
        },
        [&](std::ostream& o) {
          for (const auto& a : r.value()) {
            o << a.key << ' ' << (a.page == kNoPage ? std::string("none") : std::to_string(a.page)) << '\n';
          }
        });
  }

  if (cl.command == "confirm") {
    auto rank = need_rank("confirm");
    if (!rank) return kUsage;
    std::vector<Confirmation> confirmations;
    for (const auto& item : rest) {
      auto eq = item.rfind('=');
      auto page = eq == std::string::npos ? std::nullopt : parse_int<Page>(std::string_view(item).substr(eq + 1));
      if (!page) return fail("confirm takes KEY=PAGE, got '" + item + "'");
      confirmations.push_back({item.substr(0, eq), *page});
    }
    if (confirmations.empty() && cl.releases.empty()) return fail("confirm needs KEY=PAGE or --release PAGE");
    auto r = client.confirm_write(*rank, confirmations, cl.releases);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err, [&](Writer& w) { w.Key("ok"); w.Bool(true); },
        [&](std::ostream& o) { o << "ok\n"; });
  }

  if (cl.command == "exists") {
    if (cl.positionals.empty()) return fail("exists needs at least one KEY");
    auto r = client.batch_exists(cl.positionals);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err,
        [&](Writer& w) {
          w.Key("exists");
          w.StartArray();
          for (bool b : r.value()) w.Bool(b);
          w.EndArray();
        },
        [&](std::ostream& o) {
          for (std::size_t i = 0; i < cl.positionals.size(); ++i) {
            o << cl.positionals[i] << ' ' << (r.value()[i] ? "true" : "false") << '\n';
          }
        });
  }

  if (cl.command == "locations") {
    auto rank = need_rank("locations");
    if (!rank) return kUsage;
    if (rest.empty()) return fail("locations needs at least one KEY");
    auto r = client.get_locations(*rank, rest);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err,
        [&](Writer& w) {
          w.Key("locations");
          w.StartArray();
          for (const auto& p : r.value()) write_optional(w, p);
          w.EndArray();
        },
        [&](std::ostream& o) {
          for (std::size_t i = 0; i < rest.size(); ++i) {
            const auto& p = r.value()[i];
            o << rest[i] << ' ' << (p ? std::to_string(*p) : std::string("null")) << '\n';
          }
        });
  }

  if (cl.command == "clear") {
    if (!cl.positionals.empty()) return fail("clear takes no arguments");
    auto r = client.clear();
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err, [&](Writer& w) { w.Key("ok"); w.Bool(true); },
        [&](std::ostream& o) { o << "ok\n"; });
  }

  if (cl.command == "raw") {
    if (cl.positionals.size() != 2) return fail("raw takes PATH and BODY");
    auto r = client.raw(cl.positionals[0], cl.positionals[1]);
    if (!r) return report_error(cl, r.error(), out, err);
    return report_success(
        cl, *calls, out, err,
        [&](Writer& w) {
          w.Key("status");
          w.Int(r.value().status);
          w.Key("body");
          write_raw_body(w, r.value().body);
        },
        [&](std::ostream& o) {
          o << r.value().status << '\n';
          if (!r.value().body.empty()) o << r.value().body << '\n';
        });
  }

  return fail("unknown command '" + cl.command + "'");
}

}  // namespace hf3fs_meta::cli
