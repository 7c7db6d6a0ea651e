#include "ha/etcd_watch.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <utility>

namespace hf3fs_meta::server::ha {

struct EtcdWatch::Stream {
  std::string url;
  std::string body;
  OnMessage on_message;
  OnEnd on_end;
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  std::atomic<bool> stopping{false};
  std::string pending;  // the start of a line not yet ended
  std::string why;      // why the stream ended, set where it ended
  char error[CURL_ERROR_SIZE] = {};

  ~Stream() {
    if (multi != nullptr && easy != nullptr) curl_multi_remove_handle(multi, easy);
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }

  // Hands each complete line on; false (ending the stream) on a line that cannot be read or a
  // message that ends the watch.
  bool feed(std::string_view data) {
    pending.append(data);
    std::size_t start = 0;
    for (std::size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string_view line(pending.data() + start, end - start);
      if (line.empty()) continue;
      auto message = decode_watch_line(line);
      if (!message) {
        why = "etcd's watch stream: " + message.error().message;
        return false;
      }
      const bool canceled = message.value().canceled;
      if (canceled) {
        why = "etcd canceled the watch";
        if (message.value().compact_revision != 0) {
          why += ": its start revision is compacted (compact revision " +
                 std::to_string(message.value().compact_revision) + ")";
        } else if (!message.value().cancel_reason.empty()) {
          why += ": " + message.value().cancel_reason;
        }
      }
      on_message(std::move(message).value());
      if (canceled) return false;
    }
    pending.erase(0, start);
    return true;
  }

  static std::size_t on_data(char* data, std::size_t size, std::size_t count, void* user) {
    auto* stream = static_cast<Stream*>(user);
    if (stream->stopping.load(std::memory_order_relaxed)) return 0;
    return stream->feed(std::string_view(data, size * count)) ? size * count : 0;
  }
};

EtcdWatch::EtcdWatch(std::string endpoint, std::chrono::milliseconds connect_timeout, std::string_view key,
                     std::string_view range_end, std::int64_t start_revision, OnMessage on_message, OnEnd on_end)
    : stream_(std::make_unique<Stream>()) {
  Stream& s = *stream_;
  s.url = std::move(endpoint) + "/v3/watch";
  s.body = encode_watch_create(key, range_end, start_revision);
  s.on_message = std::move(on_message);
  s.on_end = std::move(on_end);
  s.multi = curl_multi_init();
  s.easy = curl_easy_init();
  if (s.multi == nullptr || s.easy == nullptr) {
    s.why = "curl could not start the watch";
  } else {
    CURL* e = s.easy;
    curl_easy_setopt(e, CURLOPT_URL, s.url.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, s.body.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max<std::int64_t>(1, connect_timeout.count())));
    curl_easy_setopt(e, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Stream::on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s.error);
    curl_multi_add_handle(s.multi, e);
  }
  thread_ = std::thread([this] { run(); });
}

EtcdWatch::~EtcdWatch() { stop(); }

void EtcdWatch::stop() {
  if (!thread_.joinable()) return;
  stream_->stopping.store(true);
  if (stream_->multi != nullptr) curl_multi_wakeup(stream_->multi);
  thread_.join();
}

void EtcdWatch::run() {
  Stream& s = *stream_;
  int running = s.multi != nullptr && s.easy != nullptr ? 1 : 0;
  while (running > 0 && !s.stopping.load()) {
    if (curl_multi_perform(s.multi, &running) != CURLM_OK) break;
    if (running > 0) curl_multi_poll(s.multi, nullptr, 0, 1000, nullptr);
  }
  if (s.stopping.load()) return;  // stop(): no on_end
  if (s.why.empty()) {
    long status = 0;
    curl_easy_getinfo(s.easy, CURLINFO_RESPONSE_CODE, &status);
    int left = 0;
    CURLcode code = CURLE_OK;
    while (CURLMsg* m = curl_multi_info_read(s.multi, &left)) {
      if (m->msg == CURLMSG_DONE) code = m->data.result;
    }
    s.why = code != CURLE_OK ? std::string("the watch's connection to ") + s.url + " failed: " +
                                   curl_easy_strerror(code) + (s.error[0] != '\0' ? std::string(": ") + s.error : "")
                             : "the watch's stream at " + s.url + " ended (HTTP " + std::to_string(status) + ")";
    if (!s.pending.empty()) s.why += ": " + s.pending.substr(0, 200);
  }
  s.on_end(std::move(s.why));
}

}  // namespace hf3fs_meta::server::ha
