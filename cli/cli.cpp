#include "cli.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "internal/endpoint_url.hpp"
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::cli {
namespace {

constexpr std::string_view kFooter = R"(
A repeat after a re-initialization is always allowed, whatever --attempts says.
exit status: 0 success, 1 the server refused, 2 usage or invalid argument,
             3 no usable answer (connection, timeout, unavailable), 4 protocol error)";

template <class Int>
std::optional<Int> parse_int(std::string_view text) {
  Int value{};
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// The command line: the options every command takes, the command, and its own arguments.
struct CommandLine {
  std::optional<std::string> url;  // --url
  std::optional<std::string> token_file;
  std::string ca_file;
  std::optional<std::string> ns;  // --namespace
  std::optional<std::int64_t> timeout_ms;
  std::optional<int> attempts;
  std::optional<std::int64_t> deadline_ms;
  bool json = false;
  std::string command;
  std::optional<Rank> rank;
  std::vector<std::string> items;  // keys, KEY[:PREFIX] or KEY=PAGE
  std::string path, body;          // raw's
  std::optional<std::int64_t> pages;
  std::string role = "worker";
  std::optional<std::int64_t> ensure_pages;
  std::vector<Page> releases;
  bool why = false;       // exists --why
  std::string name;       // drop-namespace's NAME
};

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void write_key(Writer& w, std::string_view s) { w.Key(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

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

int usage_error(const CommandLine& cl, const std::string& message, std::ostream& out, std::ostream& err) {
  if (cl.json) {
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

// ---- the commands: each its options and its one call ----

// What a command's function gets: the command line, the client for its one call, what that call saw.
struct Call {
  const CommandLine& cl;
  Client& client;
  const CallRecorder& recorder;
  std::ostream& out;
  std::ostream& err;

  Rank rank() const { return cl.rank.value_or(0); }
  int usage(const std::string& message) const { return usage_error(cl, message, out, err); }
  int failed(const Error& e) const { return report_error(cl, e, out, err); }
  template <class Fields, class Text>
  int succeeded(Fields&& fields, Text&& text) const {
    return report_success(cl, recorder, out, err, std::forward<Fields>(fields), std::forward<Text>(text));
  }
  // One answer per key (exists, delete): a list in JSON, "KEY WORD" lines in text.
  int per_key(const std::vector<bool>& answers, const char* field, const char* yes, const char* no) const {
    return succeeded(
        [&](Writer& w) {
          w.Key(field);
          w.StartArray();
          for (bool b : answers) w.Bool(b);
          w.EndArray();
        },
        [&](std::ostream& o) {
          for (std::size_t i = 0; i < cl.items.size(); ++i) o << cl.items[i] << ' ' << (answers[i] ? yes : no) << '\n';
        });
  }
  int ok() const {
    return succeeded([](Writer& w) { w.Key("ok"); w.Bool(true); }, [](std::ostream& o) { o << "ok\n"; });
  }
};

void rank_argument(CLI::App& sub, CommandLine& cl) { sub.add_option("RANK", cl.rank, "the rank")->required(); }
void keys_argument(CLI::App& sub, CommandLine& cl) { sub.add_option("KEY", cl.items, "a key")->required(); }
void ensure_pages_option(CLI::App& sub, CommandLine& cl) {
  sub.add_option("--ensure-pages", cl.ensure_pages,
                 "register the rank without sending anything, so that a \"not initialized\" answer "
                 "re-initializes it with N pages and repeats the call")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
}
void no_options(CLI::App&, CommandLine&) {}

void init_options(CLI::App& sub, CommandLine& cl) {
  rank_argument(sub, cl);
  sub.add_option("--pages", cl.pages, "the rank's pages (a worker needs them)");
  sub.add_option("--role", cl.role, "worker (default) or scheduler")->check(CLI::IsMember({"worker", "scheduler"}));
}
int init(const Call& c) {
  const Role role = c.cl.role == "scheduler" ? Role::scheduler : Role::worker;
  if (!c.cl.pages && role == Role::worker) return c.usage("init needs --pages N");
  auto r = c.client.initialize(c.rank(), c.cl.pages.value_or(0), role);
  if (!r) return c.failed(r.error());
  return c.succeeded([&](Writer& w) { w.Key("message"); write_string(w, r.value()); },
                     [&](std::ostream& o) { o << r.value() << '\n'; });
}

void allocate_options(CLI::App& sub, CommandLine& cl) {
  rank_argument(sub, cl);
  sub.add_option("KEY", cl.items, "KEY or KEY:PREFIX")->required();
  ensure_pages_option(sub, cl);
}
int allocate(const Call& c) {
  std::vector<BlockKey> keys;
  for (const auto& item : c.cl.items) {
    auto colon = item.find(':');
    keys.push_back(colon == std::string::npos ? BlockKey{item, ""}
                                              : BlockKey{item.substr(0, colon), item.substr(colon + 1)});
  }
  auto r = c.client.allocate(c.rank(), keys);
  if (!r) return c.failed(r.error());
  return c.succeeded(
      [&](Writer& w) {
        w.Key("rank");
        w.Int64(c.rank());
        w.Key("allocations");
        w.StartArray();
        for (std::size_t i = 0; i < keys.size(); ++i) {
          w.StartObject();
          w.Key("key");
          write_string(w, keys[i].key);
          w.Key("page");
          w.Int64(r.value()[i]);
          w.EndObject();
        }
        w.EndArray();
      },
      [&](std::ostream& o) {
        for (std::size_t i = 0; i < keys.size(); ++i) {
          const Page page = r.value()[i];
          o << keys[i].key << ' ' << (page == kNoPage ? std::string("none") : std::to_string(page)) << '\n';
        }
      });
}

void confirm_options(CLI::App& sub, CommandLine& cl) {
  rank_argument(sub, cl);
  sub.add_option("CONFIRMATION", cl.items, "KEY=PAGE: a key written to a page");
  sub.add_option("--release", cl.releases, "a page to give back (repeatable)");
  ensure_pages_option(sub, cl);
}
int confirm(const Call& c) {
  std::vector<Confirmation> confirmations;
  for (const auto& item : c.cl.items) {
    auto eq = item.rfind('=');
    auto page = eq == std::string::npos ? std::nullopt : parse_int<Page>(std::string_view(item).substr(eq + 1));
    if (!page) return c.usage("confirm takes KEY=PAGE, got '" + item + "'");
    confirmations.push_back({item.substr(0, eq), *page});
  }
  if (confirmations.empty() && c.cl.releases.empty()) return c.usage("confirm needs KEY=PAGE or --release PAGE");
  auto r = c.client.confirm_write(c.rank(), confirmations, c.cl.releases);
  if (!r) return c.failed(r.error());
  return c.ok();
}

void exists_options(CLI::App& sub, CommandLine& cl) {
  keys_argument(sub, cl);
  sub.add_flag("--why", cl.why,
               "then ask the server why (POST /keys/status, a reference-server extension): the ranks that "
               "confirmed each key and the tp_world_size it needs");
}

// The ranks as "0,1,2".
std::string joined(const std::vector<Rank>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}
// "rank 0", "ranks 0,1", "no rank".
std::string rank_text(const std::vector<Rank>& ranks) {
  if (ranks.empty()) return "no rank";
  return (ranks.size() == 1 ? "rank " : "ranks ") + joined(ranks);
}

void write_ranks(Writer& w, const std::vector<Rank>& ranks) {
  w.StartArray();
  for (Rank rank : ranks) w.Int64(rank);
  w.EndArray();
}

// exists --why: the batch_exists answer, then key_status's for the same keys, side by side.
int exists_why(const Call& c, const std::vector<bool>& exists) {
  auto why = c.client.key_status(c.cl.items);
  if (!why) return c.failed(why.error());
  const KeyStatusAnswer& a = why.value();
  return c.succeeded(
      [&](Writer& w) {
        w.Key("exists");
        w.StartArray();
        for (bool b : exists) w.Bool(b);
        w.EndArray();
        w.Key("why");  // POST /keys/status' answer, under its names
        w.StartObject();
        w.Key("ranks_initialized");
        w.Uint64(a.ranks_initialized);
        w.Key("status");
        w.StartArray();
        for (const auto& s : a.status) {
          if (!s) {
            w.Null();
            continue;
          }
          w.StartObject();
          w.Key("ranks");
          write_ranks(w, s->ranks);
          w.Key("tp_world_size");
          w.Int64(s->tp_world_size);
          w.Key("complete");
          w.Bool(s->complete);
          w.EndObject();
        }
        w.EndArray();
        w.EndObject();
      },
      [&](std::ostream& o) {
        for (std::size_t i = 0; i < c.cl.items.size(); ++i) {
          o << c.cl.items[i] << ' ' << (exists[i] ? "true" : "false") << ": ";
          const auto& s = a.status[i];
          if (!s) {
            o << "unknown\n";
          } else {
            o << "confirmed on " << rank_text(s->ranks) << "; needs tp_world_size " << s->tp_world_size << '\n';
          }
        }
      });
}

int exists(const Call& c) {
  auto r = c.client.batch_exists(c.cl.items);
  if (!r) return c.failed(r.error());
  if (c.cl.why) return exists_why(c, r.value());
  return c.per_key(r.value(), "exists", "true", "false");
}

void locations_options(CLI::App& sub, CommandLine& cl) {
  rank_argument(sub, cl);
  keys_argument(sub, cl);
  ensure_pages_option(sub, cl);
}
int locations(const Call& c) {
  auto r = c.client.get_locations(c.rank(), c.cl.items);
  if (!r) return c.failed(r.error());
  return c.succeeded(
      [&](Writer& w) {
        w.Key("locations");
        w.StartArray();
        for (const auto& p : r.value()) write_optional(w, p);
        w.EndArray();
      },
      [&](std::ostream& o) {
        for (std::size_t i = 0; i < c.cl.items.size(); ++i) {
          const auto& p = r.value()[i];
          o << c.cl.items[i] << ' ' << (p ? std::to_string(*p) : std::string("null")) << '\n';
        }
      });
}

int clear(const Call& c) {
  auto r = c.client.clear();
  if (!r) return c.failed(r.error());
  return c.ok();
}

int delete_keys(const Call& c) {
  auto r = c.client.delete_keys(c.cl.items);
  if (!r) return c.failed(r.error());
  return c.per_key(r.value(), "deleted", "deleted", "absent");
}

int stats(const Call& c) {
  auto r = c.client.stats();
  if (!r) return c.failed(r.error());
  const StateStats& st = r.value();
  // The figures under GET /stats' names (protocol.hpp's tables).
  return c.succeeded(
      [&](Writer& w) {
        w.Key("ranks");
        w.StartArray();
        for (const auto& [rank_of, rs] : st.ranks) {
          w.StartObject();
          w.Key("rank");
          w.Int64(rank_of);
          for (const auto& [name, member] : protocol::kRankStatsFields) {
            write_key(w, name);
            w.Int64(rs.*member);
          }
          write_key(w, protocol::kKeptOnReleaseField);
          w.Uint64(rs.kept_on_release);
          w.EndObject();
        }
        w.EndArray();
        for (const auto& [name, member, counter, help] : protocol::kStateStatsFields) {
          write_key(w, name);
          w.Uint64(st.*member);
        }
      },
      [&](std::ostream& o) {
        for (const auto& [rank_of, rs] : st.ranks) {
          o << "rank " << rank_of;
          for (const auto& [name, member] : protocol::kRankStatsFields) o << ' ' << name << ' ' << rs.*member;
          o << ' ' << protocol::kKeptOnReleaseField << ' ' << rs.kept_on_release << '\n';
        }
        for (const auto& [name, member, counter, help] : protocol::kStateStatsFields) o << name << ' ' << st.*member << '\n';
      });
}

int drop_rank(const Call& c) {
  const Rank rank = c.rank();
  auto r = c.client.drop_rank(rank);
  if (!r) return c.failed(r.error());
  const DropOutcome& d = r.value();
  return c.succeeded(
      [&](Writer& w) {
        w.Key("dropped");
        w.Bool(d.dropped);
        w.Key("pages");
        w.Int64(d.pages);
        w.Key("mappings");
        w.Uint64(d.mappings);
        w.Key("keys_removed");
        w.Uint64(d.keys_removed);
      },
      [&](std::ostream& o) {
        if (!d.dropped) {
          o << "rank " << rank << " did not exist\n";
        } else {
          o << "dropped rank " << rank << ": " << d.pages << " pages, " << d.mappings << " key mappings, "
            << d.keys_removed << " keys removed\n";
        }
      });
}

// A table of every namespace: name, ranks, pages, keys (columns as wide as their widest cell).
int namespaces(const Call& c) {
  auto r = c.client.namespaces();
  if (!r) return c.failed(r.error());
  const auto& list = r.value();
  return c.succeeded(
      [&](Writer& w) {
        w.Key("namespaces");
        w.StartArray();
        for (const NamespaceSummary& n : list) {
          w.StartObject();
          w.Key("name");
          write_string(w, n.name);
          w.Key("ranks");
          write_ranks(w, n.ranks);
          w.Key("pages");
          w.Int64(n.pages);
          w.Key("keys");
          w.Uint64(n.keys);
          w.EndObject();
        }
        w.EndArray();
      },
      [&](std::ostream& o) {
        std::vector<std::array<std::string, 4>> rows{{"NAME", "RANKS", "PAGES", "KEYS"}};
        for (const NamespaceSummary& n : list) {
          rows.push_back({n.name, n.ranks.empty() ? "-" : joined(n.ranks), std::to_string(n.pages),
                          std::to_string(n.keys)});
        }
        std::array<std::size_t, 4> width{};
        for (const auto& row : rows) {
          for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
        }
        for (const auto& row : rows) {
          std::string line;
          for (std::size_t i = 0; i < row.size(); ++i) {
            line += row[i];
            if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
          }
          o << line << '\n';
        }
      });
}

void drop_namespace_options(CLI::App& sub, CommandLine& cl) {
  sub.add_option("NAME", cl.name, "the namespace")->required();
}
int drop_namespace(const Call& c) {
  auto r = c.client.drop_namespace(c.cl.name);
  if (!r) return c.failed(r.error());
  const NamespaceDropOutcome& d = r.value();
  return c.succeeded(
      [&](Writer& w) {
        w.Key("namespace");
        write_string(w, c.cl.name);
        w.Key("dropped");
        w.Bool(d.dropped);
        w.Key("ranks");
        w.Uint64(d.ranks);
        w.Key("pages");
        w.Int64(d.pages);
        w.Key("keys_removed");
        w.Uint64(d.keys_removed);
      },
      [&](std::ostream& o) {
        if (!d.dropped) {
          o << "namespace " << c.cl.name << " did not exist\n";
        } else {
          o << "dropped namespace " << c.cl.name << ": " << d.ranks << " ranks, " << d.pages << " pages, "
            << d.keys_removed << " keys removed\n";
        }
      });
}

void raw_options(CLI::App& sub, CommandLine& cl) {
  sub.add_option("PATH", cl.path, "the path to post to")->required();
  sub.add_option("BODY", cl.body, "the body to post")->required();
}
int raw(const Call& c) {
  auto r = c.client.raw(c.cl.path, c.cl.body);
  if (!r) return c.failed(r.error());
  return c.succeeded(
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

// The commands, in the order --help lists them. Each is a CLI11 subcommand with its own options:
// an option given to another command is a usage error.
struct Command {
  const char* name;
  const char* description;
  void (*options)(CLI::App&, CommandLine&);
  int (*run)(const Call&);
};
constexpr Command kCommands[] = {
    {"init", "initialize a rank", init_options, init},
    {"allocate", "allocate a page for each key", allocate_options, allocate},
    {"confirm", "confirm written pages and release others (at least one of them)", confirm_options, confirm},
    {"exists", "whether each key is complete (--why: and why not)", exists_options, exists},
    {"locations", "the rank's page of each complete key", locations_options, locations},
    {"clear", "the server forgets every rank and key of the namespace (--namespace; else the default one)",
     no_options, clear},
    {"delete", "delete keys from every lookup (a reference-server extension)", keys_argument, delete_keys},
    {"stats", "pages by state per rank, keys, evictions, deletions, reclaims (a reference-server extension)",
     no_options, stats},
    {"drop-rank",
     "forget the rank, its pages and its keys' mappings on it (reference server; for a redeploy with other "
     "num_pages or fewer ranks: README, \"Durability\")",
     rank_argument, drop_rank},
    {"namespaces", "every namespace with its ranks, pages and keys (reference server; an operator's command)",
     no_options, namespaces},
    {"drop-namespace",
     "forget the namespace with its ranks, pages and keys (reference server; an operator's command; the "
     "default one cannot be dropped: clear empties it)",
     drop_namespace_options, drop_namespace},
    {"raw", "post BODY as it is, and show how the SDK classifies the answer", raw_options, raw},
};

// The options of the whole program, then the commands'. The program's may come before or after the
// command.
void define(CLI::App& app, CommandLine& cl) {
  app.add_option("--url", cl.url,
                 "the metadata server (default $HF3FS_META_URL, else http://127.0.0.1:18000); the members of a "
                 "highly available service as URL,URL,...: the call goes to the leader a member names, or to the "
                 "next URL")
      ->type_name("URL[,URL...]");
  app.add_option("--token-file", cl.token_file,
                 "send the file's content (without surrounding whitespace) as a bearer token "
                 "(default: $HF3FS_META_TOKEN if set; for a server with --auth-token-file); visible ASCII "
                 "only (0x21-0x7E), else refused before anything is sent");
  app.add_option("--ca-file", cl.ca_file,
                 "for an https:// URL: the PEM file of the CA that signed the server's certificate "
                 "(default: the system's CAs)");
  app.add_option("--namespace", cl.ns,
                 "act in namespace NAME: its ranks, pages and keys only (default: $HF3FS_META_NAMESPACE if set, "
                 "else the default namespace, all a server without namespaces has); 1 to 64 characters of "
                 "A-Z, a-z, 0-9, '.', '_' and '-', else refused before anything is sent")
      ->type_name("NAME");
  app.add_option("--timeout-ms", cl.timeout_ms, "the request timeout of one attempt (default 5000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--attempts", cl.attempts,
                 "the retry policy's maximum attempts (default 4); a refused connection (the request never "
                 "left) is repeated until the deadline whatever the count")
      ->check(CLI::Range(1, 100));
  app.add_option("--deadline-ms", cl.deadline_ms, "the whole call's deadline, retries included (default 10000)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_flag("--json", cl.json, "print one JSON object on stdout");
  app.set_version_flag("--version", std::string("hf3fs-meta ") + HF3FS_META_VERSION, "print the version and exit");
  app.require_subcommand(1);
  app.fallthrough();  // inherited by the commands: the options above are accepted after them too
  app.footer(std::string(kFooter));
  for (const Command& command : kCommands) command.options(*app.add_subcommand(command.name, command.description), cl);
}

// Parses args into cl; an exit status when the run ends here (help, version, a usage error).
std::optional<int> parse(const std::vector<std::string>& args, CommandLine& cl, std::ostream& out, std::ostream& err) {
  CLI::App app("Poke a live HF3FS metadata server.", "hf3fs-meta");
  define(app, cl);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them reversed
  } catch (const CLI::CallForHelp&) {
    out << app.help();  // the command's own, when one was named
    return kSuccess;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kSuccess;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << '\n';
    return kSuccess;
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes are 100 and up; every usage error here exits 2.
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      return usage_error(cl, "unknown command '" + app.remaining().front() + "'", out, err);
    }
    return usage_error(cl, e.what(), out, err);
  }
  cl.command = app.get_subcommands().front()->get_name();
  return std::nullopt;
}

// The client of the run's one call, or the usage error that refuses the URL, the token or the
// namespace before anything is sent.
std::variant<ClientOptions, std::string> client_options(const CommandLine& cl, const Environment& env) {
  std::string token = env.default_token;
  if (cl.token_file) {
    std::string error;
    auto read = internal::read_token_file(*cl.token_file, error);
    if (!read) return "--token-file: " + error;
    token = std::move(*read);
  } else if (auto problem = internal::token_problem(token)) {
    // Refused before anything is sent: a CR or LF in it would add headers to the request.
    return "$HF3FS_META_TOKEN: " + *problem;
  }
  // The flag wins over the environment; empty (either) is the default namespace: no header.
  const std::string& ns = cl.ns ? *cl.ns : env.default_namespace;
  if (!ns.empty()) {
    if (auto problem = internal::namespace_problem(ns)) {
      return std::string(cl.ns ? "--namespace" : "$HF3FS_META_NAMESPACE") + " " + *problem;
    }
  }
  // The flag wins over the environment; either may list several endpoints.
  const char* const url_from = cl.url ? "--url" : "$HF3FS_META_URL";
  const std::string& url =
      cl.url ? *cl.url : (env.default_url.empty() ? ClientOptions().base_url : env.default_url);
  std::vector<std::string> endpoints = split_endpoints(url);
  if (auto problem = internal::endpoint_list_problem(endpoints, url_from)) return *problem;
  ClientOptions options;
  options.endpoints = std::move(endpoints);
  options.auth_token = std::move(token);
  options.namespace_name = ns;
  options.ca_file = cl.ca_file;
  options.transport = env.transport;
  if (cl.timeout_ms) options.request_timeout = std::chrono::milliseconds(*cl.timeout_ms);
  if (cl.attempts || cl.deadline_ms) {
    const LimitedAttemptsRetryPolicy defaults;
    options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(
        cl.attempts.value_or(defaults.max_attempts()),
        cl.deadline_ms ? std::chrono::milliseconds(*cl.deadline_ms) : defaults.deadline());
  }
  return options;
}

}  // namespace

int run(const std::vector<std::string>& args, const Environment& env, std::ostream& out, std::ostream& err) {
  CommandLine cl;
  if (auto parsed = parse(args, cl, out, err)) return *parsed;

  auto options = client_options(cl, env);
  if (auto* refused = std::get_if<std::string>(&options)) return usage_error(cl, *refused, out, err);
  auto recorder = std::make_shared<CallRecorder>();
  std::get<ClientOptions>(options).observer = recorder;
  Client client(std::move(std::get<ClientOptions>(options)));
  // Registered before the call, so that a "not initialized" answer restores the rank and repeats.
  if (cl.ensure_pages) client.register_rank(*cl.rank, *cl.ensure_pages);

  const Call call{cl, client, *recorder, out, err};
  for (const Command& command : kCommands) {
    if (cl.command == command.name) return command.run(call);
  }
  return usage_error(cl, "unknown command '" + cl.command + "'", out, err);  // a subcommand without its row
}

}  // namespace hf3fs_meta::cli
