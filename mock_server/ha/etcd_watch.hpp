// EtcdWatch: one etcd watch (POST /v3/watch on the JSON gateway), streamed on a thread of its own.
// The gateway answers a chunked stream of JSON messages, one per line: "created", then "events" as
// they happen, and a last one with "canceled" if etcd ends the watch (its start revision compacted).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "ha/etcd_codec.hpp"

namespace hf3fs_meta::server::ha {

class EtcdWatch {
 public:
  using OnMessage = std::function<void(WatchResponse&&)>;
  using OnEnd = std::function<void(std::string why)>;

  // Watches [key, range_end) (range_end empty: `key` alone) from `start_revision` (0: from now)
  // through the member at `endpoint`. Calls `on_message` for each message, in order, and `on_end`
  // once when the stream ends by itself (the member went away, etcd canceled the watch, a message
  // could not be read), saying why; both on the watch's thread. stop() ends it without on_end.
  // `connect_timeout`: the client's (EtcdOptions::connect_timeout); once connected, no time limit.
  EtcdWatch(std::string endpoint, std::chrono::milliseconds connect_timeout, std::string_view key,
            std::string_view range_end, std::int64_t start_revision, OnMessage on_message, OnEnd on_end);
  ~EtcdWatch();  // stop()
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  // Ends the stream and joins its thread; not from the callbacks.
  void stop();

 private:
  struct Stream;
  void run();

  std::unique_ptr<Stream> stream_;
  std::thread thread_;
};

}  // namespace hf3fs_meta::server::ha
