// AsyncTransport: how the calls that do not block (async_client.hpp) reach a server, on an
// io_context's thread. Two, with the blocking CurlTransport's semantics (transport.hpp): libcurl's
// multi interface (curl_multi_transport.cpp, TLS included) and asio sockets with Beast's parser
// (asio_transport.cpp, http:// only, fewer system calls); make_async_transport picks.
#pragma once

// Every translation unit of this tree compiles Asio with BOOST_ASIO_NO_DEPRECATED (hf3fs_meta_asio,
// CMakeLists.txt): one program whose units compiled two Asios would break the one-definition rule,
// as the proxy did (the server's front and the SDK's transports meet in it), which crashed at -O0.
#ifndef BOOST_ASIO_NO_DEPRECATED
#error "link hf3fs_meta_asio: every translation unit that includes Asio compiles it with BOOST_ASIO_NO_DEPRECATED"
#endif

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::internal {

// An HTTP exchange that does not block: started on the thread that runs its io_context, finished there.
class AsyncTransport {
 public:
  virtual ~AsyncTransport() = default;
  using Done = std::function<void(TransportResult)>;
  // Starts the request; `done` runs once, later, on the io_context's thread (never inside async_post),
  // with what post() would have returned. Call on the io_context's thread only. `request` must stay
  // valid (unchanged) until `done` runs.
  virtual void async_post(const HttpRequest& request, const AttemptTimeouts& timeouts, Done done) = 0;
  // Runs `fn` on the io_context's thread after `delay` (0: soon, never inline). Callable from any thread.
  virtual void after(std::chrono::nanoseconds delay, std::function<void()> fn) = 0;
  // The io_context it runs on (a caller that hands work to another thread keeps it running).
  virtual boost::asio::io_context& io_context() = 0;
};
// libcurl's multi interface on `ioc` (one multi handle, its connection cache shared by the transfers),
// with CurlTransport's semantics (make_curl_transport in include/hf3fs_meta/transport.hpp).
// Destroy it on the io_context's thread (or after the io_context stopped); transfers in flight are
// abandoned and their `done` never runs.
std::unique_ptr<AsyncTransport> make_curl_multi_transport(boost::asio::io_context& ioc, std::string base_url,
                                                          std::string ca_file = {},
                                                          std::size_t max_answer_bytes = kDefaultMaxAnswerBytes);
// The same requests and semantics written on asio sockets and parsed by Beast (asio_transport.cpp):
// fewer system calls and allocations per request than libcurl. http:// only: a request to an
// https:// endpoint fails (connection_failed, not sent), and `ca_file` is unused.
std::unique_ptr<AsyncTransport> make_asio_transport(boost::asio::io_context& ioc, std::string base_url,
                                                    std::string ca_file = {},
                                                    std::size_t max_answer_bytes = kDefaultMaxAnswerBytes);
// For a client of `endpoints` (the first is the base URL): the asio transport when every endpoint is
// http:// (under 64 connections through the proxy it spent about a third less CPU per request than
// libcurl's, docs/performance.md), else CurlMultiTransport, which speaks TLS. (A leader that an
// http:// member names with https:// is then out of reach: the call goes on to the next endpoint.)
std::unique_ptr<AsyncTransport> make_async_transport(boost::asio::io_context& ioc,
                                                     const std::vector<std::string>& endpoints,
                                                     std::string ca_file = {},
                                                     std::size_t max_answer_bytes = kDefaultMaxAnswerBytes);
}  // namespace hf3fs_meta::internal
