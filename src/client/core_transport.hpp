// What both asynchronous transports (curl_multi_transport.cpp, asio_transport.cpp) put around their
// Core, the state their handlers share: the AsyncTransport itself, which shuts the Core down when it
// goes, and after()'s timers.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "client/async_transport.hpp"

namespace hf3fs_meta::internal {

// after()'s timers, on the io_context's thread only.
class DelayTimers {
 public:
  explicit DelayTimers(boost::asio::io_context& ioc) : ioc_(ioc) {}
  DelayTimers(const DelayTimers&) = delete;
  DelayTimers& operator=(const DelayTimers&) = delete;

  // Runs `fn` after `delay` (at once when it is not positive), unless clear() or the destructor
  // comes first.
  void start(std::chrono::nanoseconds delay, std::function<void()> fn) {
    if (delay <= std::chrono::nanoseconds::zero()) return fn();
    // A list: the handler erases its own timer by iterator, which stays valid while others come and go.
    const auto it = timers_.emplace(timers_.end(), ioc_);
    it->expires_after(delay);
    // `alive` tells a handler that completed before a clear() (so not aborted) that `it` is gone.
    it->async_wait([this, alive = std::weak_ptr<char>(alive_), it, fn = std::move(fn)](
                       const boost::system::error_code& ec) {
      if (ec == boost::asio::error::operation_aborted || alive.expired()) return;
      timers_.erase(it);
      fn();
    });
  }

  void clear() {
    alive_ = std::make_shared<char>();
    timers_.clear();
  }

 private:
  boost::asio::io_context& ioc_;
  std::list<boost::asio::steady_timer> timers_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

// The AsyncTransport over a Core, which provides ioc(), closed(), async_post(), shutdown() (clearing
// its `delays`) and a DelayTimers `delays`.
template <class Core>
class CoreTransport final : public AsyncTransport {
 public:
  explicit CoreTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~CoreTransport() override { core_->shutdown(); }
  CoreTransport(const CoreTransport&) = delete;
  CoreTransport& operator=(const CoreTransport&) = delete;

  void async_post(const HttpRequest& request, const AttemptTimeouts& timeouts, Done done) override {
    core_->async_post(request, timeouts, std::move(done));
  }

  // Posted, so that the timer is made and armed on the io_context's thread like everything else,
  // and so that a transport destroyed meanwhile runs nothing.
  void after(std::chrono::nanoseconds delay, std::function<void()> fn) override {
    boost::asio::post(core_->ioc(), [weak = std::weak_ptr<Core>(core_), delay, fn = std::move(fn)]() mutable {
      const auto core = weak.lock();
      if (core && !core->closed()) core->delays.start(delay, std::move(fn));
    });
  }

  boost::asio::io_context& io_context() override { return core_->ioc(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace hf3fs_meta::internal
