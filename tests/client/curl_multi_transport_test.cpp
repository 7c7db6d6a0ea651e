// The asynchronous transports' own behaviour (CurlMultiTransport's and the asio one's), beyond
// CurlTransport's semantics (which curl_transport_test.cpp checks against every transport): many transfers at once on one io_context, connections shared
// between transfers, `done` starting the next request or destroying the transport, after(), and a
// transport destroyed with transfers in flight. Against HttpPeer on 127.0.0.1; every wait is bounded.
#include <dirent.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/async_transport.hpp"
#include "client/http_peer.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta {
namespace {

using namespace std::chrono_literals;
using internal::AsyncTransport;
using testing::HttpPeer;
using testing::PeerRequest;
using testing::PeerResponse;

// Each case runs over CurlMultiTransport and over the asio transport (make_asio_transport).
enum class Kind { multi, asio };

class AsyncTransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  static std::unique_ptr<AsyncTransport> make(boost::asio::io_context& ioc, std::string url) {
    if (GetParam() == Kind::asio) return internal::make_asio_transport(ioc, std::move(url));
    return internal::make_curl_multi_transport(ioc, std::move(url));
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, AsyncTransportTest, ::testing::Values(Kind::multi, Kind::asio),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return std::string(info.param == Kind::multi ? "multi" : "asio");
                         });

HttpRequest request_of(std::string path, std::string body) {
  return HttpRequest{std::move(path), std::move(body), {{"X-Request-Id", "id"}}};
}

// Runs `ioc` until `done()` or `limit`; false if the limit passed first or the io_context ran out
// of work first (a transfer nothing waits for).
bool run_until(boost::asio::io_context& ioc, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  ioc.restart();
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ioc.run_one_for(20ms);
    if (ioc.stopped() && !done()) return false;
  }
  return true;
}

// Whether `ioc` runs out of work at once: nothing of a transport is left waiting in it (run_for
// returns as soon as there is no work; the limit only bounds a failure).
bool runs_out_of_work(boost::asio::io_context& ioc) {
  ioc.restart();
  const auto start = std::chrono::steady_clock::now();
  ioc.run_for(5s);
  return std::chrono::steady_clock::now() - start < 1s;
}

// The descriptors this process has open.
int open_descriptors() {
  int count = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++count;
    ::closedir(dir);
  }
  return count;
}

PeerResponse echo_body(const PeerRequest& r) {
  PeerResponse out;
  out.body = r.target;
  out.body.append(" ").append(r.body);
  return out;
}

// Every request is held at the peer until all of them arrived: they complete only if all are in
// flight at once, each on a connection of its own, and each answer must reach its own `done`.
TEST_P(AsyncTransportTest, ManyTransfersInFlightAtOnceCompleteWithTheirOwnAnswers) {
  constexpr int kTransfers = 16;
  std::mutex mutex;
  std::condition_variable all_arrived;
  int arrived = 0;
  HttpPeer peer(HttpPeer::Mode::answer, [&](const PeerRequest& r) {
    std::unique_lock lock(mutex);
    if (++arrived == kTransfers) all_arrived.notify_all();
    all_arrived.wait_for(lock, 10s, [&] { return arrived >= kTransfers; });
    return echo_body(r);
  });
  boost::asio::io_context ioc;
  auto transport = make(ioc, peer.url());
  std::vector<HttpRequest> requests;
  for (int i = 0; i < kTransfers; ++i) {
    std::string path = "/keys/batch_exists/";
    path.append(std::to_string(i));
    std::string body = "body ";
    body.append(std::to_string(i));
    requests.push_back(request_of(std::move(path), std::move(body)));
  }
  std::vector<std::optional<TransportResult>> results(kTransfers);
  int finished = 0;
  for (int i = 0; i < kTransfers; ++i) {
    transport->async_post(requests[i], AttemptTimeouts{1000ms, 10000ms}, [&, i](TransportResult r) {
      EXPECT_FALSE(results[i].has_value()) << "done ran twice for " << i;
      results[i].emplace(std::move(r));
      ++finished;
    });
  }
  EXPECT_EQ(finished, 0) << "a done ran inside async_post";
  ASSERT_TRUE(run_until(ioc, [&] { return finished == kTransfers; }, 15s)) << finished << " finished";
  for (int i = 0; i < kTransfers; ++i) {
    ASSERT_TRUE(results[i].value()) << results[i].value().error().message;
    EXPECT_EQ(results[i].value().value().status, 200);
    std::string expected = requests[i].path;
    expected.append(" ").append(requests[i].body);
    EXPECT_EQ(results[i].value().value().body, expected);
  }
  EXPECT_EQ(peer.accepts(), kTransfers);
}

