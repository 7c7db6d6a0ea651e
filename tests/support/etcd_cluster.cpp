#include "support/etcd_cluster.hpp"

#include <curl/curl.h>
#include <rapidjson/document.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/child_process.hpp"

namespace hf3fs_meta::testing {
namespace {

// Ports are drawn below the kernel's ephemeral range (32768 up by default), where port-0 binds (the
// hf3fs-meta-server tests) and outgoing connections take theirs, so that they are rarely taken
// between the probe and etcd's bind. scripts/with_etcd draws from the same range.
constexpr int kFirstPort = 20000;
constexpr int kPortCount = 12000;
constexpr int kStartAttempts = 3;
constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr auto kHealthCallTimeout = std::chrono::milliseconds(500);

bool port_free(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return free;
}

// `count` distinct ports that are free right now.
std::vector<std::uint16_t> free_ports(std::size_t count) {
  static std::mt19937 random{std::random_device{}()};
  std::uniform_int_distribution<int> pick(kFirstPort, kFirstPort + kPortCount - 1);
  std::vector<std::uint16_t> ports;
  for (int tries = 0; ports.size() < count; ++tries) {
    if (tries > 10000) throw std::runtime_error("EtcdCluster: no free loopback ports in 20000-31999");
    const auto port = static_cast<std::uint16_t>(pick(random));
    if (std::find(ports.begin(), ports.end(), port) == ports.end() && port_free(port)) ports.push_back(port);
  }
  return ports;
}

std::string url_of(const std::string& host, std::uint16_t port) {
  return std::string("http://").append(host).append(":").append(std::to_string(port));
}

std::size_t append_to(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// The member's exit status if it has ended (reaped now), else kStillRunning.
int reap_if_ended(pid_t pid) { return wait_exit(pid, std::chrono::milliseconds(0)); }

}  // namespace

HttpAnswer http_call(const std::string& url, const std::string& body, std::chrono::milliseconds timeout) {
  static std::once_flag curl_ready;
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpAnswer answer;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    answer.error = "curl_easy_init failed";
    return answer;
  }
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROXY, "");  // loopback only, whatever $http_proxy says
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_to);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  if (!body.empty()) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  } else {
    answer.error = error[0] != '\0' ? error : curl_easy_strerror(code);
  }
  curl_easy_cleanup(curl);
  return answer;
}

std::string EtcdCluster::binary_path() {
  if (const char* path = std::getenv("HF3FS_META_ETCD_BIN"); path && *path) return path;
#ifdef HF3FS_META_ETCD_PATH
  if (std::string(HF3FS_META_ETCD_PATH).find('/') != std::string::npos) return HF3FS_META_ETCD_PATH;
#endif
  return "/usr/bin/etcd";
}

EtcdCluster::EtcdCluster(std::size_t members, std::chrono::milliseconds start_timeout,
                         std::vector<Placement> placements) {
  if (members == 0) throw std::invalid_argument("EtcdCluster: members must be at least 1");
  if (::access(binary_path().c_str(), X_OK) != 0) {
    throw std::runtime_error("EtcdCluster: no etcd at " + binary_path() +
                             " (scripts/bootstrap installs etcd-server; HF3FS_META_ETCD_BIN names another)");
  }
  members_.resize(members);
  try {
    for (int attempt = 1;; ++attempt) {
      const auto ports = free_ports(2 * members);
      for (std::size_t i = 0; i < members; ++i) {
        members_[i] = Member{"m" + std::to_string(i), i < placements.size() ? placements[i] : Placement{},
                             ports[2 * i], ports[2 * i + 1], -1, false};
      }
      token_ = "hf3fs-test-" + std::to_string(::getpid()) + "-" + std::to_string(ports[0]) + "-" +
               std::to_string(attempt);
      if (start_all(start_timeout)) return;
      kill_all();
      if (attempt == kStartAttempts) {
        throw std::runtime_error("EtcdCluster: a port was taken before etcd bound it, " +
                                 std::to_string(kStartAttempts) + " times:\n" + describe(0, "last attempt"));
      }
    }
  } catch (...) {
    kill_all();
    throw;
  }
}

EtcdCluster::~EtcdCluster() { kill_all(); }

