// The easy-handle setup, request setup and result classification both libcurl transports share
// (curl_handle.hpp).
#include "client/curl_handle.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "internal/answer_limit.hpp"

namespace hf3fs_meta::internal {

namespace {

// Headers every request carries. "Expect:" stops libcurl from waiting for 100-continue on large bodies.
constexpr const char* kContentType = "Content-Type: application/json";
constexpr const char* kNoExpect = "Expect:";

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* handle = static_cast<CurlHandle*>(user);
  if (size * count > handle->max_body - handle->body.size()) {
    handle->too_large = true;
    return 0;  // libcurl stops: CURLE_WRITE_ERROR
  }
  handle->body.append(data, size * count);
  return size * count;
}

// libcurl resends a request by itself when a reused connection dies after the request was written
// and before any answer ("Connection died, retrying a fresh connect"): a second attempt nobody
// decided on or observed, which can apply an allocate twice. Repeating is the client's decision
// (docs/design.md, "Retries"), so a second request of one transfer is aborted here. The pre-request
// callback runs once per request libcurl is about to send, after the connection is set up; a
// pooled connection found dead before use is replaced before it, so that case still succeeds.
int on_prerequest(void* user, char*, char*, int, int) {
  auto* handle = static_cast<CurlHandle*>(user);
  if (++handle->requests_sent > 1) {
    handle->resend_refused = true;
    return CURL_PREREQFUNC_ABORT;
  }
  return CURL_PREREQFUNC_OK;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* handle = static_cast<CurlHandle*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    // A new status line (after an interim 1xx answer): only the final answer's headers count.
    handle->headers.clear();
  } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    handle->headers.push_back({std::string(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1)))});
  }
  return size * count;
}

long clamp_ms(std::chrono::milliseconds ms) {
  // 0 means "no timeout" to libcurl: an exhausted budget must still time out.
  return static_cast<long>(std::max<std::chrono::milliseconds::rep>(1, ms.count()));
}

void set_headers(CurlHandle& h, const HttpRequest& request) {
  h.header_lines.resize(request.headers.size());
  for (std::size_t i = 0; i < request.headers.size(); ++i) {
    std::string& line = h.header_lines[i];
    line.assign(request.headers[i].name);
    line.append(": ");
    line.append(request.headers[i].value);
  }
  // libcurl only reads the list, so its nodes can live in our vector and point at our strings.
  h.nodes.resize(2 + h.header_lines.size());
  h.nodes[0].data = const_cast<char*>(kContentType);
  h.nodes[1].data = const_cast<char*>(kNoExpect);
  for (std::size_t i = 0; i < h.header_lines.size(); ++i) h.nodes[2 + i].data = h.header_lines[i].data();
  for (std::size_t i = 0; i + 1 < h.nodes.size(); ++i) h.nodes[i].next = &h.nodes[i + 1];
  h.nodes.back().next = nullptr;
  curl_easy_setopt(h.easy, CURLOPT_HTTPHEADER, h.nodes.data());
}

TransportError transport_error(CurlHandle& h, CURLcode code) {
  TransportError error;
  error.code = code == CURLE_OPERATION_TIMEDOUT ? errc::timeout : errc::connection_failed;
  // The request may have left once libcurl was about to send it: on_prerequest ran, or (belt and
  // braces) the pre-transfer time or request size say so. Before that (could not resolve, could
  // not connect, a timeout while connecting), it certainly did not. Judged by what happened rather
  // than by the code: a connect that fails while libcurl replaces a connection that died under
  // a written request must still count as sent.
  curl_off_t pretransfer = 0;
  long request_size = 0;
  curl_easy_getinfo(h.easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
  curl_easy_getinfo(h.easy, CURLINFO_REQUEST_SIZE, &request_size);
  error.sent = h.requests_sent > 0 || pretransfer > 0 || request_size > 0;
  // What every message ends with: the request, "(POST http://...)".
  const std::string request_text = std::string(h.get ? " (GET " : " (POST ") + h.url + ")";
  if (h.too_large || code == CURLE_FILESIZE_EXCEEDED) {
    error.code = errc::protocol_error;
    error.sent = true;
    error.message = answer_too_large(h.max_body) + request_text;
    return error;
  }
  if (h.resend_refused) {
    // Our refusal of libcurl's own resend (on_prerequest): say what happened, not how it was stopped.
    error.code = errc::connection_failed;
    error.sent = true;
    error.message = "the connection closed before an answer (a reused connection died after the request was "
                    "written; not resent)";
    error.message += request_text;
    return error;
  }
  // Nothing accepted the connection (refused, or the connect timed out): the server may be
  // restarting. Not a TLS or resolve failure, and not a connection that was made.
  curl_off_t connected = 0;
  curl_easy_getinfo(h.easy, CURLINFO_CONNECT_TIME_T, &connected);
  error.unreachable = !error.sent && connected == 0 &&
                      (code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT);
  error.message = curl_easy_strerror(code);
  if (h.error[0] != '\0') {
    error.message += ": ";
    error.message += h.error;
  }
  error.message += request_text;
  return error;
}

}  // namespace

