#include "support/tcp_relay.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hf3fs_meta::testing {
namespace {

constexpr std::string_view kWatchRequest = "POST /v3/watch";
// A throttled answer goes on in steps of a tenth of its rate, each a tick apart.
constexpr std::chrono::milliseconds kTick{100};

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in addr = loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

struct TcpRelay::Link {
  int client = -1;
  int upstream = -1;
  std::atomic<bool> watch{false};
  std::thread to_upstream;
  std::thread to_client;
};

TcpRelay::TcpRelay(std::string_view upstream_url) {
  const auto colon = upstream_url.rfind(':');
  if (colon == std::string_view::npos) throw std::runtime_error("TcpRelay: no port in " + std::string(upstream_url));
  upstream_port_ = static_cast<std::uint16_t>(std::stoul(std::string(upstream_url.substr(colon + 1))));
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0) throw std::runtime_error(std::string("TcpRelay: socket: ") + std::strerror(errno));
  sockaddr_in addr = loopback(0);
  socklen_t size = sizeof addr;
  if (::bind(listener_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &size) != 0) {
    const int err = errno;
    ::close(listener_);
    throw std::runtime_error(std::string("TcpRelay: cannot listen: ") + std::strerror(err));
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpRelay::~TcpRelay() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  acceptor_.join();
  // Every copy wakes: its reads and writes fail once both sockets are shut down.
  for (auto& link : links_) {
    ::shutdown(link->client, SHUT_RDWR);
    ::shutdown(link->upstream, SHUT_RDWR);
  }
  for (auto& link : links_) {
    link->to_upstream.join();
    link->to_client.join();
    ::close(link->client);
    ::close(link->upstream);
  }
  ::close(listener_);
}

std::string TcpRelay::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

bool TcpRelay::pause(std::chrono::milliseconds duration) {
  std::unique_lock lock(mutex_);
  return !wake_.wait_for(lock, duration, [this] { return stopping_; });
}

void TcpRelay::accept_loop() {
  for (;;) {
    pollfd ready{listener_, POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(kTick.count()));
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    if (polled <= 0) continue;
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int upstream = connect_to(upstream_port_);
    if (upstream < 0) {  // upstream is down: the client sees its connection reset, as it would
      ::close(client);
      continue;
    }
    auto link = std::make_unique<Link>();
    link->client = client;
    link->upstream = upstream;
    Link& l = *link;
    l.to_upstream = std::thread([this, &l] { copy(l, false); });
    l.to_client = std::thread([this, &l] { copy(l, true); });
    links_.push_back(std::move(link));
  }
}

void TcpRelay::copy(Link& link, bool answers) {
  const int from = answers ? link.upstream : link.client;
  const int to = answers ? link.client : link.upstream;
  std::string first;  // the client's first bytes, until they tell whether this is a watch
  char buffer[16384];
  for (;;) {
    // The rate is read once bytes are there: a throttle set while this waited holds for them.
    pollfd ready{from, POLLIN, 0};
    if (::poll(&ready, 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const std::size_t rate = answers && link.watch.load() ? watch_rate_.load() : 0;
    const std::size_t most = rate == 0 ? sizeof buffer : std::clamp<std::size_t>(rate / 10, 1, sizeof buffer);
    const ssize_t n = ::recv(from, buffer, most, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!answers && first.size() < kWatchRequest.size()) {
      first.append(buffer, static_cast<std::size_t>(std::min<ssize_t>(n, 64)));
      if (first.size() >= kWatchRequest.size() && first.starts_with(kWatchRequest)) {
        link.watch.store(true);
        watches_.fetch_add(1);
      }
    }
    if (!send_all(to, buffer, static_cast<std::size_t>(n))) break;
    if (rate != 0 && !pause(kTick)) break;
  }
  // Either way ending ends the connection, both ways, as a closed socket would.
  ::shutdown(link.client, SHUT_RDWR);
  ::shutdown(link.upstream, SHUT_RDWR);
}

}  // namespace hf3fs_meta::testing
