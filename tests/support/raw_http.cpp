#include "support/raw_http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hf3fs_meta::testing {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

std::optional<std::string> RawResponse::header(std::string_view name) const {
  const auto key = lower(name);
  for (const auto& [n, v] : headers) {
    if (n == key) return v;
  }
  return std::nullopt;
}

std::size_t RawResponse::header_count(std::string_view name) const {
  const auto key = lower(name);
  return static_cast<std::size_t>(std::count_if(headers.begin(), headers.end(), [&](const auto& h) { return h.first == key; }));
}

RawConnection::RawConnection(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd_);
    throw std::runtime_error("not an IPv4 address: " + host);
  }
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(err));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RawConnection::host_header() const { return host_ + ":" + std::to_string(port_); }

void RawConnection::send(std::string_view bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void RawConnection::shutdown_write() {
  if (::shutdown(fd_, SHUT_WR) != 0) throw std::runtime_error(std::string("shutdown: ") + std::strerror(errno));
}

std::size_t RawConnection::fill() {
  pollfd pfd{fd_, POLLIN, 0};
  for (;;) {
    const int ready = ::poll(&pfd, 1, static_cast<int>(timeout_.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) throw std::runtime_error("timed out waiting for the server");
    if (ready < 0) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    break;
  }
  char chunk[16384];
  for (;;) {
    const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET) return 0;
    if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return static_cast<std::size_t>(n);
  }
}

RawResponse RawConnection::read_response(bool head_request) {
  std::size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (fill() == 0) throw std::runtime_error("connection closed before a response (got '" + buffer_ + "')");
  }
  RawResponse response;
  std::string_view head(buffer_.data(), end);
  auto line_end = head.find("\r\n");
  std::string_view status_line = head.substr(0, line_end);
  if (status_line.substr(0, 9) != "HTTP/1.1 " || status_line.size() < 12)
    throw std::runtime_error("bad status line: " + std::string(status_line));
  response.status = std::stoi(std::string(status_line.substr(9, 3)));
  response.reason = status_line.size() > 13 ? std::string(status_line.substr(13)) : "";
  while (line_end != std::string_view::npos) {
    head.remove_prefix(line_end + 2);
    line_end = head.find("\r\n");
    auto line = head.substr(0, line_end);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) throw std::runtime_error("bad header line: " + std::string(line));
    response.headers.emplace_back(lower(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  buffer_.erase(0, end + 4);

  const auto length = response.header("content-length");
  if (head_request || response.status == 204 || response.status == 304 || response.status < 200) {
    return response;
  }
  if (length) {
    const auto size = static_cast<std::size_t>(std::stoull(*length));
    while (buffer_.size() < size) {
      if (fill() == 0) throw std::runtime_error("connection closed inside a body");
    }
    response.body = buffer_.substr(0, size);
    buffer_.erase(0, size);
  } else {
    while (fill() != 0) {
    }
    response.body = std::move(buffer_);
    buffer_.clear();
  }
  return response;
}

RawResponse RawConnection::request(std::string_view method, std::string_view target, std::string_view body,
                                   const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  send(format_request(method, target, host_header(), body, extra_headers));
  return read_response(method == "HEAD");
}

bool RawConnection::peer_closed(std::chrono::milliseconds timeout) {
  if (!buffer_.empty()) return false;
  pollfd pfd{fd_, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return false;
  char chunk[4096];
  const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
  if (n > 0) {
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return false;
  }
  return true;  // 0: orderly close; < 0: reset
}

bool RawConnection::has_input() {
  if (!buffer_.empty()) return true;
  pollfd pfd{fd_, POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0;
}

std::string format_request(std::string_view method, std::string_view target, std::string_view host,
                           std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  std::string out;
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  out.append("Host: ").append(host).append("\r\n");
  if (!body.empty() || method == "POST") out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  for (const auto& [name, value] : extra_headers) out.append(name).append(": ").append(value).append("\r\n");
  out.append("\r\n").append(body);
  return out;
}

RawResponse raw_request(const std::string& host, std::uint16_t port, std::string_view method,
                        std::string_view target, std::string_view body,
                        const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  RawConnection connection(host, port);
  return connection.request(method, target, body, extra_headers);
}

}  // namespace hf3fs_meta::testing
