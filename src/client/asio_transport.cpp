// AsioTransport: CurlTransport's requests written and read by us on asio sockets, parsed by
// Beast's response parser, on an io_context (HTTP/1.1 keep-alive, plain http:// only).
//
// Why not libcurl: under load every system call is dear, and libcurl makes two polls per request
// of its own (a liveness check of a reused connection, one after sending). Here a request costs a
// sendmsg and, once the answer is there, a recvmsg or two:
// - a busy connection waits with wait_read for its answer, which is then read without blocking until
//   the parser is done or the socket would block. (asio re-arms such a wait with an EPOLL_CTL_MOD,
//   one call per wait, as async_read_some would spend a speculative recv: the floor on asio's
//   reactor.) An idle connection is not watched, so that nothing is left in the io_context once
//   nothing is in flight (its owner's run() returns; the proxy's shutdown counts on it); it is
//   checked with a recv(MSG_PEEK) before reuse, in case the peer closed it meanwhile (a restarted
//   server): a request written to it would fail as sent, which an allocate cannot repeat, where a
//   fresh connection is refused, unsent, and ridden out. libcurl polls every reused connection so.
// - the request (head and body) goes out in one non-blocking write; only a write that would block
//   waits for wait_write.
// - timeouts: one timer for all transfers, armed at the earliest deadline and moved only to an
//   earlier one (each move of the io_context's earliest timer is a timerfd_settime). When it fires,
//   it times out what is due and re-arms at the next deadline; a finished transfer leaves it alone,
//   except the last one in flight, which cancels it (no work left in the io_context).
//
// Lifetimes: handlers hold the Connection they wait on and a weak pointer to the Core; a closed
// connection (its transfer failed, or the transport shut down) and a closed Core do nothing. All on
// the io_context's one thread: no locks.
#include <sys/socket.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/async_transport.hpp"
#include "client/core_transport.hpp"
#include "internal/answer_limit.hpp"
#include "internal/endpoint_url.hpp"

namespace hf3fs_meta::internal {

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// As many idle connections per endpoint as CurlTransport keeps idle handles.
constexpr std::size_t kMaxIdleConnections = 64;
constexpr std::size_t kReadChunk = 16384;

struct Transfer;
struct Endpoint;

struct Connection {
  Connection(asio::io_context& ioc, Endpoint* e) : socket(ioc), endpoint(e) {}
  tcp::socket socket;
  Endpoint* endpoint;
  boost::beast::flat_buffer buffer;
  Transfer* transfer = nullptr;  // the one it serves; nullptr: idle
  bool read_armed = false;       // its wait_read is pending
  bool closed = false;           // no handler acts on it any more
};

// One base URL: where it is, how it is named in requests, its idle connections.
struct Endpoint {
  std::string base;         // normalized: "http://h:1/prefix"
  std::string host;         // to resolve (an IPv6 literal without its brackets)
  std::string port;
  std::string host_header;  // "h:1" as written
  std::string prefix;       // "/prefix" or ""
  std::vector<tcp::endpoint> addresses;  // resolved once; cleared when no address accepted a connect
  bool resolving = false;
  std::vector<Transfer*> waiting;  // for the resolve
  std::vector<std::shared_ptr<Connection>> idle;  // LIFO
};

enum class Phase { resolving, connecting, writing, reading };

using Parser = http::response_parser<http::string_body>;

struct Transfer {
  const HttpRequest* request = nullptr;
  AsyncTransport::Done done;
  Endpoint* endpoint = nullptr;
  Clock::time_point connect_deadline;
  Clock::time_point total_deadline;
  std::chrono::milliseconds connect_ms{};
  std::chrono::milliseconds total_ms{};
  Phase phase = Phase::resolving;
  std::shared_ptr<Connection> conn;
  bool reused = false;
  std::size_t address = 0;  // the one being tried
  std::string head;
  std::size_t written = 0;  // of head and body
  std::optional<Parser> parser;
  std::list<Transfer>::iterator self;

