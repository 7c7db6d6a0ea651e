// A tiny blocking HTTP/1.1 client over a plain socket, for tests that check the exact bytes a server
// answers: status, each header, body, and whether the connection stays open.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hf3fs_meta::testing {

struct RawResponse {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased, in order received
  std::string body;

  // The value of a header, if present exactly once or more (the first).
  std::optional<std::string> header(std::string_view name) const;
  std::size_t header_count(std::string_view name) const;
};

class RawConnection {
 public:
  // Connects to host:port; throws std::runtime_error on failure.
  RawConnection(const std::string& host, std::uint16_t port,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void send(std::string_view bytes);  // throws on failure
  void shutdown_write();              // the peer reads the end of the stream; reading goes on

  // Reads one response. Throws std::runtime_error on timeout, or if the peer closes first.
  RawResponse read_response(bool head_request = false);

  // Sends a request (Host, Content-Length and `extra_headers` added) and reads its response.
  RawResponse request(std::string_view method, std::string_view target, std::string_view body = {},
                      const std::vector<std::pair<std::string, std::string>>& extra_headers = {});

  // True if the peer closed (or reset) the connection within `timeout` with nothing more to read.
  // False if it stays open, or if bytes arrive (they are kept for read_response).
  bool peer_closed(std::chrono::milliseconds timeout);

  // True if bytes, or the peer's close, are waiting to be read now (bytes are kept for
  // read_response). Never waits: "nothing to read yet" is decided by the events before the call.
  bool has_input();

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  std::string host_header() const;

 private:
  // Reads more bytes into buffer_; 0 at end of stream. Throws on timeout.
  std::size_t fill();

  int fd_ = -1;
  std::string host_;
  std::uint16_t port_ = 0;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
};

// Builds a request's bytes: request line, Host, Content-Length (for a body or a POST), extra headers.
std::string format_request(std::string_view method, std::string_view target, std::string_view host,
                           std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra_headers = {});

// One request on a fresh connection.
RawResponse raw_request(const std::string& host, std::uint16_t port, std::string_view method,
                        std::string_view target, std::string_view body = {},
                        const std::vector<std::pair<std::string, std::string>>& extra_headers = {});

}  // namespace hf3fs_meta::testing
