// What the libcurl transports share: an easy handle set up the way every transfer of ours needs it,
// the setup of one request on it, and what the finished transfer amounts to. CurlTransport
// (curl_transport.cpp) performs a handle itself, blocking; CurlMultiTransport
// (curl_multi_transport.cpp) lets a multi handle drive it. Either way the request, its failures
// and their classification (sent, unreachable, too large) are the same.
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::internal {

// An easy handle with what one transfer fills in. Its callbacks point at it: it does not move.
struct CurlHandle {
  CURL* easy = nullptr;
  std::string url;
  std::string body;                       // the answer's body, filled by on_body
  std::vector<HttpHeader> headers;        // the answer's headers, filled by on_header
  std::vector<std::string> header_lines;  // the request's own headers, "Name: value"
  std::vector<curl_slist> nodes;          // a curl_slist over fixed and per-request lines, no mallocs
  int requests_sent = 0;                  // in this transfer, counted by on_prerequest
  bool resend_refused = false;
  std::size_t max_body = 0;               // on_body stops the transfer beyond this
  bool too_large = false;
  bool get = false;  // the handle is set to GET (it starts as POST)
  char error[CURL_ERROR_SIZE] = {};

  CurlHandle() = default;
  CurlHandle(const CurlHandle&) = delete;
  CurlHandle& operator=(const CurlHandle&) = delete;
  ~CurlHandle();
};

// A burst of callers must not leave that many idle handles (and, for CurlTransport, connections)
// behind for good: the idle pools keep at most this many.
inline constexpr std::size_t kMaxIdleCurlHandles = 64;

// curl_global_init, once per process, before the first handle.
void curl_global_init_once();

// A handle set up for our transfers (HTTP/1.1 POST, no signals, no redirects, no resend of its own,
// CA file for https). nullptr: curl_easy_init failed (curl_init_failed() says so).
std::unique_ptr<CurlHandle> make_curl_handle(const std::string& ca_file);
TransportError curl_init_failed();

// Sets `h` up for `request`: its URL (its endpoint, else `base_url`), method, body, headers, the
// attempt's timeouts and the answer limit, and clears what the last transfer left. The handle
// points at request.body: it must outlive the transfer.
void prepare_curl_request(CurlHandle& h, std::string_view base_url, const HttpRequest& request,
                          const AttemptTimeouts& timeouts, std::size_t max_answer_bytes);

// What the transfer prepared on `h` that ended with `code` amounts to: the answer on CURLE_OK (its
// body and headers moved out of `h`), else the failure, classified.
TransportResult curl_request_result(CurlHandle& h, CURLcode code);

}  // namespace hf3fs_meta::internal
