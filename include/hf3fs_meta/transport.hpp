// Transport: how a Client's request reaches a server. CurlTransport speaks HTTP; InProcessTransport
// (<hf3fs_meta/in_process_transport.hpp>, hf3fs_meta::service) calls a Service in this process; tests
// mock the interface.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/outcome/result.hpp>

#include "hf3fs_meta/error.hpp"

namespace hf3fs_meta {

struct HttpHeader {
  std::string name;
  std::string value;
  friend bool operator==(const HttpHeader&, const HttpHeader&) = default;
};

struct HttpRequest {
  std::string path;  // "/keys/batch_allocate"
  std::string body;
  std::vector<HttpHeader> headers;  // e.g. X-Request-Id
  std::string method = "POST";      // the route's (routes.hpp); a GET is sent without a body
  // The base URL of the server it goes to ("http://127.0.0.1:18001": a client's endpoint, set on
  // each attempt); empty: the transport's own (make_curl_transport's base_url). A transport that
  // serves one server (in process, a test's) may ignore it.
  std::string endpoint{};
};

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
  std::vector<HttpHeader> headers;  // as received
  // Case-insensitive lookup.
  std::optional<std::string_view> header(std::string_view name) const;
};

// The largest answer body a client reads by default (ClientOptions::max_answer_bytes): a broken or
// hostile server cannot take a worker's memory.
inline constexpr std::size_t kDefaultMaxAnswerBytes = std::size_t{64} << 20;

// A failure with no HTTP answer.
struct TransportError {
  errc code = errc::connection_failed;  // connection_failed or timeout; protocol_error: an answer over the limit
  bool sent = false;  // false only when the request certainly did not leave (resolve, connect)
  std::string message;
  // Nothing accepted the connection (refused, or the connect timed out): the server may be
  // restarting. Never sent; the client repeats it until the call's deadline, whatever the attempt
  // count (docs/design.md, "Retries"). A failure after connecting (TLS, a resolve error) is not this.
  bool unreachable = false;
};

using TransportResult =
    boost::outcome_v2::result<HttpResponse, TransportError, boost::outcome_v2::policy::terminate>;

// The time one attempt may take; the client cuts it to what is left of the call's deadline.
struct AttemptTimeouts {
  std::chrono::milliseconds connect{1000};
  std::chrono::milliseconds total{5000};
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Posts the request; must be safe to call from several threads at once.
  virtual TransportResult post(const HttpRequest& request, const AttemptTimeouts& timeouts) = 0;
};

// libcurl over HTTP/1.1 keep-alive: a pool of easy handles, one per concurrent caller (a handle
// is never used by two threads at once; its connections are reused by the next caller). A request
// goes to its `endpoint`, else to `base_url`, each without trailing '/'s; ca_file and the answer
// limit hold for every endpoint alike. Sends
// Content-Type: application/json and no Expect: 100-continue; does not follow redirects. Failures:
// could not resolve / connect, or a timeout while connecting -> sent = false; a send or receive
// error, an empty reply, or a timeout once the request was on its way -> sent = true.
// An https:// base_url speaks TLS: the server's certificate must chain to `ca_file` (PEM; empty:
// the system's CAs) and name the URL's host; a certificate refused is connection_failed, not sent.
// An answer body beyond `max_answer_bytes` is not read further: TransportError protocol_error, sent.
std::shared_ptr<Transport> make_curl_transport(std::string base_url, std::string ca_file = {},
                                               std::size_t max_answer_bytes = kDefaultMaxAnswerBytes);

}  // namespace hf3fs_meta