bool EtcdCluster::start_all(std::chrono::milliseconds start_timeout) {
  for (std::size_t i = 0; i < size(); ++i) {
    std::filesystem::remove_all(member_dir(i));
    std::filesystem::create_directories(member_dir(i));
    spawn(i, true);
  }
  const auto deadline = std::chrono::steady_clock::now() + start_timeout;
  for (;;) {
    std::size_t healthy = 0;
    for (std::size_t i = 0; i < size(); ++i) {
      const int status = reap_if_ended(members_[i].pid);
      if (status != kStillRunning) {
        const std::string failure = describe(i, "exited with status " + std::to_string(status) + " while starting");
        members_[i].pid = -1;
        if (log_tail(i, 200).find("address already in use") != std::string::npos) return false;
        throw std::runtime_error(failure);
      }
      if (member_healthy(i, kHealthCallTimeout)) ++healthy;
    }
    if (healthy == size()) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPoll);
  }
  std::string message = "EtcdCluster: the " + std::to_string(size()) + "-member cluster was not healthy within " +
                        std::to_string(start_timeout.count()) + " ms";
  for (std::size_t i = 0; i < size(); ++i) message.append("\n").append(describe(i, "at the deadline"));
  throw std::runtime_error(message);
}

void EtcdCluster::spawn(std::size_t i, bool new_cluster) {
  std::string cluster;
  for (const auto& m : members_) {
    if (!cluster.empty()) cluster.append(",");
    cluster.append(m.name).append("=").append(url_of(m.placement.host, m.peer_port));
  }
  const Member& m = members_[i];
  const std::string dir = member_dir(i);
  // Heartbeat 100 ms and election 1 s (etcd's defaults, said out loud): quick elections, yet no
  // spurious ones on a loaded 2-core machine. Pre-vote, as docs/deploy.md asks of etcd 3.4: a member
  // cut off and back does not depose etcd's leader.
  const std::string client = url_of(m.placement.host, m.client_port);
  const std::string peer = url_of(m.placement.host, m.peer_port);
  std::vector<std::string> args{binary_path(),
                                "--name", m.name,
                                "--data-dir", dir + "/data",
                                "--listen-client-urls", client,
                                "--advertise-client-urls", client,
                                "--listen-peer-urls", peer,
                                "--initial-advertise-peer-urls", peer,
                                "--initial-cluster", cluster,
                                "--initial-cluster-token", token_,
                                "--initial-cluster-state", new_cluster ? "new" : "existing",
                                "--heartbeat-interval", "100",
                                "--election-timeout", "1000",
                                "--pre-vote"};
  const std::string log = dir + "/log";
  const auto [pid, output] = spawn_child(m.placement.wrap(std::move(args)), [&](int) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) _exit(125);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
  });
  ::close(output);
  members_[i].pid = pid;
  members_[i].stopped = false;
}

void EtcdCluster::kill_all() noexcept {
  for (auto& m : members_) {
    if (m.pid <= 0) continue;
    ::kill(m.pid, SIGKILL);  // a stopped process dies of it too
    wait_exit(m.pid, std::chrono::seconds(30));
    m.pid = -1;
    m.stopped = false;
  }
}

std::size_t EtcdCluster::checked(std::size_t i) const {
  if (i >= size()) {
    throw std::out_of_range("EtcdCluster: member " + std::to_string(i) + " of " + std::to_string(size()));
  }
  return i;
}

std::vector<std::string> EtcdCluster::client_urls() const {
  std::vector<std::string> urls;
  for (const auto& m : members_) urls.push_back(url_of(m.placement.host, m.client_port));
  return urls;
}

