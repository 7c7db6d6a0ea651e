// Type=notify readiness (mock_server/service_notify.hpp): the sender on its own, then the real
// hf3fs-meta-server and hf3fs-meta-proxy telling a socket the test bound, as systemd binds one, that
// they are ready (only once they serve, a data dir recovered) and that they are stopping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "service_notify.hpp"
#include "support/child_process.hpp"
#include "support/etcd_cluster.hpp"
#include "support/proxy_process.hpp"
#include "support/raw_http.hpp"
#include "support/server_process.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using server::notify_socket_send;

constexpr auto kStartTimeout = std::chrono::seconds(20);

// Strings built by append (GCC 12 reports false -Warray-bounds for operator+ on temporaries).
std::string joined(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const auto part : parts) out.append(part);
  return out;
}

// A datagram socket bound as a service manager binds NOTIFY_SOCKET: at `path`, or at an abstract
// name when `path` starts with '@'.
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(joined({"socket: ", std::strerror(errno)}));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path_.size() >= sizeof address.sun_path) throw std::runtime_error(joined({"socket path too long: ", path_}));
    std::memcpy(address.sun_path, path_.data(), path_.size());
    if (path_.front() == '@') address.sun_path[0] = '\0';
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size());
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      const int error = errno;
      ::close(fd_);
      throw std::runtime_error(joined({"bind ", path_, ": ", std::strerror(error)}));
    }
  }
  ~NotifySocket() { ::close(fd_); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  const std::string& path() const { return path_; }

  // The next datagram, or nullopt if none came within `timeout`.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) {
    pollfd pfd{fd_, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) return std::nullopt;
    char buffer[4096];
    const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n < 0) throw std::runtime_error(joined({"recv: ", std::strerror(errno)}));
    return std::string(buffer, static_cast<std::size_t>(n));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// NOTIFY_SOCKET set for the programs spawned while it lives (the test spawns from its only thread).
class NotifyEnvironment {
 public:
  explicit NotifyEnvironment(const std::string& address) { ::setenv("NOTIFY_SOCKET", address.c_str(), 1); }
  ~NotifyEnvironment() { ::unsetenv("NOTIFY_SOCKET"); }
  NotifyEnvironment(const NotifyEnvironment&) = delete;
  NotifyEnvironment& operator=(const NotifyEnvironment&) = delete;
};

// A program started with NOTIFY_SOCKET, stdout on a pipe, stderr to `stderr_path` (or inherited).
class NotifiedProgram {
 public:
  NotifiedProgram(std::vector<std::string> argv, const std::string& notify_address,
                  const std::string& stderr_path = {}) {
    NotifyEnvironment environment(notify_address);
    const auto spawned = spawn_child(std::move(argv), [&stderr_path](int) {
      if (stderr_path.empty()) return;
      const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) ::dup2(fd, STDERR_FILENO);
    });
    pid_ = spawned.pid;
    output_ = spawned.output;
  }
  ~NotifiedProgram() {
    if (pid_ > 0) signal_and_reap(pid_, SIGKILL, std::chrono::seconds(10));
    ::close(output_);
  }
  NotifiedProgram(const NotifiedProgram&) = delete;
  NotifiedProgram& operator=(const NotifiedProgram&) = delete;

  // True if its stdout has bytes to read now, without waiting.
  bool output_waiting() const {
    pollfd pfd{output_, POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN) != 0;
  }
  FirstLine first_line() const { return read_first_line(output_, kStartTimeout); }
  void signal(int number) const { ::kill(pid_, number); }
  // Waits for it to exit (SIGKILL after `timeout`): its exit code, or -signal.
  int reap(std::chrono::milliseconds timeout) {
    int result = wait_exit(pid_, timeout);
    if (result == kStillRunning) result = signal_and_reap(pid_, SIGKILL, std::chrono::seconds(10));
    pid_ = -1;
    return result;
  }

 private:
  pid_t pid_ = -1;
  int output_ = -1;
};