  bool get() const { return request->method == "GET"; }
  std::size_t size() const { return head.size() + (get() ? 0 : request->body.size()); }
  Clock::time_point deadline() const {
    return phase == Phase::resolving || phase == Phase::connecting ? std::min(connect_deadline, total_deadline)
                                                                   : total_deadline;
  }
};

std::chrono::milliseconds at_least_1ms(std::chrono::milliseconds ms) { return std::max(ms, std::chrono::milliseconds{1}); }

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(asio::io_context& ioc, std::string base_url, std::size_t max_answer_bytes)
      : delays(ioc),
        ioc_(ioc),
        base_url_(std::move(base_url)),
        max_answer_bytes_(max_answer_bytes),
        timer_(ioc),
        resolver_(ioc) {}
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core() { shutdown(); }

  asio::io_context& ioc() { return ioc_; }
  bool closed() const { return closed_; }
  DelayTimers delays;  // after()'s (CoreTransport)

  void async_post(const HttpRequest& request, const AttemptTimeouts& timeouts, AsyncTransport::Done done) {
    const auto keep = shared_from_this();
    in_post_ = true;
    Transfer& t = transfers_.emplace_back();
    t.self = std::prev(transfers_.end());
    t.request = &request;
    t.done = std::move(done);
    const auto now = Clock::now();
    t.connect_ms = at_least_1ms(timeouts.connect);
    t.total_ms = at_least_1ms(timeouts.total);
    t.connect_deadline = now + t.connect_ms;
    t.total_deadline = now + t.total_ms;
    std::string problem;
    t.endpoint = endpoint_for(request.endpoint.empty() ? std::string_view(base_url_) : request.endpoint, problem);
    if (t.endpoint == nullptr) {
      fail(t, errc::connection_failed, false, false, std::move(problem));
    } else {
      build_head(t);
      start(t);
    }
    in_post_ = false;
  }

  // Abandons every transfer (no `done` runs) and closes every connection. Idempotent.
  void shutdown() {
    if (closed_) return;
    closed_ = true;
    for (Transfer& t : transfers_) {
      if (t.conn) close(*t.conn);
    }
    transfers_.clear();
    for (auto& e : endpoints_) {
      for (auto& c : e->idle) close(*c);
      e->idle.clear();
      e->waiting.clear();
    }
    timer_.cancel();  // never fails for a timer, so never throws (the error_code overload is deprecated)
    resolver_.cancel();
    delays.clear();
  }

 private:
  // The endpoint of `url` (made on first use), or nullptr with `problem` said.
  Endpoint* endpoint_for(std::string_view url, std::string& problem) {
    while (!url.empty() && url.back() == '/') url.remove_suffix(1);
    for (auto& e : endpoints_) {
      if (e->base == url) return e.get();
    }
    if (auto bad = endpoint_problem(url)) {
      problem = "not a usable URL: " + *bad;
      return nullptr;
    }
    const std::size_t scheme = endpoint_scheme_length(url);
    if (scheme == 8) {
      problem = "https:// is not supported by the asio transport (use the libcurl one): " + std::string(url);
      return nullptr;
    }
    auto e = std::make_unique<Endpoint>();
    e->base.assign(url);
    std::string_view rest = url.substr(scheme);
    const std::string_view authority = rest.substr(0, rest.find('/'));
    e->prefix.assign(rest.substr(authority.size()));
    e->host_header.assign(authority);
    std::string_view host = authority;
    std::string_view port = "80";
    if (authority.starts_with('[')) {
      const auto close = authority.find(']');
      host = authority.substr(1, close - 1);
      if (close + 1 < authority.size()) port = authority.substr(close + 2);
    } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    e->host.assign(host);
    e->port.assign(port);
    endpoints_.push_back(std::move(e));
    return endpoints_.back().get();
  }

  void build_head(Transfer& t) {
    const HttpRequest& r = *t.request;
    std::string& h = t.head;
    h.reserve(128 + r.path.size() + t.endpoint->prefix.size());
    h.append(t.get() ? "GET " : "POST ").append(t.endpoint->prefix).append(r.path).append(" HTTP/1.1\r\nHost: ");
    h.append(t.endpoint->host_header).append("\r\nContent-Type: application/json\r\n");
    if (!t.get()) h.append("Content-Length: ").append(std::to_string(r.body.size())).append("\r\n");
    for (const HttpHeader& header : r.headers) h.append(header.name).append(": ").append(header.value).append("\r\n");
    h.append("\r\n");
  }

  // " (POST http://h:1/path)": what every message of the transfer ends with, as libcurl's do.
  static std::string request_text(const Transfer& t) {
    std::string out = t.get() ? " (GET " : " (POST ";
    out.append(t.endpoint->base).append(t.request->path).append(")");
    return out;
  }

