#include "server.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <limits>
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

#include "hf3fs_meta/protocol_server.hpp"
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
// Buffers above this are freed after each answer: idle connections must not pin what their largest
// request needed (the body budget counts bodies only while they are held).
constexpr std::size_t kKeepCapacity = 64 * 1024;
// A session's idle_since_ while the server is working on its request: never evicted then.
constexpr std::int64_t kWorking = std::numeric_limits<std::int64_t>::max();

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
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
  // Worker 0 holds the acceptor, which counts as one of its connections.
  explicit Worker(std::size_t index)
      : index(index), ioc(1), guard(asio::make_work_guard(ioc)), connections(index == 0 ? 1 : 0) {}

  void join() noexcept { connections.fetch_add(1, std::memory_order_relaxed); }
  void leave() noexcept { connections.fetch_sub(1, std::memory_order_relaxed); }

  std::size_t index;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::mutex mutex;  // sessions: a session may be destroyed on another thread (see DedupCache::wait)
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::atomic<std::uint64_t> served{0};
  // Live connections, counted from admission to the session's end (Server::pick_worker).
  std::atomic<std::uint64_t> connections;
};

// What every session shares: the backend, the options, and the accounting of the server's limits.
struct SessionContext {
  Backend& backend;
  const ServerOptions& options;
  const std::atomic<bool>& stopping;
  BodyBudget& body_budget;
  LimitCounters& limits;
  asio::ssl::context* tls;  // null: plain HTTP
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& worker, SessionContext& context, tcp::socket socket)
      : worker_(worker),
        context_(context),
        backend_(context.backend),
        options_(context.options),
        stopping_(context.stopping),
        socket_(std::move(socket), context.tls),
        idle_timer_(socket_.get_executor()),
        delay_timer_(socket_.get_executor()) {
    context_.limits.connections.fetch_add(1, std::memory_order_relaxed);
    exchange_.thread = worker.index;
    exchange_.body_share = BodyShare{&context_.body_budget, &body_held_};
  }

  ~Session() {
    context_.body_budget.give_back(std::exchange(body_held_, 0));
    context_.limits.connections.fetch_sub(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(worker_.mutex);
      worker_.sessions.erase(this);
    }
    worker_.leave();  // counted by Server::pick_worker
  }

  void start() {
    {
      std::lock_guard lock(worker_.mutex);
      worker_.sessions.emplace(this, weak_from_this());
    }
    guarded([&] {
      if (stopping_.load()) return close();
      error_code ec;
      socket_.set_option(tcp::no_delay(true), ec);
      deadline_ = Clock::now() + options_.idle_timeout;
      arm_timer();  // also bounds the TLS handshake
      socket_.async_handshake([self = shared_from_this()](error_code ec) {
        self->guarded([&] {
          if (ec) return self->close();
          self->parse();
        });
      });
    });
  }

  // The server is stopping: an idle connection is closed now, a busy one after its answer.
  void on_stop() {
    if (!in_request_ && !busy_ && !writing_) close();
  }

  // Since when the connection has been idle (steady clock, ns; a connection that never sent a byte
  // is idle since it was accepted), or kWorking. Read by the acceptor on another thread.
  std::int64_t idle_since() const noexcept { return idle_since_.load(std::memory_order_relaxed); }
  // Claims the connection for eviction; false if another accept claimed it already.
  bool claim_for_eviction() noexcept { return !evicting_.exchange(true, std::memory_order_relaxed); }
  bool evicting() const noexcept { return evicting_.load(std::memory_order_relaxed); }
  tcp::socket::executor_type executor() { return socket_.get_executor(); }
  // On the session's own thread: closes it unless the server started working on a request since.
  void evict() {
    if (closed_ || busy_ || writing_ || idle_since() == kWorking) {
      evicting_.store(false, std::memory_order_relaxed);  // busy again since the scan: a candidate later
      return;
    }
    context_.limits.connections_evicted.fetch_add(1, std::memory_order_relaxed);
    if (options_.log_requests) std::fprintf(stderr, "idle connection closed to admit a new one\n");
    close();
  }

 private:
  // Runs one handler's work: an exception (out of memory, a bug) closes this connection and is
  // logged; it never reaches the io_context, which would stop the server.
  template <class F>
  void guarded(F&& work) noexcept {
    try {
      work();
    } catch (const std::exception& e) {
      fail_session(e.what());
    } catch (...) {
      fail_session("unknown exception");
    }
  }
  void fail_session(const char* what) noexcept {
    context_.limits.session_failures.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "%s: connection closed after an error: %s\n", options_.program.c_str(), what);
    close();
  }

  void mark_idle() noexcept { idle_since_.store(now_ns(), std::memory_order_relaxed); }
  void mark_working() noexcept { idle_since_.store(kWorking, std::memory_order_relaxed); }

  void arm_timer() {
    idle_timer_.expires_at(deadline_);
    idle_timer_.async_wait([self = shared_from_this()](error_code ec) { self->guarded([&] { self->on_timer(ec); }); });
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
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              self->guarded([&] { self->on_read(ec, n); });
                            });
  }

  void on_read(error_code ec, std::size_t n) {
    if (ec) return close();
    buffer_.commit(n);
    if (!busy_ && !writing_) mark_idle();  // a byte arrived: idle time counts from the last one
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
        parser_.emplace(request_, context_.body_budget, body_held_);
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
                        self->guarded([&] {
                          if (ec) return self->close();
                          self->parse();
                        });
                      });
  }

  // A request Beast could not parse, or a body over the limit: answer, then close, since the rest
  // of the input cannot be framed.
  void fail_request(error_code ec) {
    const bool over_budget = parser_ && parser_->over_budget();
    parser_.reset();
    mark_working();
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
    } else if (over_budget) {
      context_.limits.body_refused.fetch_add(1, std::memory_order_relaxed);
      reply.status = 503;
      reply.content_type = "application/json";
      reply.body = protocol::encode_detail(body_budget_full_text(options_.max_inflight_body_bytes));
      reply.retry_after = "1";
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
    mark_working();
    started_ = Clock::now();
    request_.keep_alive = parser_->keep_alive();
    parser_.reset();
    exchange_.reset();
    advance();
  }

  void advance() {
    Backend::Next next;
    try {
      next = backend_.step(request_, exchange_);
    } catch (const std::exception& e) {
      // Out of memory or a bug below: answered, never a crash.
      std::fprintf(stderr, "%s: %s %s failed: %s\n", options_.program.c_str(), request_.method.c_str(),
                   request_.target.c_str(), e.what());
      exchange_.claim.reset();
      exchange_.reply.set_unhandled_error();
      return write_reply();
    }
    switch (next) {
      case Backend::Next::reply:
        return write_reply();
      case Backend::Next::fail:
        throw std::runtime_error("injected by a fault rule");
      case Backend::Next::close:
        if (options_.log_requests) {
          std::fprintf(stderr, "%s %s -> connection closed (fault)\n", request_.method.c_str(),
                       request_.target.c_str());
        }
        exchange_.reset();
        return close();
      case Backend::Next::delay:
        busy_ = true;
        delay_timer_.expires_after(exchange_.action.delay);
        delay_timer_.async_wait([self = shared_from_this()](error_code ec) {
          self->guarded([&] {
            self->busy_ = false;
            if (ec || self->closed_) return;
            self->advance();
          });
        });
        return;
      case Backend::Next::durable:
      case Backend::Next::wait: {
        busy_ = true;
        backend_.await(next, request_, exchange_, [self = shared_from_this()] {
          asio::post(self->socket_.get_executor(), [self] {
            self->guarded([&] {
              self->busy_ = false;
              if (!self->closed_) self->advance();
            });
          });
        });
        return;
      }
    }
  }

  void write_reply() {
    const auto& reply = exchange_.reply;
    const std::string_view body = reply.file ? reply.file->bytes() : std::string_view(reply.body);
    const auto now = Clock::now();
    const auto latency = now - started_;
    backend_.metrics().record(worker_.index, exchange_.label, reply.status, latency);
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
      auto [end, ec] = std::to_chars(digits, digits + sizeof digits, body.size());
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
    if (!reply.leader.empty()) {
      header_ += kLeaderHeader;
      header_ += ": ";
      header_ += reply.leader;
      header_ += "\r\n";
    }
    header_ += backend_.answer_headers();
    // The echo (docs/protocol.md, "Namespaces"): the answer comes from the namespace the request
    // named. A value that is no namespace name was refused (400) and is never echoed.
    if (request_.ns_headers == 1 && valid_namespace_name(request_.ns)) {
      header_ += kNamespaceHeader;
      header_ += ": ";
      header_ += request_.ns;
      header_ += "\r\n";
    }
    if (!keep_open_) header_ += "connection: close\r\n";
    header_ += "\r\n";

    const bool send_body = request_.verb != http::verb::head && status != 204 && status != 304;
    // A file's body goes a chunk per write, each one's progress moving the idle deadline.
    body_sent_ = !send_body ? 0 : reply.file ? std::min(body.size(), kFileChunk) : body.size();
    std::array<asio::const_buffer, 2> buffers{asio::buffer(header_), asio::buffer(body.data(), body_sent_)};
    if (!send_body) exchange_.reply.file.reset();  // a HEAD's: nothing more to write
    writing_ = true;
    // Idle from now on once written: stamped here, before the client can have the answer and send
    // anything else, so that the order of idleness is the order in which the answers left.
    answered_at_ = now_ns();
    deadline_ = now + options_.idle_timeout;
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, std::size_t) {
      self->guarded([&] { self->on_write(ec); });
    });
  }

  // The next chunk of a file's body, if any is left; whether one was sent.
  bool write_more_of_file() {
    const auto& file = exchange_.reply.file;
    if (!file || body_sent_ >= file->bytes().size()) return false;
    const std::string_view chunk = file->bytes().substr(body_sent_, kFileChunk);
    body_sent_ += chunk.size();
    deadline_ = Clock::now() + options_.idle_timeout;
    asio::async_write(socket_, asio::buffer(chunk.data(), chunk.size()), [self = shared_from_this()](error_code ec, std::size_t) {
      self->guarded([&] { self->on_write(ec); });
    });
    return true;
  }

  void on_write(error_code ec) {
    if (!ec && write_more_of_file()) return;
    writing_ = false;
    exchange_.reset();
    if (ec) return close();
    worker_.served.fetch_add(1, std::memory_order_relaxed);
    // Answered: its body no longer counts against the budget, nor pins memory for the rest of a
    // keep-alive connection.
    context_.body_budget.give_back(std::exchange(body_held_, 0));
    request_.body.clear();
    if (request_.body.capacity() > kKeepCapacity) std::string().swap(request_.body);
    idle_since_.store(answered_at_, std::memory_order_relaxed);
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
      self->guarded([&] {
        if (ec) return self->close();
        self->drain();
      });
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
  SessionContext& context_;
  Backend& backend_;
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
  std::size_t body_sent_ = 0;  // of the answer being written
  static constexpr std::size_t kFileChunk = std::size_t{4} << 20;
  Clock::time_point started_;
  bool in_request_ = false;
  bool continue_sent_ = false;
  bool busy_ = false;
  bool writing_ = false;
  bool keep_open_ = true;
  bool lingering_ = false;
  bool closed_ = false;
  std::uint64_t body_held_ = 0;  // bytes of request_.body (and the backend's copies of it) taken from the body budget
  std::int64_t answered_at_ = 0;  // when the last answer was handed to the socket (steady clock, ns)
  std::atomic<std::int64_t> idle_since_{now_ns()};
  std::atomic<bool> evicting_{false};
};

