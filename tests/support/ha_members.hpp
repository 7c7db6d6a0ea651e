// HaMembers: hf3fs-meta-server processes run as the members of one HA cluster (--ha-etcd)
// on a test's etcd, each with a data dir and a stderr log of its own, and what a test asks of them:
// a member's GET /healthz, the one member that leads, a wait for a role, the protocol's bodies
// and answers through the SDK's own codec (hf3fs_meta/protocol.hpp), requests with headers of the
// test's (a token, a request id), and the figures of /metrics. Every wait is bounded; the
// destructor stops every member still running (by its PID, through ServerProcess), a stopped one
// continued first so that it can take its SIGTERM.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "hf3fs_meta/protocol.hpp"
#include "support/etcd_cluster.hpp"
#include "support/raw_http.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {

// What GET /healthz said. status 0: no answer in time (`body` then says why).
struct HaHealth {
  long status = 0;
  std::string body;
  std::string state;   // the "status" field: "ok", "degraded"
  std::string role;    // "leader", "standby", "candidate"; empty when not said
  std::string leader;  // the leader's URL the member names; empty when none
  std::uint64_t applied_seq = 0;
};

// An answer's JSON body as a DOM (HasParseError() when it is none). Parsed by size: RapidJSON's SSE2
// scanner reads whole 16-byte blocks, past the end of a NUL-terminated string.
inline rapidjson::Document parse_json(std::string_view text) {
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  return d;
}

inline HaHealth parse_ha_health(const HttpAnswer& answer) {
  HaHealth h;
  h.status = answer.status;
  h.body = answer.status != 0 ? answer.body : answer.error;
  const rapidjson::Document d = parse_json(answer.body);
  if (d.HasParseError() || !d.IsObject()) return h;
  if (auto it = d.FindMember("status"); it != d.MemberEnd() && it->value.IsString()) h.state = it->value.GetString();
  if (auto it = d.FindMember("role"); it != d.MemberEnd() && it->value.IsString()) h.role = it->value.GetString();
  if (auto it = d.FindMember("leader"); it != d.MemberEnd() && it->value.IsString()) h.leader = it->value.GetString();
  if (auto it = d.FindMember("applied_seq"); it != d.MemberEnd() && it->value.IsUint64()) {
    h.applied_seq = it->value.GetUint64();
  }
  return h;
}

// ---- the protocol's bodies and answers, through the SDK's codec ---------------------------------

inline std::vector<BlockKey> block_keys(const std::vector<std::string>& keys) {
  return std::vector<BlockKey>(keys.begin(), keys.end());
}
// {"keys": [...]}: batch_exists, keys/status and keys/delete alike.
inline std::string keys_body(const std::vector<std::string>& keys) { return protocol::encode_batch_exists_request(keys); }
inline std::string allocate_body(Rank rank, const std::vector<std::string>& keys) {
  return protocol::encode_allocate_request(rank, block_keys(keys));
}
inline std::string confirm_body(Rank rank, const std::vector<std::string>& keys, const std::vector<Page>& pages) {
  std::vector<Confirmation> confirmations;
  for (std::size_t i = 0; i < keys.size() && i < pages.size(); ++i) confirmations.push_back({keys[i], pages[i]});
  return protocol::encode_confirm_write_request(rank, confirmations, {});
}
inline std::string locations_body(Rank rank, const std::vector<std::string>& keys) {
  return protocol::encode_get_locations_request(rank, keys);
}
// An allocate answer's pages for `keys`; empty when it is not one.
inline std::vector<Page> allocated_pages(std::string_view body, const std::vector<std::string>& keys) {
  const auto sent = block_keys(keys);
  auto pages = protocol::decode_allocate_response(body, sent);
  return pages ? std::move(pages).value() : std::vector<Page>{};
}
// How many of `n` keys a batch_exists answer says exist; -1 when it is not such an answer.
inline int count_exists(std::string_view body, std::size_t n) {
  const auto exists = protocol::decode_batch_exists_response(body, n);
  return exists ? static_cast<int>(std::count(exists.value().begin(), exists.value().end(), true)) : -1;
}
// A get_locations answer's pages for `n` keys, kNoPage for none; empty when it is not one.
inline std::vector<Page> located_pages(std::string_view body, std::size_t n) {
  const auto located = protocol::decode_get_locations_response(body, n);
  std::vector<Page> out;
  if (located) {
    for (const auto& page : located.value()) out.push_back(page.value_or(kNoPage));
  }
  return out;
}

// ---- requests to a member ---------------------------------------------------------------------

// Extra request headers: `Authorization` for a member run with --auth-token-file, say.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

inline RawResponse post(ServerProcess& server, std::string_view target, std::string_view body,
                        const HttpHeaders& headers = {}) {
  return raw_request(server.host(), server.port(), "POST", target, body, headers);
}