  // A pooled connection (the newest that is alive), else a fresh one.
  void start(Transfer& t) {
    Endpoint& e = *t.endpoint;
    while (!e.idle.empty()) {
      std::shared_ptr<Connection> c = std::move(e.idle.back());
      e.idle.pop_back();
      if (!alive(*c)) {
        close(*c);
        continue;
      }
      t.conn = std::move(c);
      t.conn->transfer = &t;
      t.reused = true;
      t.phase = Phase::writing;
      watch(t.deadline());
      arm_read(t.conn);
      return write(t);
    }
    start_fresh(t);
  }

  static bool alive(Connection& c) {
    char byte;
    const ssize_t n = ::recv(c.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  void start_fresh(Transfer& t) {
    t.reused = false;
    t.written = 0;
    Endpoint& e = *t.endpoint;
    watch(t.deadline());
    if (!e.addresses.empty()) return connect(t, 0);
    t.phase = Phase::resolving;
    error_code ec;
    const auto literal = asio::ip::make_address(e.host, ec);
    if (!ec) {
      e.addresses.assign(1, tcp::endpoint(literal, static_cast<unsigned short>(std::stoi(e.port))));
      return connect(t, 0);
    }
    e.waiting.push_back(&t);
    if (e.resolving) return;
    e.resolving = true;
    resolver_.async_resolve(e.host, e.port, [weak = weak_from_this(), ep = &e](const error_code& rec,
                                                                               tcp::resolver::results_type results) {
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      core->resolved(*ep, rec, results);
    });
  }

  void resolved(Endpoint& e, const error_code& ec, const tcp::resolver::results_type& results) {
    e.resolving = false;
    for (const auto& entry : results) e.addresses.push_back(entry.endpoint());
    std::vector<Transfer*> waiting = std::move(e.waiting);
    e.waiting.clear();
    for (Transfer* t : waiting) {
      if (closed_) return;  // a `done` destroyed the transport
      if (e.addresses.empty()) {
        std::string message = "could not resolve host " + e.host + ": " + (ec ? ec.message() : "no address");
        fail(*t, errc::connection_failed, false, false, std::move(message));
      } else {
        connect(*t, 0);
      }
    }
  }

  void connect(Transfer& t, std::size_t address) {
    t.phase = Phase::connecting;
    t.address = address;
    t.conn = std::make_shared<Connection>(ioc_, t.endpoint);
    Connection& c = *t.conn;
    c.transfer = &t;
    const tcp::endpoint& to = t.endpoint->addresses[address];
    error_code ec;
    c.socket.open(to.protocol(), ec);
    if (!ec) c.socket.set_option(tcp::no_delay(true), ec);
    if (!ec) c.socket.set_option(asio::socket_base::keep_alive(true), ec);
    if (!ec) c.socket.non_blocking(true, ec);
    if (ec) return fail(t, errc::connection_failed, false, false, "could not open a socket: " + ec.message());
    c.socket.async_connect(to, [weak = weak_from_this(), conn = t.conn](const error_code& cec) {
      if (conn->closed) return;
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      core->connected(*conn->transfer, cec);
    });
  }

  void connected(Transfer& t, const error_code& ec) {
    if (ec) {
      close(*t.conn);
      t.conn.reset();
      Endpoint& e = *t.endpoint;
      if (t.address + 1 < e.addresses.size()) return connect(t, t.address + 1);
      std::string message = "could not connect to " + e.host_header + ": " + ec.message();
      e.addresses.clear();  // resolved again by the next transfer
      return fail(t, errc::connection_failed, false, true, std::move(message));
    }
    arm_read(t.conn);
    t.phase = Phase::writing;
    write(t);
  }

  // Writes what is left of the request without blocking; waits for wait_write only when it would block.
  void write(Transfer& t) {
    Connection& c = *t.conn;
    const std::string_view body = t.get() ? std::string_view() : std::string_view(t.request->body);
    const std::size_t total = t.size();
    while (t.written < total) {
      const std::size_t in_head = std::min(t.written, t.head.size());
      const std::size_t in_body = t.written - in_head;
      const std::array<asio::const_buffer, 2> buffers{asio::buffer(t.head.data() + in_head, t.head.size() - in_head),
                                                      asio::buffer(body.data() + in_body, body.size() - in_body)};
      error_code ec;
      const std::size_t n = c.socket.write_some(buffers, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        c.socket.async_wait(tcp::socket::wait_write, [weak = weak_from_this(), conn = t.conn](const error_code& wec) {
          if (conn->closed) return;
          const auto core = weak.lock();
          if (!core || core->closed_ || conn->transfer == nullptr) return;
          if (wec) return core->broken(*conn->transfer, "send failed: " + wec.message());
          core->write(*conn->transfer);
        });
        return;
      }
      if (ec) {
        // Nothing of it left on a reused connection the peer had closed: a fresh one may carry it.
        if (t.written == 0 && t.reused) {
          close(c);
          t.conn.reset();
          return start_fresh(t);
        }
        return broken(t, "send failed: " + ec.message());
      }
      t.written += n;
    }
    t.phase = Phase::reading;
  }

  void arm_read(const std::shared_ptr<Connection>& conn) {
    if (conn->read_armed) return;
    conn->read_armed = true;
    conn->socket.async_wait(tcp::socket::wait_read, [weak = weak_from_this(), conn](const error_code& ec) {
      if (conn->closed) return;
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      conn->read_armed = false;
      core->readable(conn, ec);
    });
  }

  void readable(const std::shared_ptr<Connection>& conn, const error_code& ec) {
    if (conn->transfer == nullptr) {
      // Idle (not watched: a wait that completed after its transfer ended): it leaves the pool.
      auto& idle = conn->endpoint->idle;
      std::erase(idle, conn);
      return close(*conn);
    }
    Transfer& t = *conn->transfer;
    if (ec) return broken(t, "receive failed: " + ec.message());
    read(t);
  }

  // Reads without blocking until the answer is whole or the socket would block.
  void read(Transfer& t) {
    Connection& c = *t.conn;
    for (;;) {
      error_code ec;
      const std::size_t n = c.socket.read_some(c.buffer.prepare(kReadChunk), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) return arm_read(t.conn);
      if (ec == asio::error::eof) return ended(t);
      if (ec) return broken(t, "receive failed: " + ec.message());
      c.buffer.commit(n);
      if (parse(t)) return;
    }
  }

  Parser& new_parser(Transfer& t) {
    Parser& p = t.parser.emplace();
    p.eager(true);
    p.body_limit(static_cast<std::uint64_t>(max_answer_bytes_));
    return p;
  }

  // Feeds what was read to the parser; true when the transfer ended (answered or failed).
  bool parse(Transfer& t) {
    Connection& c = *t.conn;
    Parser* p = t.parser ? &*t.parser : &new_parser(t);
    while (c.buffer.size() > 0) {
      error_code ec;
      const std::size_t used = p->put(c.buffer.data(), ec);
      c.buffer.consume(used);
      if (ec == http::error::need_more) return false;
      if (ec == http::error::body_limit) {
        broken(t, answer_too_large(max_answer_bytes_), errc::protocol_error);
        return true;
      }
      if (ec) {
        broken(t, "not an HTTP answer: " + ec.message());
        return true;
      }
      if (p->is_done()) {
        const int status = p->get().result_int();
        // An interim answer (100 Continue): only the final one counts.
        if (status >= 100 && status < 200 && status != 101) {
          p = &new_parser(t);
          continue;
        }
        answered(t);
        return true;
      }
      if (used == 0) return false;
    }
    return false;
  }

  // The peer closed the connection: the end of an answer that runs until the close, else a failure.
  void ended(Transfer& t) {
    if (t.parser && t.parser->is_header_done() && !t.parser->is_done()) {
      error_code ec;
      t.parser->put_eof(ec);
      if (!ec && t.parser->is_done()) {
        return answered(t, /*reusable=*/false);
      }
    }
    broken(t, "the connection closed before an answer");
  }

  void answered(Transfer& t, bool reusable = true) {
    Parser& p = *t.parser;
    auto& message = p.get();
    HttpResponse response;
    response.status = message.result_int();
    for (const auto& field : message) {
      response.headers.push_back({std::string(field.name_string()), std::string(field.value())});
      if (field.name() == http::field::content_type) response.content_type.assign(field.value());
    }
    response.body = std::move(message.body());
    const std::shared_ptr<Connection> conn = std::move(t.conn);
    conn->transfer = nullptr;
    // Reused only when the answer ended cleanly where the request was whole and nothing follows it.
    reusable = reusable && p.keep_alive() && t.phase == Phase::reading && conn->buffer.size() == 0;
    t.parser.reset();
    Endpoint& e = *conn->endpoint;
    if (reusable && e.idle.size() < kMaxIdleConnections) {
      e.idle.push_back(conn);
    } else {
      close(*conn);
    }
    finish(t, std::move(response));
  }

  // A failure once the connection was made: sent when any of the request had left.
  void broken(Transfer& t, std::string message, errc code = errc::connection_failed) {
    const bool sent = t.written > 0 || code == errc::protocol_error;
    fail(t, code, sent, false, std::move(message));
  }

  void fail(Transfer& t, errc code, bool sent, bool unreachable, std::string message) {
    if (t.conn) {
      close(*t.conn);
      t.conn->transfer = nullptr;
      t.conn.reset();
    }
    if (t.phase == Phase::resolving && t.endpoint != nullptr) std::erase(t.endpoint->waiting, &t);
    if (t.endpoint != nullptr) message += request_text(t);
    finish(t, TransportError{code, sent, std::move(message), unreachable});
  }

  void finish(Transfer& t, TransportResult result) {
    AsyncTransport::Done done = std::move(t.done);
    transfers_.erase(t.self);
    if (transfers_.empty() && timer_armed_) {
      timer_armed_ = false;
      timer_.cancel();  // never fails for a timer, so never throws (the error_code overload is deprecated)
    }
    if (in_post_) {  // `done` never runs inside async_post
      asio::post(ioc_, [weak = weak_from_this(), done = std::move(done), result = std::move(result)]() mutable {
        const auto core = weak.lock();
        if (core && !core->closed_) done(std::move(result));
      });
      return;
    }
    done(std::move(result));
  }

  void close(Connection& c) {
    c.closed = true;
    error_code ignored;
    c.socket.close(ignored);
  }

  // The one timer, moved only to an earlier deadline.
  void watch(Clock::time_point when) {
    if (timer_armed_ && when >= timer_at_) return;
    timer_armed_ = true;
    timer_at_ = when;
    timer_.expires_at(when);
    timer_.async_wait([weak = weak_from_this()](const error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      core->sweep();
    });
  }

  void sweep() {
    timer_armed_ = false;
    const auto now = Clock::now();
    std::vector<Transfer*> due;
    for (Transfer& t : transfers_) {
      if (t.deadline() <= now) due.push_back(&t);
    }
    const auto keep = shared_from_this();
    for (Transfer* t : due) {
      if (closed_) return;
      time_out(*t);
    }
    if (closed_ || transfers_.empty()) return;
    auto next = Clock::time_point::max();
    for (const Transfer& t : transfers_) next = std::min(next, t.deadline());
    watch(next);
  }

  void time_out(Transfer& t) {
    const bool connecting = t.phase == Phase::resolving || t.phase == Phase::connecting;
    const bool by_connect = connecting && t.connect_deadline <= t.total_deadline;
    std::string message = "timed out after " + std::to_string((by_connect ? t.connect_ms : t.total_ms).count()) +
                          " ms " +
                          (t.phase == Phase::resolving    ? "resolving the host"
                           : t.phase == Phase::connecting ? "connecting"
                           : t.phase == Phase::writing    ? "sending the request"
                                                          : "waiting for the answer");
    // Nothing accepted the connection in time: unreachable, as a refusal is. A slow resolve is not.
    fail(t, errc::timeout, t.written > 0, t.phase == Phase::connecting, std::move(message));
  }

  asio::io_context& ioc_;
  std::string base_url_;
  std::size_t max_answer_bytes_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  Clock::time_point timer_at_{};
  tcp::resolver resolver_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::list<Transfer> transfers_;
  bool in_post_ = false;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<AsyncTransport> make_asio_transport(boost::asio::io_context& ioc, std::string base_url,
                                                    std::string ca_file, std::size_t max_answer_bytes) {
  (void)ca_file;  // https:// is not supported here (a request to it fails, not sent)
  return std::make_unique<CoreTransport<Core>>(std::make_shared<Core>(ioc, std::move(base_url), max_answer_bytes));
}

}  // namespace hf3fs_meta::internal
