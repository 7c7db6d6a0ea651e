// CurlMultiTransport: CurlTransport's requests over libcurl's multi interface, on an io_context.
//
// One multi handle drives every transfer; its connection cache is shared by them, so a connection
// is reused by whichever transfer comes next (the easy handles are pooled only to spare their
// setup). libcurl says which descriptors to wait on and when its next timeout is due (the socket
// and timer callbacks); the io_context waits, and on readiness or the timeout calls
// curl_multi_socket_action, after which the finished transfers are collected and their `done` run.
// libcurl's TCP sockets are opened here, as asio sockets of the io_context (open/close socket
// callbacks), so that the reactor watches them; a descriptor libcurl opens itself (the threaded
// resolver's wake-up socket pair) is watched through a descriptor that never closes it.
//
// Lifetimes: every asynchronous handler holds weak pointers (to the Core, to the watched
// descriptor) and checks a generation, so a handler that outlives what it was for (a socket libcurl
// closed, a wait cancelled, the transport destroyed) does nothing. Everything runs on the
// io_context's one thread, so there are no locks.
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/async_transport.hpp"
#include "client/core_transport.hpp"
#include "client/curl_handle.hpp"

namespace hf3fs_meta::internal {

namespace {

namespace asio = boost::asio;
using boost::system::error_code;

constexpr int kRead = 0;
constexpr int kWrite = 1;
constexpr int kPollOf[2] = {CURL_POLL_IN, CURL_POLL_OUT};
constexpr int kSelectOf[2] = {CURL_CSELECT_IN, CURL_CSELECT_OUT};

// A descriptor libcurl wants watched, and what it wants.
struct Watched {
  explicit Watched(asio::ip::tcp::socket socket)
      : fd(static_cast<curl_socket_t>(socket.native_handle())), own(std::move(socket)) {}
  Watched(curl_socket_t descriptor, asio::posix::stream_descriptor d) : fd(descriptor), foreign(std::move(d)) {}
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;
  ~Watched() { release_foreign(); }

  template <class Handler>
  void async_wait(int dir, Handler&& handler) {
    if (own) {
      own->async_wait(dir == kRead ? asio::socket_base::wait_read : asio::socket_base::wait_write,
                      std::forward<Handler>(handler));
    } else {
      foreign->async_wait(dir == kRead ? asio::posix::descriptor_base::wait_read
                                       : asio::posix::descriptor_base::wait_write,
                          std::forward<Handler>(handler));
    }
  }

  // Pending waits end with operation_aborted; a newer generation tells a handler that already
  // completed (queued before the cancel) that it is stale.
  void cancel_waits() {
    error_code ignored;
    if (own) own->cancel(ignored);
    if (foreign && foreign->is_open()) foreign->cancel(ignored);
    for (int dir : {kRead, kWrite}) {
      armed[dir] = false;
      ++generation[dir];
    }
  }

  // libcurl closes its own descriptors: ours only leaves the reactor.
  void release_foreign() {
    if (foreign && foreign->is_open()) foreign->release();
  }

  curl_socket_t fd;
  std::optional<asio::ip::tcp::socket> own;              // opened by on_open_socket, closed by on_close_socket
  std::optional<asio::posix::stream_descriptor> foreign;  // libcurl's own: watched, never closed here
  int wanted = 0;                                         // CURL_POLL_IN / OUT / INOUT, 0: nothing now
  bool armed[2] = {false, false};                         // a wait of that direction is pending
  unsigned generation[2] = {0, 0};
  bool gone = false;  // closed or released: no more waits
};

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(asio::io_context& ioc, std::string base_url, std::string ca_file, std::size_t max_answer_bytes)
      : delays(ioc),
        ioc_(ioc),
        base_url_(std::move(base_url)),
        ca_file_(std::move(ca_file)),
        max_answer_bytes_(max_answer_bytes),
        timer_(ioc) {
    curl_global_init_once();
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return;  // each async_post then fails with that
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &Core::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &Core::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    // libcurl's default keeps 4 connections per transfer in flight, which falls as transfers end:
    // under load it closed and reopened about 70 connections a second (strace, 64 connections through
    // the proxy). As many as CurlTransport keeps idle handles, each with its connection.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(kMaxIdleCurlHandles));
  }

  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core() { shutdown(); }

