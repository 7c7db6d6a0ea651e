// TcpRelay: a TCP relay on 127.0.0.1 to one upstream port (an etcd member's client URL), for the HA
// tests that need a member to fall behind the replicated log while it still reaches etcd. The
// answers to an etcd watch (a connection whose first request is POST /v3/watch) can be held to a
// few bytes a second while every other call goes at full speed: the member's follower still sees
// an entry now and then (so it does not take its watch for stalled and read the log instead), while
// the log runs ahead of it, and its campaign and reads are as quick as anyone's.
// Two threads a connection copy the bytes; the destructor closes every socket and joins them all.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace hf3fs_meta::testing {

class TcpRelay {
 public:
  // Relays to `upstream_url` ("http://127.0.0.1:PORT"); throws std::runtime_error when it cannot
  // listen.
  explicit TcpRelay(std::string_view upstream_url);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  std::string url() const;  // "http://127.0.0.1:PORT"
  // From now on, each watch's answer goes on at `bytes_per_second` at most (0: at full speed).
  void throttle_watches(std::size_t bytes_per_second) { watch_rate_.store(bytes_per_second); }
  // The connections so far that opened with a watch request.
  std::size_t watches() const noexcept { return watches_.load(); }

 private:
  struct Link;
  void accept_loop();
  // Copies from one socket of `link` to the other until either ends; `answers`: upstream's way.
  void copy(Link& link, bool answers);
  bool pause(std::chrono::milliseconds duration);  // false: stopping

  std::uint16_t upstream_port_ = 0;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  std::atomic<std::size_t> watch_rate_{0};
  std::atomic<std::size_t> watches_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;                    // under mutex_
  std::vector<std::unique_ptr<Link>> links_;  // under mutex_
  std::thread acceptor_;
};

}  // namespace hf3fs_meta::testing
