// The network side of hf3fs-meta-server: one io_context per I/O thread (so a connection's handlers
// never need a strand), an acceptor that deals connections out round-robin, and HTTP/1.1 keep-alive
// sessions that hand complete requests to the Router.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "router.hpp"
#include "server_options.hpp"

namespace hf3fs_meta::server {

class Worker;

class Server {
 public:
  // Throws boost::system::system_error if the TLS certificate or key (options) cannot be used.
  Server(const ServerOptions& options, Router& router);
  ~Server();

  // Binds and listens; throws boost::system::system_error on failure.
  boost::asio::ip::tcp::endpoint listen();

  // Runs the I/O threads until stop() and the requests in flight are done. The calling thread is one
  // of them.
  void run();

  // Stop accepting, answer what is in flight, close idle connections. Thread-safe.
  void stop();

  std::uint64_t requests_served() const noexcept;

 private:
  void do_accept();

  const ServerOptions& options_;
  Router& router_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<boost::asio::ssl::context> tls_;  // null: plain HTTP
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::size_t next_worker_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace hf3fs_meta::server