  asio::io_context& ioc() { return ioc_; }
  bool closed() const { return closed_; }
  DelayTimers delays;  // after()'s (CoreTransport)

  void async_post(const HttpRequest& request, const AttemptTimeouts& timeouts, AsyncTransport::Done done) {
    if (multi_ == nullptr) {
      return fail_later(std::move(done), TransportError{errc::connection_failed, false, "curl_multi_init failed"});
    }
    std::unique_ptr<CurlHandle> handle = acquire();
    if (!handle) return fail_later(std::move(done), curl_init_failed());
    prepare_curl_request(*handle, base_url_, request, timeouts, max_answer_bytes_);
    CURL* easy = handle->easy;
    const auto it = transfers_.emplace(easy, Transfer{std::move(handle), std::move(done)}).first;
    // Adding only arms libcurl's timer (timeout 0): the transfer starts from the io_context, so
    // `done` never runs inside async_post.
    if (const CURLMcode code = curl_multi_add_handle(multi_, easy); code != CURLM_OK) {
      Transfer transfer = std::move(it->second);
      transfers_.erase(it);
      release(std::move(transfer.handle));
      std::string message = "curl_multi_add_handle failed: ";
      message += curl_multi_strerror(code);
      fail_later(std::move(transfer.done), TransportError{errc::connection_failed, false, std::move(message)});
    }
  }

  // Abandons every transfer (their `done` never runs) and closes every connection. Idempotent; the
  // Core may outlive it while a handler of its own still holds it (a `done` destroyed the transport).
  void shutdown() {
    if (closed_) return;
    closed_ = true;
    // libcurl's callbacks run during the removals and the cleanup: on_close_socket closes ours,
    // on_socket's REMOVE releases libcurl's own descriptors, and closed_ stops any new wait.
    for (auto& [easy, transfer] : transfers_) curl_multi_remove_handle(multi_, easy);
    transfers_.clear();
    idle_.clear();
    if (multi_ != nullptr) curl_multi_cleanup(multi_);  // closes the cached connections
    multi_ = nullptr;
    watched_.clear();  // a socket libcurl did not close is closed by its destructor: no descriptor leaks
    timer_.cancel();  // never fails for a timer, so never throws (the error_code overload is deprecated)
    delays.clear();
  }

 private:
  struct Transfer {
    std::unique_ptr<CurlHandle> handle;
    AsyncTransport::Done done;
  };

  std::unique_ptr<CurlHandle> acquire() {
    if (!idle_.empty()) {
      auto handle = std::move(idle_.back());
      idle_.pop_back();
      return handle;
    }
    auto handle = make_curl_handle(ca_file_);
    if (!handle) return nullptr;
    curl_easy_setopt(handle->easy, CURLOPT_OPENSOCKETFUNCTION, &Core::on_open_socket);
    curl_easy_setopt(handle->easy, CURLOPT_OPENSOCKETDATA, this);
    curl_easy_setopt(handle->easy, CURLOPT_CLOSESOCKETFUNCTION, &Core::on_close_socket);
    curl_easy_setopt(handle->easy, CURLOPT_CLOSESOCKETDATA, this);
    return handle;
  }

  // LIFO like CurlTransport's, though here it only spares a handle's setup: connections live in
  // the multi handle's cache.
  void release(std::unique_ptr<CurlHandle> handle) {
    if (idle_.size() < kMaxIdleCurlHandles) idle_.push_back(std::move(handle));
  }

  void fail_later(AsyncTransport::Done done, TransportError error) {
    asio::post(ioc_, [weak = weak_from_this(), done = std::move(done), error = std::move(error)]() mutable {
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      done(std::move(error));
    });
  }

