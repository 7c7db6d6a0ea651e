// A blocking Transport over an AsyncTransport (CurlMultiTransport or the asio one) on an io_context of its own: post() starts the
// request and runs the io_context until its `done` ran, so that CurlTransport's tests
// (curl_transport_test.cpp) hold for the asynchronous transport too. One caller at a time.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "client/async_transport.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::testing {

class BlockingAsyncTransport final : public Transport {
 public:
  // asio: make_asio_transport's, else CurlMultiTransport.
  explicit BlockingAsyncTransport(std::string base_url, std::size_t max_answer_bytes = kDefaultMaxAnswerBytes,
                                  bool asio = false)
      : async_(asio ? internal::make_asio_transport(ioc_, std::move(base_url), {}, max_answer_bytes)
                    : internal::make_curl_multi_transport(ioc_, std::move(base_url), {}, max_answer_bytes)) {}

  TransportResult post(const HttpRequest& request, const AttemptTimeouts& timeouts) override {
    std::optional<TransportResult> out;
    async_->async_post(request, timeouts, [&out](TransportResult result) {
      EXPECT_FALSE(out.has_value()) << "done ran twice";
      out.emplace(std::move(result));
    });
    EXPECT_FALSE(out.has_value()) << "done ran inside async_post";
    ioc_.restart();
    while (!out) {
      // Out of work with no answer: a transfer nothing waits for any more (a lost wait or timer).
      if (ioc_.run_one() == 0) return TransportError{errc::connection_failed, false, "the io_context ran out of work"};
    }
    return std::move(*out);
  }

 private:
  boost::asio::io_context ioc_;  // declared first: outlives the transport, which is destroyed on this thread
  std::unique_ptr<internal::AsyncTransport> async_;
};

}  // namespace hf3fs_meta::testing