// The port of a `listening on http://HOST:PORT` line.
std::uint16_t listening_port(const std::string& line) {
  const auto colon = line.rfind(':');
  if (!line.starts_with("listening on http://") || colon == std::string::npos) {
    throw std::runtime_error(joined({"not a listening line: ", line}));
  }
  return static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

std::string status_of(const std::string& line) {
  std::string out = "READY=1\nSTATUS=";
  out.append(line);
  return out;
}

// The start every program must make: READY=1 within kStartTimeout, after its listening line (on the
// pipe already) and saying that line as STATUS=, and only one notice. The port it listens on, or 0
// after a failure recorded.
std::uint16_t expect_ready_once_listening(NotifySocket& socket, const NotifiedProgram& program) {
  const auto ready = socket.receive(kStartTimeout);
  if (!ready) {
    ADD_FAILURE() << "no notice within 20 s";
    return 0;
  }
  if (!program.output_waiting()) {
    ADD_FAILURE() << "READY=1 came before the listening line";
    return 0;
  }
  const auto line = program.first_line();
  if (!line.complete) {
    ADD_FAILURE() << "no listening line: " << line.line;
    return 0;
  }
  EXPECT_EQ(*ready, status_of(line.line));
  EXPECT_EQ(socket.receive(std::chrono::milliseconds(0)), std::nullopt) << "more than one notice at start";
  return listening_port(line.line);
}

// SIGTERM: STOPPING=1 at once, then exit 0 within `exit_within`, and no notice after.
void expect_stopping_then_exit_zero(NotifySocket& socket, NotifiedProgram& program,
                                    std::chrono::seconds exit_within) {
  program.signal(SIGTERM);
  EXPECT_EQ(socket.receive(std::chrono::seconds(10)), "STOPPING=1");
  EXPECT_EQ(program.reap(exit_within), 0);
  EXPECT_EQ(socket.receive(std::chrono::milliseconds(0)), std::nullopt);
}

// --- the sender ---

TEST(ServiceNotifySend, SendsTheStateAsOneDatagramToAPath) {
  TempDir dir;
  NotifySocket socket(dir.str() + "/notify");
  EXPECT_EQ(notify_socket_send(socket.path(), "READY=1\nSTATUS=listening"), "");
  EXPECT_EQ(socket.receive(std::chrono::seconds(5)), "READY=1\nSTATUS=listening");
  EXPECT_EQ(socket.receive(std::chrono::milliseconds(0)), std::nullopt);
}

TEST(ServiceNotifySend, SendsToAnAbstractName) {
  std::string name = "@hf3fs-meta-notify-test-";
  name.append(std::to_string(::getpid()));
  NotifySocket socket(name);
  EXPECT_EQ(notify_socket_send(name, "STOPPING=1"), "");
  EXPECT_EQ(socket.receive(std::chrono::seconds(5)), "STOPPING=1");
}

TEST(ServiceNotifySend, SaysWhyWhenNobodyListens) {
  TempDir dir;
  const std::string path = dir.str() + "/nobody";
  const auto error = notify_socket_send(path, "READY=1");
  EXPECT_THAT(error, StartsWith(joined({"NOTIFY_SOCKET=", path, ": "})));
  EXPECT_THAT(error, HasSubstr(std::strerror(ENOENT)));
}

TEST(ServiceNotifySend, RefusesAnAddressThatIsNeitherAPathNorAnAbstractName) {
  EXPECT_EQ(notify_socket_send("", "READY=1"),
            "NOTIFY_SOCKET=: not an absolute path nor an abstract name ('@...')");
  EXPECT_EQ(notify_socket_send("run/notify", "READY=1"),
            "NOTIFY_SOCKET=run/notify: not an absolute path nor an abstract name ('@...')");
  // vsock addresses (systemd 253's vsock:CID:PORT) are not spoken.
  EXPECT_THAT(notify_socket_send("vsock:2:1234", "READY=1"), HasSubstr("not an absolute path"));
}

TEST(ServiceNotifySend, RefusesAnAddressLongerThanASocketAddress) {
  std::string path = "/";
  path.append(107, 'x');  // 108 bytes: no room for the NUL
  EXPECT_EQ(notify_socket_send(path, "READY=1"),
            joined({"NOTIFY_SOCKET=", path, ": longer than a socket address (107 bytes)"}));
  // An abstract name has no NUL: 108 bytes fit, 109 do not.
  std::string abstract = "@";
  abstract.append(108, 'x');
  EXPECT_EQ(notify_socket_send(abstract, "READY=1"),
            joined({"NOTIFY_SOCKET=", abstract, ": longer than a socket address (108 bytes)"}));
}

// --- the programs ---

// The durable server: READY=1 only after the data dir is recovered and the port listens; then
// STOPPING=1 on SIGTERM, and exit 0.
TEST(ServiceNotifyServer, ReadyAfterRecoveryAndListeningThenStoppingOnSigterm) {
  TempDir dir;
  const std::string data = dir.str() + "/data";
  {
    ServerProcess first({"--threads", "1", "--data-dir", data});
    ASSERT_EQ(raw_request(first.host(), first.port(), "POST", "/rank/0/initialize", R"({"num_pages":4})").status,
              200);
    ASSERT_EQ(raw_request(first.host(), first.port(), "POST", "/keys/batch_allocate",
                          R"({"rank":0,"keys":[["k",""]]})").status,
              200);
    ASSERT_EQ(raw_request(first.host(), first.port(), "POST", "/keys/confirm_write",
                          R"({"rank":0,"confirmations":[["k",0]]})").status,
              204);
    ASSERT_EQ(first.terminate(), 0);
  }
  NotifySocket socket(dir.str() + "/notify");
  NotifiedProgram server({ServerProcess::binary_path(), "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                          "--data-dir", data},
                         socket.path());
  // Said after the listening line, and the port serves the recovered state at once.
  const auto port = expect_ready_once_listening(socket, server);
  ASSERT_NE(port, 0);
  EXPECT_EQ(raw_request("127.0.0.1", port, "POST", "/keys/batch_exists", R"({"keys":["k"]})").body,
            R"({"exists":[true]})");
  expect_stopping_then_exit_zero(socket, server, std::chrono::seconds(10));
}

// A socket nobody listens on: one line on stderr per notice, and the server serves and stops as
// without one.
TEST(ServiceNotifyServer, ANoticeThatCannotBeSentIsOneLineOnStderrAndNotFatal) {
  TempDir dir;
  const std::string nobody = dir.str() + "/nobody";
  const std::string log = dir.str() + "/stderr";
  NotifiedProgram server({ServerProcess::binary_path(), "--host", "127.0.0.1", "--port", "0", "--threads", "1"},
                         nobody, log);
  const auto line = server.first_line();
  ASSERT_TRUE(line.complete) << line.line;
  EXPECT_EQ(raw_request("127.0.0.1", listening_port(line.line), "GET", "/healthz").status, 200);
  server.signal(SIGTERM);
  EXPECT_EQ(server.reap(std::chrono::seconds(10)), 0);

  const std::string said = read_bytes(log);
  std::string ready_line = "hf3fs-meta-server: cannot tell the service manager READY=1: NOTIFY_SOCKET=";
  ready_line.append(nobody).append(": ").append(std::strerror(ENOENT)).append("\n");
  std::string stopping_line = ready_line;
  stopping_line.replace(stopping_line.find("READY=1"), 7, "STOPPING=1");
  EXPECT_THAT(said, HasSubstr(ready_line));
  EXPECT_THAT(said, HasSubstr(stopping_line));
  std::size_t notices = 0;
  for (auto at = said.find("cannot tell"); at != std::string::npos; at = said.find("cannot tell", at + 1)) ++notices;
  EXPECT_EQ(notices, 2u) << said;
}

// An HA member (one etcd member here): READY=1 once the member has started and the port listens,
// the listening line printed; STOPPING=1 on SIGTERM, after which it resigns and exits 0.
TEST(ServiceNotifyServer, AnHaMemberIsReadyOnceItsMemberStartedAndItListens) {
  EtcdCluster etcd(1);
  TempDir dir;
  NotifySocket socket(dir.str() + "/notify");
  NotifiedProgram server({ServerProcess::binary_path(), "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                          "--data-dir", dir.str() + "/data", "--ha-etcd", etcd.endpoints(), "--ha-cluster",
                          "systemd-notify", "--ha-name", "a"},
                         socket.path());
  const auto port = expect_ready_once_listening(socket, server);
  ASSERT_NE(port, 0);
  // It answers at once, leader or not yet (/healthz says which).
  EXPECT_NE(raw_request("127.0.0.1", port, "GET", "/healthz").status, 0);
  expect_stopping_then_exit_zero(socket, server, std::chrono::seconds(20));
}

// The proxy: READY=1 once it listens (here its upstream answers, so /healthz is 200 at once);
// STOPPING=1 on SIGTERM, and exit 0.
TEST(ServiceNotifyProxy, ReadyWhenListeningThenStoppingOnSigterm) {
  ServerProcess upstream({"--threads", "1"});
  TempDir dir;
  NotifySocket socket(dir.str() + "/notify");
  NotifiedProgram proxy({ProxyProcess::binary_path(), "--listen", "127.0.0.1:0", "--upstream", upstream.base_url(),
                         "--threads", "2"},
                        socket.path());
  const auto port = expect_ready_once_listening(socket, proxy);
  ASSERT_NE(port, 0);
  EXPECT_EQ(raw_request("127.0.0.1", port, "GET", "/healthz").status, 200);
  expect_stopping_then_exit_zero(socket, proxy, std::chrono::seconds(10));
}

// --help says what a service manager gets.
TEST(ServiceNotifyHelp, BothProgramsSayTheyNotify) {
  const char* says = "Under systemd (Type=notify, $NOTIFY_SOCKET): READY=1 once listening, STOPPING=1 on SIGINT/SIGTERM.";
  const auto server = ServerProcess::run_to_exit({"--help"});
  EXPECT_EQ(server.exit_code, 0);
  EXPECT_THAT(server.output, HasSubstr(says));
  const auto proxy = ServerProcess::run_binary_to_exit({ProxyProcess::binary_path(), "--help"});
  EXPECT_EQ(proxy.exit_code, 0);
  EXPECT_THAT(proxy.output, HasSubstr(says));
}

}  // namespace
}  // namespace hf3fs_meta::testing
