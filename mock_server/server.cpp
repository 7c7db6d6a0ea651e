#include "server.hpp"

#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include "hf3fs_meta/protocol.hpp"
#include "request_parser.hpp"
#include "session_stream.hpp"

namespace hf3fs_meta::server {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

constexpr std::uint32_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::size_t kKeepCapacity = 1024 * 1024;
// After answering with `connection: close`, unread input is drained for at most this long, so that
// closing does not reset the connection before the client has read the answer.
constexpr auto kLingerLimit = std::chrono::seconds(2);

// "HTTP/1.1 200 OK\r\n" for every status, built once.
const std::array<std::string, 600>& status_lines() {
  static const auto lines = [] {
    std::array<std::string, 600> out;
    for (unsigned code = 100; code < out.size(); ++code) {
      auto reason = http::obsolete_reason(static_cast<http::status>(code));
      if (reason == "<unknown-status>") reason = "Unknown";
      out[code] = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
    }
    return out;
  }();
  return lines;
}

}  // namespace

class Session;

class Worker {
 public:
  explicit Worker(std::size_t index) : index(index), ioc(1), guard(asio::make_work_guard(ioc)) {}

  std::size_t index;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::mutex mutex;  // sessions: a session may be destroyed on another thread (see DedupCache::wait)
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::atomic<std::uint64_t> served{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& worker, Router& router, const ServerOptions& options, const std::atomic<bool>& stopping,
          tcp::socket socket, asio::ssl::context* tls)
      : worker_(worker),
        router_(router),
        options_(options),
        stopping_(stopping),
        socket_(std::move(socket), tls),
        idle_timer_(socket_.get_executor()),
        delay_timer_(socket_.get_executor()) {}

