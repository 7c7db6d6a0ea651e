// The network side of hf3fs-meta-server: one io_context per I/O thread (so a connection's handlers
// never need a strand), an acceptor that gives each connection to the I/O thread with the fewest,
// and HTTP/1.1 keep-alive sessions that hand complete requests to a Backend (router.hpp): the
// Router, or the proxy's.
#pragma once

// Every translation unit of this tree compiles Asio with BOOST_ASIO_NO_DEPRECATED (hf3fs_meta_asio,
// CMakeLists.txt): one program whose units compiled two Asios would break the one-definition rule,
// as the proxy did (the server's front and the SDK's transports meet in it), which crashed at -O0.
#ifndef BOOST_ASIO_NO_DEPRECATED
#error "link hf3fs_meta_asio: every translation unit that includes Asio compiles it with BOOST_ASIO_NO_DEPRECATED"
#endif

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "request_parser.hpp"
#include "router.hpp"
#include "server_options.hpp"

namespace hf3fs_meta::server {

class Worker;
struct SessionContext;

// The connection limit actually applied: --max-connections, kept below the descriptor limit
// (`open_files`) minus what the server itself needs (listener, event loops, spare, files).
std::size_t effective_max_connections(std::size_t requested, std::uint64_t open_files) noexcept;
inline constexpr std::uint64_t kReservedDescriptors = 64;

class Server {
 public:
  // Throws boost::system::system_error if the TLS certificate or key (options) cannot be used.
  Server(const ServerOptions& options, Backend& backend);
  ~Server();

  // Binds and listens; throws boost::system::system_error on failure.
  boost::asio::ip::tcp::endpoint listen();

  // Runs the I/O threads until stop() and the requests in flight are done. The calling thread is one
  // of them.
  void run();

  // Stop accepting, answer what is in flight, close idle connections. Thread-safe.
  void stop();

  std::uint64_t requests_served() const noexcept;
  std::size_t max_connections() const noexcept { return max_connections_; }

 private:
  void do_accept();
  Worker& pick_worker();
  void admit(boost::asio::ip::tcp::socket socket);
  void on_out_of_descriptors();
  // The evicted connection's worker, or null if no connection was idle.
  Worker* evict_longest_idle();

  const ServerOptions& options_;
  Backend& backend_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<boost::asio::ssl::context> tls_;  // null: plain HTTP
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  boost::asio::ip::tcp protocol_ = boost::asio::ip::tcp::v4();  // the listener's
  std::atomic<bool> stopping_{false};
  BodyBudget body_budget_;
  std::unique_ptr<SessionContext> context_;
  std::size_t max_connections_ = 0;
  // Kept open so that, out of descriptors, one can be freed to accept (and serve) a waiting client
  // instead of leaving it in the backlog while accept fails in a loop.
  int spare_fd_ = -1;
};

}  // namespace hf3fs_meta::server