CurlHandle::~CurlHandle() {
  if (easy != nullptr) curl_easy_cleanup(easy);
}

void curl_global_init_once() {
  // curl_global_init is not thread-safe; a function-local static is initialised exactly once.
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)init;
}

TransportError curl_init_failed() { return TransportError{errc::connection_failed, false, "curl_easy_init failed"}; }

std::unique_ptr<CurlHandle> make_curl_handle(const std::string& ca_file) {
  auto handle = std::make_unique<CurlHandle>();
  handle->easy = curl_easy_init();
  if (handle->easy == nullptr) return nullptr;
  CURL* e = handle->easy;
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: safe in threads
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // a 307 is an answer to classify, not to follow
  curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &on_prerequest);
  curl_easy_setopt(e, CURLOPT_PREREQDATA, handle.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, handle.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, handle.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, handle->error);
  curl_easy_setopt(e, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
  // https:// URLs: the server's certificate must chain to this CA file (else the system's CAs),
  // and name the host in the URL (libcurl's defaults, kept on).
  if (!ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, ca_file.c_str());
  handle->header_lines.reserve(4);
  handle->nodes.reserve(6);
  return handle;
}

void prepare_curl_request(CurlHandle& h, std::string_view base_url, const HttpRequest& request,
                          const AttemptTimeouts& timeouts, std::size_t max_answer_bytes) {
  CURL* e = h.easy;
  std::string_view base = request.endpoint.empty() ? base_url : std::string_view(request.endpoint);
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  if (h.url.size() != base.size() + request.path.size() || !std::string_view(h.url).starts_with(base) ||
      std::string_view(h.url).substr(base.size()) != request.path) {
    h.url.assign(base);
    h.url.append(request.path);
    curl_easy_setopt(e, CURLOPT_URL, h.url.c_str());
  }
  // Size first: libcurl would otherwise strlen() the body. POSTFIELDS (not a read callback) lets
  // libcurl send a small body in the same write as the headers.
  if (request.method == "GET") {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    h.get = true;
  } else {
    if (h.get) curl_easy_setopt(e, CURLOPT_POST, 1L);
    h.get = false;
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, request.body.data());
  }
  set_headers(h, request);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, clamp_ms(timeouts.connect));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, clamp_ms(timeouts.total));
  h.body.clear();
  h.headers.clear();
  h.error[0] = '\0';
  h.requests_sent = 0;
  h.resend_refused = false;
  h.max_body = max_answer_bytes;
  h.too_large = false;
  // A declared length over the limit is refused before any of the body is read.
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_answer_bytes));
}

TransportResult curl_request_result(CurlHandle& h, CURLcode code) {
  if (code != CURLE_OK) return transport_error(h, code);
  HttpResponse response;
  long status = 0;
  curl_easy_getinfo(h.easy, CURLINFO_RESPONSE_CODE, &status);
  response.status = static_cast<int>(status);
  char* content_type = nullptr;
  if (curl_easy_getinfo(h.easy, CURLINFO_CONTENT_TYPE, &content_type) == CURLE_OK && content_type != nullptr) {
    response.content_type = content_type;
  }
  response.body = std::move(h.body);
  response.headers = std::move(h.headers);
  return response;
}

}  // namespace hf3fs_meta::internal