  // An asio socket of the io_context, so that the reactor can watch it. Only TCP over IPv4 and
  // IPv6 (all that http:// and https:// use): anything else is refused rather than half supported.
  static curl_socket_t on_open_socket(void* self, curlsocktype purpose, curl_sockaddr* address) {
    auto* core = static_cast<Core*>(self);
    if (purpose != CURLSOCKTYPE_IPCXN || address->socktype != SOCK_STREAM ||
        (address->family != AF_INET && address->family != AF_INET6)) {
      return CURL_SOCKET_BAD;
    }
    asio::ip::tcp::socket socket(core->ioc_);
    error_code ec;
    socket.open(address->family == AF_INET ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), ec);
    if (ec) return CURL_SOCKET_BAD;
    auto watched = std::make_shared<Watched>(std::move(socket));
    const curl_socket_t fd = watched->fd;
    core->watched_[fd] = std::move(watched);
    return fd;
  }

  static int on_close_socket(void* self, curl_socket_t fd) {
    auto* core = static_cast<Core*>(self);
    const auto it = core->watched_.find(fd);
    if (it == core->watched_.end() || !it->second->own) return ::close(fd);  // not one of ours: libcurl's wish
    const std::shared_ptr<Watched> watched = std::move(it->second);
    core->watched_.erase(it);
    watched->gone = true;
    // Cancels its waits (operation_aborted); a handler running now holds `watched` and sees `gone`.
    error_code ec;
    watched->own->close(ec);
    return ec ? -1 : 0;
  }

  static int on_socket(CURL*, curl_socket_t fd, int what, void* self, void*) {
    auto* core = static_cast<Core*>(self);
    auto it = core->watched_.find(fd);
    if (what == CURL_POLL_REMOVE) {
      if (it == core->watched_.end()) return 0;
      Watched& watched = *it->second;
      watched.wanted = 0;
      // An idle connection in the cache is not watched: no wait keeps the io_context busy for it.
      watched.cancel_waits();
      if (watched.foreign) {
        // libcurl closes it right after (Curl_multi_closed): leave the reactor before the number
        // can be reused.
        watched.release_foreign();
        watched.gone = true;
        core->watched_.erase(it);
      }
      return 0;
    }
    if (core->closed_) return 0;
    if (it == core->watched_.end()) {
      asio::posix::stream_descriptor descriptor(core->ioc_);
      error_code ec;
      descriptor.assign(fd, ec);
      // Not watchable (cannot happen for a valid descriptor): libcurl's timeout ends the transfer.
      if (ec) return 0;
      it = core->watched_.emplace(fd, std::make_shared<Watched>(fd, std::move(descriptor))).first;
    }
    it->second->wanted = what;
    core->arm(it->second, kRead);
    core->arm(it->second, kWrite);
    return 0;
  }

  // Never acts from inside libcurl: arms the timer, whose handler calls socket_action. libcurl
  // moves its timeout on almost every step of every transfer, and each move of the io_context's
  // earliest timer is a timerfd_settime: measured under 64 connections through the proxy, a quarter
  // of its CPU. So the timer is moved only to an earlier time; a later timeout is kept in `due_`,
  // where the timer's handler finds it. A timeout of 0 ("act now") is a post, which needs no timer.
  static int on_timer(CURLM*, long timeout_ms, void* self) {
    auto* core = static_cast<Core*>(self);
    core->due_.reset();
    if (core->closed_) return 0;
    if (timeout_ms < 0) {
      // No transfer waits on a timeout: an armed timer would keep the io_context from running out
      // of work (a shutdown waits for that) for nothing.
      if (core->armed_until_) {
        core->timer_.cancel();  // never fails for a timer, so never throws (the error_code overload is deprecated)
        core->armed_until_.reset();
      }
      return 0;
    }
    if (timeout_ms == 0) {
      if (!core->timeout_posted_) {
        core->timeout_posted_ = true;
        asio::post(core->ioc_, [weak = core->weak_from_this()] {
          const auto core = weak.lock();
          if (!core || core->closed_) return;
          core->timeout_posted_ = false;
          core->on_timeout();
        });
      }
      return 0;
    }
    core->due_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    if (!core->armed_until_ || *core->armed_until_ > *core->due_) core->arm_timer(*core->due_);
    return 0;
  }