// A key made complete (allocated, then confirmed) on rank 0. True when both steps were
// acknowledged; a step refused says why in `failure`. Its page in `page`, when given.
inline bool write_key(ServerProcess& leader, const std::string& key, std::string* failure = nullptr,
                      const HttpHeaders& headers = {}, Page* page = nullptr) {
  const auto allocated = post(leader, "/keys/batch_allocate", allocate_body(0, {key}), headers);
  const auto pages = allocated.status == 200 ? allocated_pages(allocated.body, {key}) : std::vector<Page>{};
  const Page got = pages.empty() ? kNoPage : pages.front();
  if (got == kNoPage) {
    if (failure) *failure = "allocate " + key + ": " + std::to_string(allocated.status) + " " + allocated.body;
    return false;
  }
  const auto confirmed = post(leader, "/keys/confirm_write", confirm_body(0, {key}, {got}), headers);
  if (confirmed.status != 204) {
    if (failure) *failure = "confirm " + key + ": " + std::to_string(confirmed.status) + " " + confirmed.body;
    return false;
  }
  if (page) *page = got;
  return true;
}

// The value of the unlabelled counter or gauge `name` in a /metrics text (-1: not there).
inline double metric_value(const std::string& text, const std::string& name) {
  const std::string line_start = "\n" + name + " ";
  const auto at = text.find(line_start);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + line_start.size()));
}

// The last `lines` lines of a text file.
inline std::string file_tail(const std::string& path, std::size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out.append(all[i]).append("\n");
  return out;
}

// The first `lines` lines of the first sanitizer report in the text file `path` (a server's stderr);
// empty when it holds none. A member's exit code can miss a report: SIGKILL (a test's crash) ends it
// with no code of the sanitizer's, and one that a report ended (TSAN_OPTIONS=halt_on_error=1) and a
// test then kills reads as killed. Its stderr, appended across restarts, keeps every report.
inline std::string sanitizer_report(const std::string& path, std::size_t lines = 40) {
  static constexpr std::string_view kMarks[] = {"ThreadSanitizer:", "AddressSanitizer:", "LeakSanitizer:",
                                                "runtime error:"};  // the last UndefinedBehaviorSanitizer's
  std::ifstream in(path);
  std::string out;
  std::size_t left = 0;
  for (std::string line; left != 1 && std::getline(in, line);) {
    if (left == 0 && std::none_of(std::begin(kMarks), std::end(kMarks),
                                  [&](std::string_view mark) { return line.find(mark) != std::string::npos; })) {
      continue;
    }
    left = left == 0 ? lines : left - 1;
    out.append(line).append("\n");
  }
  return out;
}

class HaMembers {
 public:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  // Below the lease window's margin (ha::LeaseWindow, 300 ms): see leader().
  static constexpr std::chrono::milliseconds kTwoLeadersWindow{250};

  // Members of cluster `cluster` on the etcd client URLs `etcd` (comma separated), with a lease of
  // `lease` (--ha-lease-ms).
  HaMembers(std::string etcd, std::string cluster, std::chrono::milliseconds lease)
      : etcd_(std::move(etcd)), cluster_(std::move(cluster)), lease_(lease) {}
  // Stops what still runs. A sanitizer's report in a member's stderr fails the test even when the
  // test did not look at stop_all()'s answer.
  ~HaMembers() {
    stop_running();
    for (const auto& m : members_) {
      if (m->report_told) continue;
      if (const std::string report = sanitizer_report(m->log); !report.empty()) {
        ADD_FAILURE() << m->name << "'s stderr holds a sanitizer's report:\n" << report;
      }
    }
  }
  HaMembers(const HaMembers&) = delete;
  HaMembers& operator=(const HaMembers&) = delete;

  // Starts a member with an empty data dir of its own and `extra` arguments; its index. `etcd`: the
  // etcd client URLs of this member alone, instead of the cluster's. `placement`: where it listens
  // and runs (a network namespace of a NetLab), loopback by default.
  std::size_t add(const std::vector<std::string>& extra = {}, const std::string& etcd = {},
                  const Placement& placement = {}) {
    auto m = std::make_unique<Member>();
    m->name = std::string("m").append(std::to_string(members_.size()));
    m->log = (logs_.path() / std::string(m->name).append(".log")).string();
    std::vector<std::string> args{"--data-dir",  m->data.str(), "--ha-etcd",     etcd.empty() ? etcd_ : etcd,
                                  "--ha-cluster", cluster_,     "--ha-name",     m->name,
                                  "--ha-lease-ms", std::to_string(lease_.count())};
    args.insert(args.end(), extra.begin(), extra.end());
    // Kept before it starts, so that logs() shows the stderr of a member that would not start.
    members_.push_back(std::move(m));
    members_.back()->process = std::make_unique<ServerProcess>(std::move(args), members_.back()->log, placement);
    return members_.size() - 1;
  }