std::size_t effective_max_connections(std::size_t requested, std::uint64_t open_files) noexcept {
  const std::uint64_t room = open_files > 2 * kReservedDescriptors ? open_files - kReservedDescriptors
                                                                   : open_files / 2;
  return static_cast<std::size_t>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(requested, room)));
}

namespace {

// Raises the soft descriptor limit to the hard one (as nginx's worker_rlimit_nofile does) and
// returns it.
std::uint64_t open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = std::min<rlim_t>(limit.rlim_max, rlim_t{1} << 20);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? std::uint64_t{1} << 20 : static_cast<std::uint64_t>(limit.rlim_cur);
}

}  // namespace

Server::Server(const ServerOptions& options, Backend& backend)
    : options_(options),
      backend_(backend),
      body_budget_(backend.metrics().limits.body_bytes_in_flight, options.max_inflight_body_bytes),
      context_(std::make_unique<SessionContext>(
          SessionContext{backend, options, stopping_, body_budget_, backend.metrics().limits, nullptr})),
      max_connections_(effective_max_connections(options.max_connections, open_files_limit())) {
  if (!options.tls_cert.empty()) {
    // TLS 1.2 and 1.3 only; OpenSSL's default ciphers. Throws if a file cannot be read or the key
    // does not match the certificate.
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    tls_->use_certificate_chain_file(options.tls_cert);
    tls_->use_private_key_file(options.tls_key, asio::ssl::context::pem);
    context_->tls = tls_.get();
  }
  const unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>(i));
  (void)status_lines();
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Server::~Server() {
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

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
  protocol_ = endpoint.protocol();
  do_accept();
  return acceptor_->local_endpoint();
}