  ~Session() {
    std::lock_guard lock(worker_.mutex);
    worker_.sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard lock(worker_.mutex);
      worker_.sessions.emplace(this, weak_from_this());
    }
    if (stopping_.load()) return close();
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    deadline_ = Clock::now() + options_.idle_timeout;
    arm_timer();  // also bounds the TLS handshake
    socket_.async_handshake([self = shared_from_this()](error_code ec) {
      if (ec) return self->close();
      self->parse();
    });
  }

  // The server is stopping: an idle connection is closed now, a busy one after its answer.
  void on_stop() {
    if (!in_request_ && !busy_ && !writing_) close();
  }

 private:
  void arm_timer() {
    idle_timer_.expires_at(deadline_);
    idle_timer_.async_wait([self = shared_from_this()](error_code ec) { self->on_timer(ec); });
  }

  // The deadline moves without touching the timer; the timer catches up when it fires.
  void on_timer(error_code ec) {
    if (ec || closed_) return;
    const auto now = Clock::now();
    if (busy_) deadline_ = now + options_.idle_timeout;  // the server is the one keeping it waiting
    if (now >= deadline_) {
      if (options_.log_requests && in_request_ && !lingering_) std::fprintf(stderr, "connection timed out\n");
      return close();
    }
    arm_timer();
  }

  void do_read() {
    socket_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = shared_from_this()](error_code ec, std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(error_code ec, std::size_t n) {
    if (ec) return close();
    buffer_.commit(n);
    if (!in_request_) {
      in_request_ = true;
      deadline_ = Clock::now() + options_.idle_timeout;
    }
    parse();
  }

  void parse() {
    if (closed_) return;
    for (;;) {
      if (buffer_.size() == 0) {
        if (stopping_.load() && !in_request_) return close();
        return do_read();
      }
      if (!parser_) {
        parser_.emplace(request_);
        parser_->eager(true);
        parser_->header_limit(kHeaderLimit);
        parser_->body_limit(options_.max_body_bytes);
        continue_sent_ = false;
        in_request_ = true;
      }
      error_code ec;
      const auto used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) return do_read();
      if (ec) return fail_request(ec);
      if (parser_->is_done()) return on_request();
      if (parser_->is_header_done() && request_.expect_continue && !continue_sent_) return send_continue();
      if (used == 0) return do_read();
    }
  }

  void send_continue() {
    continue_sent_ = true;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        if (ec) return self->close();
                        self->parse();
                      });
  }

  // A request Beast could not parse, or a body over the limit: answer, then close, since the rest
  // of the input cannot be framed.
  void fail_request(error_code ec) {
    parser_.reset();
    started_ = Clock::now();
    exchange_.reset();
    exchange_.label = ServerRoute::bad_request;
    auto& reply = exchange_.reply;
    reply.location.clear();
    reply.allow.clear();
    if (ec == http::error::body_limit) {
      reply.status = 413;
      reply.content_type = "application/json";
      reply.body = protocol::encode_detail("Request body too large");
    } else {
      reply.status = 400;
      reply.content_type = "text/plain; charset=utf-8";
      reply.body = "Invalid HTTP request received.";
    }
    request_.keep_alive = false;
    if (request_.verb == http::verb::head) request_.verb = http::verb::unknown;
    write_reply();
  }

  void on_request() {
    started_ = Clock::now();
    request_.keep_alive = parser_->keep_alive();
    parser_.reset();
    exchange_.reset();
    advance();
  }

  void advance() {
    Router::Next next;
    try {
      next = router_.step(request_, exchange_);
    } catch (const std::exception& e) {
      // Out of memory or a bug below: answer as uvicorn does for an unhandled error, never crash.
      std::fprintf(stderr, "hf3fs-meta-server: %s %s failed: %s\n", request_.method.c_str(),
                   request_.target.c_str(), e.what());
      exchange_.claim.reset();
      auto& reply = exchange_.reply;
      reply.status = 500;
      reply.content_type = "text/plain; charset=utf-8";
      reply.body = "Internal Server Error";
      reply.location.clear();
      reply.allow.clear();
      return write_reply();
    }
    switch (next) {
      case Router::Next::reply:
        return write_reply();
      case Router::Next::close:
        if (options_.log_requests) {
          std::fprintf(stderr, "%s %s -> connection closed (fault)\n", request_.method.c_str(),
                       request_.target.c_str());
        }
        exchange_.reset();
        return close();
      case Router::Next::delay:
        busy_ = true;
        delay_timer_.expires_after(exchange_.action.delay);
        delay_timer_.async_wait([self = shared_from_this()](error_code ec) {
          self->busy_ = false;
          if (ec || self->closed_) return;
          self->advance();
        });
        return;
      case Router::Next::wait:
        busy_ = true;
        router_.dedup().wait(exchange_.wait_entry, [self = shared_from_this()] {
          asio::post(self->socket_.get_executor(), [self] {
            self->busy_ = false;
            if (!self->closed_) self->advance();
          });
        });
        return;
    }
  }

  void write_reply() {
    const auto& reply = exchange_.reply;
    const auto now = Clock::now();
    const auto latency = now - started_;
    router_.metrics().record(worker_.index, exchange_.label, reply.status, latency);
    if (options_.log_requests) {
      std::fprintf(stderr, "%s %s -> %d (%.3f ms)\n", request_.method.c_str(), request_.target.c_str(),
                   reply.status, std::chrono::duration<double, std::milli>(latency).count());
    }
    keep_open_ = request_.keep_alive && !stopping_.load();

    header_.clear();
    const int status = reply.status >= 100 && reply.status < 600 ? reply.status : 500;
    header_ += status_lines()[static_cast<std::size_t>(status)];
    if (!reply.content_type.empty()) {
      header_ += "content-type: ";
      header_ += reply.content_type;
      header_ += "\r\n";
    }
    if (status != 204 && status != 304) {
      header_ += "content-length: ";
      char digits[24];
      auto [end, ec] = std::to_chars(digits, digits + sizeof digits, reply.body.size());
      (void)ec;
      header_.append(digits, end);
      header_ += "\r\n";
    }
    if (!reply.location.empty()) {
      header_ += "location: ";
      header_ += reply.location;
      header_ += "\r\n";
    }
    if (!reply.allow.empty()) {
      header_ += "allow: ";
      header_ += reply.allow;
      header_ += "\r\n";
    }
    if (status == 401) header_ += "www-authenticate: Bearer\r\n";  // RFC 6750
    if (!reply.retry_after.empty()) {
      header_ += "retry-after: ";
      header_ += reply.retry_after;
      header_ += "\r\n";
    }
    header_ += router_.dedup_header();
    if (!keep_open_) header_ += "connection: close\r\n";
    header_ += "\r\n";

    const bool send_body = request_.verb != http::verb::head && status != 204 && status != 304;
    std::array<asio::const_buffer, 2> buffers{asio::buffer(header_),
                                              send_body ? asio::buffer(reply.body) : asio::const_buffer()};
    writing_ = true;
    deadline_ = now + options_.idle_timeout;
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, std::size_t) {
      self->on_write(ec);
    });
  }

  void on_write(error_code ec) {
    writing_ = false;
    exchange_.reset();
    if (ec) return close();
    worker_.served.fetch_add(1, std::memory_order_relaxed);
    // One huge request must not pin its memory for the rest of a keep-alive connection.
    if (request_.body.capacity() > kKeepCapacity) std::string().swap(request_.body);
    if (exchange_.reply.body.capacity() > kKeepCapacity) std::string().swap(exchange_.reply.body);
    if (!keep_open_ || stopping_.load()) return linger();
    in_request_ = buffer_.size() > 0;
    deadline_ = Clock::now() + options_.idle_timeout;
    parse();
  }

  // Half-close, then read and discard until the client closes too (or a short deadline passes).
  void linger() {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    lingering_ = true;
    in_request_ = false;
    deadline_ = Clock::now() + std::min<Clock::duration>(options_.idle_timeout, kLingerLimit);
    arm_timer();  // the deadline moved earlier: the lazy timer would fire too late
    drain();
  }

  void drain() {
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    socket_.close(ec);
    idle_timer_.cancel();
    delay_timer_.cancel();
  }

  Worker& worker_;
  Router& router_;
  const ServerOptions& options_;
  const std::atomic<bool>& stopping_;
  SessionStream socket_;
  asio::steady_timer idle_timer_;
  asio::steady_timer delay_timer_;
  boost::beast::flat_buffer buffer_;
  Request request_;
  std::optional<RequestParser> parser_;
  Exchange exchange_;
  std::string header_;
  Clock::time_point deadline_;
  Clock::time_point started_;
  bool in_request_ = false;
  bool continue_sent_ = false;
  bool busy_ = false;
  bool writing_ = false;
  bool keep_open_ = true;
  bool lingering_ = false;
  bool closed_ = false;
};

