// A connection's byte stream: the TCP socket itself, or TLS over it (--tls-cert/--tls-key, Beast's
// ssl_stream). It offers the socket calls a session makes (reads, writes through asio::async_write,
// options, shutdown, close), so that the session is the same code for both.
#pragma once

#include <optional>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace hf3fs_meta::server {

class SessionStream {
 public:
  using tcp = boost::asio::ip::tcp;
  using executor_type = tcp::socket::executor_type;

  // `tls` null: plain TCP.
  SessionStream(tcp::socket socket, boost::asio::ssl::context* tls) {
    if (tls) {
      tls_.emplace(std::move(socket), *tls);
    } else {
      plain_.emplace(std::move(socket));
    }
  }

  tcp::socket& socket() noexcept { return tls_ ? boost::beast::get_lowest_layer(*tls_) : *plain_; }
  executor_type get_executor() noexcept { return socket().get_executor(); }

  template <class Option>
  void set_option(const Option& option, boost::system::error_code& ec) {
    socket().set_option(option, ec);
  }
  // Without TLS's close_notify: every answer is framed by its content-length, so a client never
  // needs it to know the answer is whole.
  void shutdown(tcp::socket::shutdown_type what, boost::system::error_code& ec) { socket().shutdown(what, ec); }
  void close(boost::system::error_code& ec) { socket().close(ec); }

  // The TLS handshake (server side); completes at once without TLS.
  template <class Handler>
  void async_handshake(Handler&& handler) {
    if (tls_) return tls_->async_handshake(boost::asio::ssl::stream_base::server, std::forward<Handler>(handler));
    std::forward<Handler>(handler)(boost::system::error_code());
  }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Handler>(handler));
    plain_->async_read_some(buffers, std::forward<Handler>(handler));
  }

  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Handler>(handler));
    plain_->async_write_some(buffers, std::forward<Handler>(handler));
  }

 private:
  std::optional<tcp::socket> plain_;
  std::optional<boost::beast::ssl_stream<tcp::socket>> tls_;
};

}  // namespace hf3fs_meta::server
