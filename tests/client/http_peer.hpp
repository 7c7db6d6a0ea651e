// A small HTTP/1.1 peer on 127.0.0.1 for CurlTransport's tests: plain sockets, one thread per
// connection, keep-alive. It counts accepted connections and records the requests it read, and can
// misbehave (never answer, or hang up after reading) to produce the transport's failures.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hf3fs_meta::testing {

struct PeerRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::nullopt;
  }
};

struct PeerResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // answer with Connection: close and hang up
  // Not zero: the head at once, then the body one byte at a time, this long apart (a slow answer).
  std::chrono::milliseconds pace{0};
};

class HttpPeer {
 public:
  enum class Mode {
    answer,        // answer every request with the responder
    silent,        // accept, read, never answer
    hang_up,       // read one request, then close without answering
    answer_once,   // answer the first request of each connection, hang up on the second
  };
  using Responder = std::function<PeerResponse(const PeerRequest&)>;
  // Called with each request read, whatever the mode, before the peer answers or not: what its
  // arrival should cause elsewhere (a request passed on to a real server whose answer is then lost).
  using Observer = std::function<void(const PeerRequest&)>;

  explicit HttpPeer(Mode mode = Mode::answer, Responder responder = {}, Observer observer = {})
      : mode_(mode), responder_(std::move(responder)), observer_(std::move(observer)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) throw std::runtime_error("socket");
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("bind");
    if (::listen(listen_fd_, 64) != 0) throw std::runtime_error("listen");
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~HttpPeer() { stop(); }
  HttpPeer(const HttpPeer&) = delete;
  HttpPeer& operator=(const HttpPeer&) = delete;

  void stop() {
    if (stopping_.exchange(true)) return;
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(connections_);
    }
    for (auto& t : threads) t.join();
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepts() const { return accepts_.load(); }
  std::vector<PeerRequest> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      accepts_.fetch_add(1);
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // Reads into `buffer` until it holds `n` bytes or more; false on EOF, error or stop.
  bool fill(int fd, std::string& buffer, std::size_t n) {
    char chunk[65536];
    while (buffer.size() < n) {
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, 20);
      if (stopping_) return false;
      if (ready <= 0) continue;
      const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
      if (got <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(got));
    }
    return true;
  }

  bool read_request(int fd, std::string& buffer, PeerRequest& request) {
    std::size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(fd, buffer, buffer.size() + 1)) return false;
    }
    const std::string head = buffer.substr(0, end);
    buffer.erase(0, end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string first = head.substr(0, line_end);
    const auto sp1 = first.find(' ');
    const auto sp2 = first.find(' ', sp1 + 1);
    request.method = first.substr(0, sp1);
    request.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t content_length = 0;
    while (line_end != std::string::npos) {
      const std::size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      if (name == "content-length") content_length = std::stoul(value);
      request.headers.emplace_back(std::move(name), std::move(value));
    }
    if (!fill(fd, buffer, content_length)) return false;
    request.body = buffer.substr(0, content_length);
    buffer.erase(0, content_length);
    return true;
  }

  void serve(int fd) {
    std::string buffer;
    int served = 0;
    for (;;) {
      PeerRequest request;
      if (!read_request(fd, buffer, request)) break;
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(request);
      }
      if (observer_) observer_(request);
      if (mode_ == Mode::hang_up) break;
      if (mode_ == Mode::answer_once && ++served > 1) break;
      if (mode_ == Mode::silent) {
        std::string ignored;
        fill(fd, ignored, std::string::npos);  // hold the connection until the client or stop() ends it
        break;
      }
      PeerResponse response = responder_ ? responder_(request) : PeerResponse{};
      std::string out = "HTTP/1.1 " + std::to_string(response.status) + " X\r\n";
      if (!response.content_type.empty()) out += "Content-Type: " + response.content_type + "\r\n";
      for (const auto& [n, v] : response.headers) out += n + ": " + v + "\r\n";
      if (response.close) out += "Connection: close\r\n";
      out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n\r\n";
      const std::size_t head = out.size();
      out += response.body;
      std::size_t sent = 0;
      while (sent < out.size() && !stopping_) {
        const std::size_t piece = response.pace.count() == 0 ? out.size() - sent : sent < head ? head - sent : 1;
        const ssize_t n = ::send(fd, out.data() + sent, piece, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<std::size_t>(n);
        if (response.pace.count() > 0 && sent > head) std::this_thread::sleep_for(response.pace);
      }
      if (response.close) break;
    }
    ::close(fd);
  }

  Mode mode_;
  Responder responder_;
  Observer observer_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepts_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::vector<PeerRequest> requests_;
};

// A port where nothing listens, for as long as it lives: bound, never listening, so a connect is
// refused and no other test can take the port meanwhile.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("bind");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace hf3fs_meta::testing