void Server::do_accept() {
  // Accepted on worker 0, the acceptor's, then moved to the worker admit() picks: which one can
  // only be known once the connection is there (a worker may be blocked inline meanwhile).
  acceptor_->async_accept([this](error_code ec, tcp::socket socket) {
    if (stopping_.load() || ec == asio::error::operation_aborted) return;
    try {
      if (ec == asio::error::no_descriptors || ec.value() == ENFILE) {
        on_out_of_descriptors();
      } else if (ec) {
        backend_.metrics().limits.accept_failures.fetch_add(1, std::memory_order_relaxed);
        std::fprintf(stderr, "%s: accept failed: %s\n", options_.program.c_str(), ec.message().c_str());
      } else {
        admit(std::move(socket));
      }
    } catch (const std::exception& e) {
      // Out of memory for one connection: it is dropped (its socket closes), the listener goes on.
      backend_.metrics().limits.accept_failures.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "%s: accepting a connection failed: %s\n", options_.program.c_str(), e.what());
    }
    do_accept();
  });
}

// The worker with the fewest connections, counting the newcomer there. Only the acceptor's thread
// admits, so no two admissions race; a count that falls meanwhile only makes the choice a little stale.
Worker& Server::pick_worker() {
  Worker* best = workers_.front().get();
  for (auto& worker : workers_) {
    if (worker->connections.load(std::memory_order_relaxed) < best->connections.load(std::memory_order_relaxed)) {
      best = worker.get();
    }
  }
  best->join();
  return *best;
}