Server::Server(const ServerOptions& options, Router& router) : options_(options), router_(router) {
  if (!options.tls_cert.empty()) {
    // TLS 1.2 and 1.3 only; OpenSSL's default ciphers. Throws if a file cannot be read or the key
    // does not match the certificate.
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    tls_->use_certificate_chain_file(options.tls_cert);
    tls_->use_private_key_file(options.tls_key, asio::ssl::context::pem);
  }
  const unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>(i));
  (void)status_lines();
}

Server::~Server() = default;

tcp::endpoint Server::listen() {
  auto& ioc = workers_.front()->ioc;
  tcp::resolver resolver(ioc);
  const auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                        tcp::resolver::numeric_service | tcp::resolver::passive);
  const tcp::endpoint endpoint = *results.begin();
  acceptor_ = std::make_unique<tcp::acceptor>(ioc);
  acceptor_->open(endpoint.protocol());
  acceptor_->set_option(asio::socket_base::reuse_address(true));
  acceptor_->bind(endpoint);
  acceptor_->listen(asio::socket_base::max_listen_connections);
  do_accept();
  return acceptor_->local_endpoint();
}

void Server::do_accept() {
  auto& worker = *workers_[next_worker_];
  next_worker_ = (next_worker_ + 1) % workers_.size();
  acceptor_->async_accept(worker.ioc, [this, &worker](error_code ec, tcp::socket socket) {
    if (stopping_.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      std::fprintf(stderr, "hf3fs-meta-server: accept failed: %s\n", ec.message().c_str());
      // Out of descriptors: give connections time to close instead of spinning.
      auto timer = std::make_shared<asio::steady_timer>(acceptor_->get_executor(), std::chrono::milliseconds(50));
      timer->async_wait([this, timer](error_code) {
        if (!stopping_.load()) do_accept();
      });
      return;
    }
    auto session = std::make_shared<Session>(worker, router_, options_, stopping_, std::move(socket), tls_.get());
    asio::post(worker.ioc, [session] { session->start(); });
    do_accept();
  });
}

void Server::run() {
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < workers_.size(); ++i) {
    threads.emplace_back([worker = workers_[i].get()] { worker->ioc.run(); });
  }
  workers_.front()->ioc.run();
  for (auto& thread : threads) thread.join();
}

void Server::stop() {
  if (stopping_.exchange(true)) return;
  asio::post(workers_.front()->ioc, [this] {
    error_code ec;
    if (acceptor_) acceptor_->close(ec);
  });
  for (auto& worker : workers_) {
    asio::post(worker->ioc, [w = worker.get()] {
      w->guard.reset();
      std::vector<std::shared_ptr<Session>> sessions;
      {
        std::lock_guard lock(w->mutex);
        for (auto& [raw, weak] : w->sessions) {
          if (auto session = weak.lock()) sessions.push_back(std::move(session));
        }
      }
      for (auto& session : sessions) session->on_stop();
    });
  }
}

std::uint64_t Server::requests_served() const noexcept {
  std::uint64_t total = 0;
  for (const auto& worker : workers_) total += worker->served.load(std::memory_order_relaxed);
  return total;
}

}  // namespace hf3fs_meta::server
