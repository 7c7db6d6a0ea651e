#include "support/net_lab.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "support/server_process.hpp"

namespace hf3fs_meta::testing {
namespace {

constexpr std::string_view kPrefix = "hf3fs-part-";
constexpr std::string_view kNetnsDir = "/run/netns";
// A locally administered unicast MAC that no interface of the lab has: a cut's neighbour entries.
constexpr std::string_view kNowhere = "02:68:66:33:66:00";
constexpr auto kCommandTimeout = std::chrono::seconds(10);

// The PID in a lab namespace's name (hf3fs-part-<pid>-...), or -1.
pid_t owner_of(std::string_view name) {
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  const auto dash = name.find('-');
  if (dash == 0 || dash == std::string_view::npos) return -1;
  pid_t pid = 0;
  for (const char c : name.substr(0, dash)) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

// Whether `pid` still runs: a zombie (killed, not yet reaped by its parent) does not.
bool runs(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');  // the state follows the command, which may hold spaces
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

}  // namespace

std::string NetLab::ip_binary() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return {};
}

void NetLab::ip(std::vector<std::string> args) {
  args.insert(args.begin(), ip_binary());
  std::string line;
  for (const auto& a : args) line.append(a).append(" ");
  const auto finished = ServerProcess::run_binary_to_exit(std::move(args), kCommandTimeout);
  if (finished.exit_code != 0) {
    throw std::runtime_error("NetLab: `" + line + "` exited with " + std::to_string(finished.exit_code) + ": " +
                             finished.output);
  }
}

std::string NetLab::unavailable() {
  if (::geteuid() != 0) return "network namespaces need root; this test runs as uid " + std::to_string(::geteuid());
  if (ip_binary().empty()) return "no ip (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin";
  const std::string probe = std::string(kPrefix) + std::to_string(::getpid()) + "-probe";
  try {
    ip({"netns", "add", probe});
  } catch (const std::runtime_error& e) {
    return std::string("`ip netns add` does not work here: ") + e.what();
  }
  try {
    ip({"netns", "del", probe});
  } catch (const std::runtime_error& e) {
    return std::string("`ip netns del` does not work here: ") + e.what();
  }
  return {};
}

std::vector<std::string> NetLab::remove_leftovers() {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t owner = owner_of(name);
    if (owner <= 0 || owner == ::getpid() || runs(owner)) continue;
    try {
      ip({"netns", "del", name});
      removed.push_back(name);
    } catch (const std::runtime_error&) {  // another test process removed it first
    }
  }
  return removed;
}

NetLab::NetLab(std::size_t nodes) : nodes_(nodes) {
  static std::atomic<int> labs{0};
  if (nodes == 0 || nodes > 200) throw std::invalid_argument("NetLab: 1 to 200 nodes, not " + std::to_string(nodes));
  remove_leftovers();
  prefix_ = std::string(kPrefix) + std::to_string(::getpid()) + "-" + std::to_string(labs++) + "-";
  try {
    ip({"netns", "add", hub()});
    made_.push_back(hub());
    ip({"-n", hub(), "link", "add", "br0", "type", "bridge"});
    ip({"-n", hub(), "link", "set", "br0", "up"});
    for (std::size_t i = 0; i < nodes; ++i) {
      ip({"netns", "add", ns(i)});
      made_.push_back(ns(i));
      const std::string port = "v" + std::to_string(i);
      ip({"-n", hub(), "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns(i)});
      ip({"-n", hub(), "link", "set", port, "master", "br0", "up"});
      ip({"-n", ns(i), "addr", "add", address(i) + "/24", "dev", "eth0"});
      ip({"-n", ns(i), "link", "set", "eth0", "up"});
      ip({"-n", ns(i), "link", "set", "lo", "up"});
    }
  } catch (...) {
    remove_all();
    throw;
  }
}

NetLab::~NetLab() { remove_all(); }

void NetLab::remove_all() noexcept {
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    try {
      ip({"netns", "del", *it});
    } catch (...) {  // a destructor's: what is left, the next lab's remove_leftovers() takes
    }
  }
  made_.clear();
}

std::string NetLab::hub() const { return prefix_ + "hub"; }

std::string NetLab::ns(std::size_t node) const {
  if (node >= nodes_) throw std::out_of_range("NetLab: node " + std::to_string(node) + " of " + std::to_string(nodes_));
  return prefix_ + "n" + std::to_string(node);
}

std::string NetLab::address(std::size_t node) const {
  if (node >= nodes_) throw std::out_of_range("NetLab: node " + std::to_string(node) + " of " + std::to_string(nodes_));
  return "10.77.0." + std::to_string(10 + node);
}

Placement NetLab::placement(std::size_t node) const {
  return Placement{address(node), {ip_binary(), "netns", "exec", ns(node)}};
}

void NetLab::cut(std::size_t a, std::size_t b) {
  if (a == b) throw std::invalid_argument("NetLab: a node cannot be cut from itself");
  for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    ip({"-n", ns(from), "neigh", "replace", address(to), "lladdr", std::string(kNowhere), "dev", "eth0", "nud",
        "permanent"});
  }
  cuts_.insert(std::minmax(a, b));
}

void NetLab::heal(std::size_t a, std::size_t b) {
  if (cuts_.erase(std::minmax(a, b)) == 0) return;
  for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    ip({"-n", ns(from), "neigh", "del", address(to), "dev", "eth0"});
  }
}

void NetLab::heal_all() {
  const auto cuts = cuts_;
  for (const auto& [a, b] : cuts) heal(a, b);
}

InNetns::InNetns(const NetLab& lab, std::size_t node) {
  previous_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (previous_ < 0) throw std::runtime_error(std::string("InNetns: /proc/thread-self/ns/net: ") + std::strerror(errno));
  const std::string path = std::string(kNetnsDir) + "/" + lab.ns(node);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    ::close(previous_);
    throw std::runtime_error("InNetns: entering " + path + ": " + std::strerror(error));
  }
  ::close(fd);
}

InNetns::~InNetns() {
  // Back where the thread was; should that fail, the thread would go on in a namespace about to
  // be deleted, and every later connection of the test would fail: better to stop here.
  if (::setns(previous_, CLONE_NEWNET) != 0) std::terminate();
  ::close(previous_);
}

}  // namespace hf3fs_meta::testing