void Server::admit(tcp::socket socket) {
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // given up earlier: take it back
  auto& limits = backend_.metrics().limits;
  Worker* place = nullptr;  // the evicted connection's worker
  if (limits.connections.load(std::memory_order_relaxed) >= max_connections_ && !(place = evict_longest_idle())) {
    // Every connection is in the middle of a request: the newcomer is the one turned away.
    limits.connections_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A newcomer that evicted takes the evicted one's worker: there, the eviction runs before the
  // newcomer is served, so that no request is served over the limit.
  Worker& worker = place ? *place : pick_worker();
  if (place) place->join();
  std::shared_ptr<Session> session;
  try {
    if (&worker != workers_.front().get()) {
      const int fd = socket.release();
      tcp::socket moved(worker.ioc);
      error_code ec;
      moved.assign(protocol_, fd, ec);
      if (ec) {
        ::close(fd);
        throw boost::system::system_error(ec, "moving the connection to its I/O thread");
      }
      socket = std::move(moved);
    }
    session = std::make_shared<Session>(worker, *context_, std::move(socket));
  } catch (...) {
    worker.leave();  // the session, which would have, was never made
    throw;
  }
  asio::post(worker.ioc, [session] { session->start(); });
}

// accept() failed for want of a descriptor (other files, or a limit lowered under us): the client
// is still waiting in the backlog. Free the spare to take it, and close the longest-idle connection
// so that the spare can be taken back at the next accept.
void Server::on_out_of_descriptors() {
  backend_.metrics().limits.accept_failures.fetch_add(1, std::memory_order_relaxed);
  evict_longest_idle();
  if (spare_fd_ >= 0) {
    ::close(std::exchange(spare_fd_, -1));
    const int fd = ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      tcp::socket socket(workers_.front()->ioc);
      error_code ec;
      socket.assign(protocol_, fd, ec);
      if (ec) {
        ::close(fd);
      } else {
        admit(std::move(socket));
      }
    }
  }
}

Worker* Server::evict_longest_idle() {
  // The scan holds each worker's lock in turn; only a weak reference leaves it, so that no session
  // is destroyed (which takes that lock) while it is held.
  std::weak_ptr<Session> candidate;
  Worker* home = nullptr;
  std::int64_t oldest = kWorking;
  for (auto& worker : workers_) {
    std::lock_guard lock(worker->mutex);
    for (auto& [raw, weak] : worker->sessions) {
      const std::int64_t since = raw->idle_since();
      if (since < oldest && !raw->evicting()) {
        candidate = weak;
        home = worker.get();
        oldest = since;
      }
    }
  }
  auto victim = candidate.lock();
  if (!victim || !victim->claim_for_eviction()) return nullptr;
  auto executor = victim->executor();
  asio::post(executor, [victim = std::move(victim)] { victim->evict(); });
  return home;
}

void Server::run() {
  for (auto& worker : workers_) backend_.thread_started(worker->index, worker->ioc);
  const auto run = [this](Worker* worker) {
    worker->ioc.run();
    backend_.thread_ended(worker->index);
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < workers_.size(); ++i) threads.emplace_back(run, workers_[i].get());
  run(workers_.front().get());
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