  void arm_timer(std::chrono::steady_clock::time_point at) {
    armed_until_ = at;
    timer_.expires_at(at);  // a wait pending ends with operation_aborted
    timer_.async_wait([weak = weak_from_this()](const error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      const auto core = weak.lock();
      if (!core || core->closed_) return;
      core->armed_until_.reset();
      if (!core->due_) return;  // replaced by a post, or no timeout any more
      if (std::chrono::steady_clock::now() < *core->due_) return core->arm_timer(*core->due_);
      core->due_.reset();
      core->on_timeout();
    });
  }

  void on_timeout() {
    act(CURL_SOCKET_TIMEOUT, 0);
    finish_done_transfers();
  }

  // Waits for `dir` while libcurl wants it and no wait of that direction is pending.
  void arm(const std::shared_ptr<Watched>& watched, int dir) {
    if (closed_ || watched->gone || watched->armed[dir] || (watched->wanted & kPollOf[dir]) == 0) return;
    watched->armed[dir] = true;
    const unsigned generation = ++watched->generation[dir];
    watched->async_wait(dir, [weak = weak_from_this(), weak_watched = std::weak_ptr<Watched>(watched), dir,
                              generation](const error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      const auto core = weak.lock();
      const auto watched = weak_watched.lock();
      if (!core || !watched || core->closed_ || watched->gone || watched->generation[dir] != generation) return;
      watched->armed[dir] = false;
      // An error on the descriptor itself is libcurl's to judge (it fails the transfer); waiting
      // again would only see the error again.
      core->act(watched->fd, ec ? CURL_CSELECT_ERR : kSelectOf[dir]);
      if (!ec) core->arm(watched, dir);  // still wanted: libcurl does not say so again
      core->finish_done_transfers();
    });
  }

  void act(curl_socket_t fd, int mask) {
    int running = 0;
    curl_multi_socket_action(multi_, fd, mask, &running);
  }

  // A `done` may start the next request (async_post) or destroy the transport: nothing of the
  // collection is held across it, and after a shutdown the rest is abandoned.
  void finish_done_transfers() {
    while (!closed_) {
      int left = 0;
      CURLMsg* message = curl_multi_info_read(multi_, &left);
      if (message == nullptr) return;
      if (message->msg != CURLMSG_DONE) continue;
      CURL* easy = message->easy_handle;
      const CURLcode code = message->data.result;  // `message` dies with the removal below
      curl_multi_remove_handle(multi_, easy);
      const auto it = transfers_.find(easy);
      if (it == transfers_.end()) continue;
      Transfer transfer = std::move(it->second);
      transfers_.erase(it);
      TransportResult result = curl_request_result(*transfer.handle, code);
      release(std::move(transfer.handle));
      transfer.done(std::move(result));
    }
  }

  asio::io_context& ioc_;
  std::string base_url_;
  std::string ca_file_;
  std::size_t max_answer_bytes_;
  CURLM* multi_ = nullptr;
  asio::steady_timer timer_;  // libcurl's one timeout
  std::optional<std::chrono::steady_clock::time_point> armed_until_;  // timer_'s wait pending, until then
  std::optional<std::chrono::steady_clock::time_point> due_;          // libcurl's timeout, when one is set
  bool timeout_posted_ = false;                                       // a timeout of 0, posted
  std::unordered_map<curl_socket_t, std::shared_ptr<Watched>> watched_;
  std::unordered_map<CURL*, Transfer> transfers_;
  std::vector<std::unique_ptr<CurlHandle>> idle_;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<AsyncTransport> make_curl_multi_transport(boost::asio::io_context& ioc, std::string base_url,
                                                          std::string ca_file, std::size_t max_answer_bytes) {
  return std::make_unique<CoreTransport<Core>>(
      std::make_shared<Core>(ioc, std::move(base_url), std::move(ca_file), max_answer_bytes));
}

}  // namespace hf3fs_meta::internal
