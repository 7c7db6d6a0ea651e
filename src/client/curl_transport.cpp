// CurlTransport: HTTP/1.1 keep-alive over libcurl easy handles.
//
// Each easy handle keeps its own connection cache, so reusing handles is what reuses connections. A
// caller takes a handle from the idle pool (or makes one when every handle is busy) and returns it
// afterwards: a handle is never used by two threads at once, and N concurrent callers need N handles.
// The pool is LIFO so that a sequential caller keeps getting the handle with a live connection.
// The handle's setup and the result's classification are curl_handle.hpp's, shared with the
// asynchronous transport.
#include <curl/curl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/curl_handle.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta {

namespace {

using internal::CurlHandle;

class CurlTransport final : public Transport {
 public:
  CurlTransport(std::string base_url, std::string ca_file, std::size_t max_answer_bytes)
      : base_url_(std::move(base_url)), ca_file_(std::move(ca_file)), max_answer_bytes_(max_answer_bytes) {
    internal::curl_global_init_once();
  }

  ~CurlTransport() override = default;

  TransportResult post(const HttpRequest& request, const AttemptTimeouts& timeouts) override {
    std::unique_ptr<CurlHandle> handle = acquire();
    if (!handle) return internal::curl_init_failed();
    internal::prepare_curl_request(*handle, base_url_, request, timeouts, max_answer_bytes_);
    TransportResult result = internal::curl_request_result(*handle, curl_easy_perform(handle->easy));
    release(std::move(handle));
    return result;
  }

 private:
  std::unique_ptr<CurlHandle> acquire() {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        auto handle = std::move(idle_.back());
        idle_.pop_back();
        return handle;
      }
    }
    return internal::make_curl_handle(ca_file_);
  }

  void release(std::unique_ptr<CurlHandle> handle) {
    std::lock_guard lock(mutex_);
    if (idle_.size() < internal::kMaxIdleCurlHandles) idle_.push_back(std::move(handle));
  }

  std::string base_url_;
  std::string ca_file_;
  std::size_t max_answer_bytes_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CurlHandle>> idle_;
};

}  // namespace

std::shared_ptr<Transport> make_curl_transport(std::string base_url, std::string ca_file,
                                               std::size_t max_answer_bytes) {
  return std::make_shared<CurlTransport>(std::move(base_url), std::move(ca_file), max_answer_bytes);
}

}  // namespace hf3fs_meta