// A done that starts the next request (the retry loop's way): never run inside async_post, and the
// chain goes over one connection, which the multi handle's cache keeps between transfers.
TEST_P(AsyncTransportTest, ADoneThatStartsTheNextRequestReusesTheConnection) {
  HttpPeer peer(HttpPeer::Mode::answer, echo_body);
  boost::asio::io_context ioc;
  auto transport = make(ioc, peer.url());
  constexpr int kRequests = 10;
  std::vector<HttpRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(request_of("/clear", std::to_string(i)));
  std::vector<std::string> bodies;
  bool inside_post = false;
  std::function<void(int)> start = [&](int i) {
    inside_post = true;
    transport->async_post(requests[i], AttemptTimeouts{}, [&, i](TransportResult r) {
      EXPECT_FALSE(inside_post) << "done ran inside async_post";
      ASSERT_TRUE(r) << r.error().message;
      bodies.push_back(r.value().body);
      if (i + 1 < kRequests) start(i + 1);
    });
    inside_post = false;
  };
  start(0);
  ASSERT_TRUE(run_until(ioc, [&] { return bodies.size() == kRequests; }, 10s)) << bodies.size();
  for (int i = 0; i < kRequests; ++i) {
    std::string expected = "/clear ";
    expected.append(std::to_string(i));
    EXPECT_EQ(bodies[i], expected);
  }
  EXPECT_EQ(peer.accepts(), 1);
  EXPECT_EQ(peer.requests().size(), std::size_t{kRequests});
  // The idle connection stays in the cache unwatched: nothing is left for the io_context to wait on.
  EXPECT_TRUE(runs_out_of_work(ioc));
}

TEST_P(AsyncTransportTest, AfterRunsItsFunctionOnceTheDelayPassedAndNeverInline) {
  boost::asio::io_context ioc;
  auto transport = make(ioc, "http://127.0.0.1:1");
  int soon = 0;
  std::optional<std::chrono::steady_clock::duration> later;
  const auto start = std::chrono::steady_clock::now();
  transport->after(0ns, [&] { ++soon; });
  transport->after(50ms, [&] { later = std::chrono::steady_clock::now() - start; });
  EXPECT_EQ(soon, 0) << "after(0) ran inline";
  ASSERT_TRUE(run_until(ioc, [&] { return later.has_value(); }, 5s));
  EXPECT_EQ(soon, 1);
  EXPECT_GE(*later, 50ms);
}

TEST_P(AsyncTransportTest, AfterCalledFromAnotherThreadRunsOnTheIoContextsThread) {
  boost::asio::io_context ioc;
  auto transport = make(ioc, "http://127.0.0.1:1");
  auto work = boost::asio::make_work_guard(ioc);  // the io_context waits for the other thread's posts
  const auto io_thread = std::this_thread::get_id();
  std::vector<std::thread::id> ran_on;
  std::thread other([&] {
    transport->after(0ns, [&] { ran_on.push_back(std::this_thread::get_id()); });
    transport->after(20ms, [&] { ran_on.push_back(std::this_thread::get_id()); });
  });
  const bool ran = run_until(ioc, [&] { return ran_on.size() == 2; }, 5s);
  other.join();
  work.reset();
  ASSERT_TRUE(ran) << ran_on.size();
  EXPECT_EQ(ran_on[0], io_thread);
  EXPECT_EQ(ran_on[1], io_thread);
}

// Destroyed with a transfer in flight (to a peer that never answers) and an after() pending: no
// done and no fn runs, the io_context runs out of work (nothing of the transport is left in it),
// and no descriptor is left open (memory: ASan's leak check).
TEST_P(AsyncTransportTest, DestroyedWithATransferInFlightRunsNoDoneAndLeavesNothingOpen) {
  const int descriptors_before = open_descriptors();
  {
    HttpPeer peer(HttpPeer::Mode::silent);
    boost::asio::io_context ioc;
    auto transport = make(ioc, peer.url());
    const HttpRequest request = request_of("/keys/batch_allocate", "{}");
    bool done_ran = false;
    bool fn_ran = false;
    transport->async_post(request, AttemptTimeouts{1000ms, 10000ms}, [&](TransportResult) { done_ran = true; });
    transport->after(1ms, [&] { fn_ran = true; });
    ASSERT_TRUE(run_until(ioc, [&] { return peer.requests().size() == 1 && fn_ran; }, 5s));
    fn_ran = false;
    transport->after(0ns, [&] { fn_ran = true; });
    transport->after(10ms, [&] { fn_ran = true; });
    transport.reset();
    EXPECT_TRUE(runs_out_of_work(ioc)) << "something of the transport is still waiting";
    EXPECT_FALSE(done_ran);
    EXPECT_FALSE(fn_ran);
  }
  EXPECT_EQ(open_descriptors(), descriptors_before);
}

// A done may destroy its own transport (an owner going away on an answer): the other transfer in
// flight is abandoned and the io_context is left with nothing of the transport.
TEST_P(AsyncTransportTest, ADoneThatDestroysTheTransportAbandonsTheOthers) {
  HttpPeer answering(HttpPeer::Mode::answer, echo_body);
  HttpPeer silent(HttpPeer::Mode::silent);
  boost::asio::io_context ioc;
  std::unique_ptr<AsyncTransport> transport = make(ioc, answering.url());
  const HttpRequest answered = request_of("/clear", "a");
  HttpRequest unanswered = request_of("/clear", "b");
  unanswered.endpoint = silent.url();
  bool first_done = false;
  bool second_done = false;
  transport->async_post(unanswered, AttemptTimeouts{1000ms, 10000ms}, [&](TransportResult) { second_done = true; });
  transport->async_post(answered, AttemptTimeouts{1000ms, 10000ms}, [&](TransportResult r) {
    EXPECT_TRUE(r) << r.error().message;
    first_done = true;
    transport.reset();
  });
  ASSERT_TRUE(run_until(ioc, [&] { return first_done; }, 5s));
  EXPECT_EQ(transport, nullptr);
  EXPECT_TRUE(runs_out_of_work(ioc));
  EXPECT_FALSE(second_done);
}

}  // namespace
}  // namespace hf3fs_meta