  std::size_t size() const noexcept { return members_.size(); }
  ServerProcess& process(std::size_t i) { return *members_.at(i)->process; }
  std::string url(std::size_t i) { return process(i).base_url(); }
  const std::string& name(std::size_t i) const { return members_.at(i)->name; }
  const std::string& log_path(std::size_t i) const { return members_.at(i)->log; }
  const std::filesystem::path& data_dir(std::size_t i) const { return members_.at(i)->data.path(); }

  HaHealth health(std::size_t i, std::chrono::milliseconds timeout = std::chrono::milliseconds(1000)) {
    return parse_ha_health(http_call(url(i) + "/healthz", "", timeout));
  }

  // The one running member that says it leads, of those `among` (every member when empty); kNone if
  // none does. Two that say so in one pass fail the test (never two leaders): a member says
  // "leader" only while its lease is surely alive, and another can win only once that lease is gone
  // in etcd, a margin later, so two answers closer than that cannot both be true. (A pass slower
  // than that proves nothing, and is asked again.)
  std::size_t leader(const std::vector<std::size_t>& among = {}) {
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::pair<std::size_t, std::string>> leaders;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!among.empty() && std::find(among.begin(), among.end(), i) == among.end()) continue;
      if (!process(i).running()) continue;
      HaHealth h = health(i);
      if (h.role == "leader") leaders.emplace_back(i, std::move(h.body));
    }
    if (leaders.size() == 1) return leaders.front().first;
    if (leaders.size() > 1 && std::chrono::steady_clock::now() - started < kTwoLeadersWindow) {
      std::string said;
      for (const auto& [i, body] : leaders) said.append("\n  ").append(name(i)).append(": ").append(body);
      ADD_FAILURE() << "two members say they lead at once:" << said;
    }
    return kNone;
  }

  // Waits up to `timeout` until exactly one member of `among` leads; its index, or kNone.
  std::size_t wait_leader(std::chrono::milliseconds timeout, const std::vector<std::size_t>& among = {}) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (const auto found = leader(among); found != kNone) return found;
      if (std::chrono::steady_clock::now() >= deadline) return kNone;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Waits up to `timeout` until member i says `role` (and names `leader`, unless empty); what it
  // said last.
  HaHealth wait_role(std::size_t i, const std::string& role, const std::string& leader,
                     std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      HaHealth h = health(i);
      if (h.role == role && (leader.empty() || h.leader == leader)) return h;
      if (std::chrono::steady_clock::now() >= deadline) return h;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Waits up to `timeout` until member i is a standby of `leader` that has applied `seq`; what it
  // said last.
  HaHealth wait_standby_at(std::size_t i, const std::string& leader, std::uint64_t seq,
                           std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      HaHealth h = health(i);
      if (h.role == "standby" && h.leader == leader && h.applied_seq == seq) return h;
      if (std::chrono::steady_clock::now() >= deadline) return h;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // SIGTERM to every member still running (continued first, should it be stopped); the members that
  // did not exit with 0 (a sanitizer's report, a crash, a hang), with what they ended with, and those
  // whose stderr holds a sanitizer's report (from any of their runs), with its first lines. Empty:
  // each exited cleanly and no sanitizer reported anything.
  std::string stop_all() {
    std::string unclean = stop_running();
    for (auto& m : members_) {
      if (const std::string report = sanitizer_report(m->log); !report.empty()) {
        unclean.append(m->name).append("'s stderr holds a sanitizer's report:\n").append(report);
        m->report_told = true;
      }
    }
    return unclean;
  }

  // Every member's stderr, the last `lines` lines of each: for a failure's message.
  std::string logs(std::size_t lines = 40) const {
    std::string out;
    for (const auto& m : members_) out.append("---- ").append(m->name).append("'s stderr:\n").append(file_tail(m->log, lines));
    return out;
  }

 private:
  // stop_all()'s first half: the members that did not exit with 0 on SIGTERM.
  std::string stop_running() {
    std::string unclean;
    for (auto& m : members_) {
      if (!m->process || !m->process->running()) continue;
      ::kill(m->process->pid(), SIGCONT);
      if (const int code = m->process->terminate(); code != 0) {
        unclean.append(m->name).append(" ended with ").append(std::to_string(code)).append("\n");
      }
    }
    return unclean;
  }

  struct Member {
    std::string name;
    TempDir data;
    std::string log;
    std::unique_ptr<ServerProcess> process;
    bool report_told = false;  // stop_all() returned its sanitizer's report
  };

  std::string etcd_;
  std::string cluster_;
  std::chrono::milliseconds lease_;
  TempDir logs_;
  std::vector<std::unique_ptr<Member>> members_;
};

// A counter or gauge of member i's /metrics (-1: not there, or no answer).
inline double metric(HaMembers& members, std::size_t i, const std::string& name, const HttpHeaders& headers = {}) {
  const ServerProcess& member = members.process(i);
  try {
    return metric_value(raw_request(member.host(), member.port(), "GET", "/metrics", {}, headers).body, name);
  } catch (const std::runtime_error&) {  // not listening
    return -1;
  }
}

}  // namespace hf3fs_meta::testing