std::string EtcdCluster::client_url(std::size_t i) const {
  const Member& m = members_[checked(i)];
  return url_of(m.placement.host, m.client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string joined;
  for (const auto& url : client_urls()) {
    if (!joined.empty()) joined.append(",");
    joined.append(url);
  }
  return joined;
}

pid_t EtcdCluster::pid(std::size_t i) const { return members_[checked(i)].pid; }
bool EtcdCluster::running(std::size_t i) const { return members_[checked(i)].pid > 0; }
std::string EtcdCluster::data_dir(std::size_t i) const { return member_dir(checked(i)) + "/data"; }
std::string EtcdCluster::member_dir(std::size_t i) const { return root_.str() + "/" + members_[i].name; }

void EtcdCluster::kill(std::size_t i) {
  Member& m = members_[checked(i)];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  if (wait_exit(m.pid, std::chrono::seconds(30)) == kStillRunning) {
    throw std::runtime_error(describe(i, "did not die of SIGKILL within 30 s"));
  }
  m.pid = -1;
  m.stopped = false;
}

void EtcdCluster::stop(std::size_t i) {
  Member& m = members_[checked(i)];
  if (m.pid <= 0) throw std::logic_error(describe(i, "cannot be stopped: not running"));
  ::kill(m.pid, SIGSTOP);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(m.pid, &status, WNOHANG | WUNTRACED);
    if (r == m.pid && WIFSTOPPED(status)) break;
    if (r == m.pid) {
      const std::string failure =
          describe(i, "ended (status " + std::to_string(decode_exit_status(status)) + ") instead of stopping");
      m.pid = -1;
      throw std::runtime_error(failure);
    }
    if (std::chrono::steady_clock::now() >= deadline) throw std::runtime_error(describe(i, "did not stop within 5 s"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m.stopped = true;
}

void EtcdCluster::cont(std::size_t i) {
  Member& m = members_[checked(i)];
  if (m.pid <= 0) throw std::logic_error(describe(i, "cannot be continued: not running"));
  ::kill(m.pid, SIGCONT);
  m.stopped = false;
}

void EtcdCluster::restart(std::size_t i) {
  kill(checked(i));
  spawn(i, false);
}

bool EtcdCluster::member_healthy(std::size_t i, std::chrono::milliseconds timeout) const {
  const HttpAnswer answer = http_call(client_url(i) + "/health", "", timeout);
  return answer.status == 200 && answer.body.find("\"health\":\"true\"") != std::string::npos;
}

void EtcdCluster::wait_healthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::vector<std::size_t> unhealthy;
    for (std::size_t i = 0; i < size(); ++i) {
      Member& m = members_[i];
      if (m.pid <= 0 || m.stopped) continue;
      if (const int status = reap_if_ended(m.pid); status != kStillRunning) {
        const std::string failure = describe(i, "exited by itself with status " + std::to_string(status));
        m.pid = -1;
        throw std::runtime_error(failure);
      }
      if (!member_healthy(i, kHealthCallTimeout)) unhealthy.push_back(i);
    }
    if (unhealthy.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string message = "EtcdCluster: not healthy within " + std::to_string(timeout.count()) + " ms";
      for (const auto i : unhealthy) message.append("\n").append(describe(i, "is not healthy"));
      throw std::runtime_error(message);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::pair<std::string, std::string> EtcdCluster::status(std::size_t i) const {
  const HttpAnswer answer = http_call(client_url(i) + "/v3/maintenance/status", "{}", std::chrono::seconds(2));
  rapidjson::Document d;
  d.Parse(answer.body.data(), answer.body.size());  // by size: see ha_members.hpp's parse_json
  if (answer.status != 200 || d.HasParseError() || !d.IsObject()) return {};
  // The gateway writes 64-bit ids as strings; accepted as numbers too.
  const auto id = [](const rapidjson::Value& v) {
    if (v.IsString()) return std::string(v.GetString());
    if (v.IsUint64()) return std::to_string(v.GetUint64());
    return std::string();
  };
  if (!d.HasMember("header") || !d["header"].IsObject() || !d["header"].HasMember("member_id") ||
      !d.HasMember("leader")) {
    return {};
  }
  return {id(d["header"]["member_id"]), id(d["leader"])};
}

std::size_t EtcdCluster::leader() const {
  for (std::size_t i = 0; i < size(); ++i) {
    if (!running(i)) continue;
    const auto [self, leader] = status(i);
    if (!self.empty() && self == leader) return i;
  }
  return kNoMember;
}

std::size_t EtcdCluster::follower() const {
  for (std::size_t i = 0; i < size(); ++i) {
    if (!running(i)) continue;
    const auto [self, leader] = status(i);
    if (!self.empty() && !leader.empty() && self != leader) return i;
  }
  return kNoMember;
}

std::string EtcdCluster::log_tail(std::size_t i, std::size_t lines) const {
  std::ifstream in(member_dir(checked(i)) + "/log");
  std::deque<std::string> kept;
  for (std::string line; std::getline(in, line);) {
    kept.push_back(std::move(line));
    if (kept.size() > lines) kept.pop_front();
  }
  std::string tail;
  for (const auto& line : kept) tail.append(line).append("\n");
  return tail;
}

std::string EtcdCluster::describe(std::size_t i, const std::string& what) const {
  const Member& m = members_[i];
  std::string text = "etcd member " + m.name + " (" + url_of(m.placement.host, m.client_port) + ", pid " + std::to_string(m.pid) +
                     ") " + what + "; the tail of " + member_dir(i) + "/log:\n";
  text.append(log_tail(i, 30));
  return text;
}

}  // namespace hf3fs_meta::testing
