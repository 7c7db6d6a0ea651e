// CurlTransport against a real HTTP peer on 127.0.0.1. The transport's own tests
// (CurlTransportTest) run against both libcurl transports: the blocking one (easy handles) and the
// asynchronous ones (CurlMultiTransport and the asio one, driven to completion by
// BlockingAsyncTransport); a Client's
// (CurlClientTest) over the blocking one, which Client uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client/blocking_async_transport.hpp"
#include "client/http_peer.hpp"
#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::HttpPeer;
using testing::PeerRequest;
using testing::PeerResponse;
using testing::RefusingPort;

HttpRequest request_of(std::string path, std::string body, std::string id = "id-1") {
  return HttpRequest{std::move(path), std::move(body), {{"X-Request-Id", std::move(id)}}};
}

enum class Kind { easy, multi, asio };

class CurlTransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  static std::shared_ptr<Transport> make(std::string url, std::size_t max_answer_bytes = kDefaultMaxAnswerBytes) {
    if (GetParam() == Kind::easy) return make_curl_transport(std::move(url), {}, max_answer_bytes);
    return std::make_shared<testing::BlockingAsyncTransport>(std::move(url), max_answer_bytes, GetParam() == Kind::asio);
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, CurlTransportTest, ::testing::Values(Kind::easy, Kind::multi, Kind::asio),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return std::string(info.param == Kind::easy    ? "easy"
                                              : info.param == Kind::multi ? "multi"
                                                                          : "asio");
                         });

PeerResponse echo(const PeerRequest& r) {
  PeerResponse out;
  out.body = R"({"path":")" + r.target + "\"}";
  out.headers.push_back({"X-Request-Id-Dedup", "1"});
  return out;
}

TEST_P(CurlTransportTest, ConnectionRefusedIsConnectionFailedNotSent) {
  RefusingPort port;
  auto transport = make(port.url());
  auto r = transport->post(request_of("/clear", ""), AttemptTimeouts{1000ms, 2000ms});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().sent);
  EXPECT_TRUE(r.error().unreachable);  // the client repeats it until the deadline
  EXPECT_THAT(r.error().message, HasSubstr("onnect"));  // curl's own words
}

TEST_P(CurlTransportTest, UnresolvableHostIsNotSent) {
  auto transport = make("http://no-such-host.invalid:1");
  auto r = transport->post(request_of("/clear", ""), AttemptTimeouts{1000ms, 2000ms});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().sent);
  EXPECT_FALSE(r.error().unreachable);  // a wrong name is not a restart: bounded by the attempt count
}

TEST_P(CurlTransportTest, SilentPeerTimesOutWithinTheLimitAndWasSent) {
  HttpPeer peer(HttpPeer::Mode::silent);
  auto transport = make(peer.url());
  const auto start = std::chrono::steady_clock::now();
  auto r = transport->post(request_of("/keys/batch_exists", R"({"keys":["k"]})"), AttemptTimeouts{1000ms, 300ms});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_TRUE(r.error().sent);
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 300ms + 1500ms);  // margin for loaded and sanitized builds
  EXPECT_EQ(peer.requests().size(), 1u);
}

// A listener whose accept queue is full drops new SYNs: the connect itself times out.
class FullBacklog {
 public:
  FullBacklog() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 0) != 0) {
      throw std::runtime_error("listen");
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    // Fill the queue (never accepted); later connects are not answered.
    for (int i = 0; i < 4; ++i) {
      const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      fillers_.push_back(c);
    }
    // Until the kernel has queued more handshakes than the backlog takes (TCP_INFO of a listener:
    // tcpi_unacked is its accept queue, tcpi_sacked the backlog), the next connect could still land.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!full()) {
      if (std::chrono::steady_clock::now() >= deadline) throw std::runtime_error("the accept queue never filled");
      std::this_thread::sleep_for(1ms);
    }
  }
  ~FullBacklog() {
    for (int c : fillers_) ::close(c);
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  bool full() const {
    tcp_info info{};
    socklen_t len = sizeof info;
    return ::getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_unacked > info.tcpi_sacked;
  }

  int fd_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

TEST_P(CurlTransportTest, ConnectTimeoutIsTimeoutNotSent) {
  FullBacklog peer;
  auto transport = make(peer.url());
  const auto start = std::chrono::steady_clock::now();
  auto r = transport->post(request_of("/clear", ""), AttemptTimeouts{200ms, 5000ms});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout) << r.error().message;
  EXPECT_FALSE(r.error().sent);
  EXPECT_LT(took, 200ms + 1500ms);  // the connect timeout, not the total one
}

TEST_P(CurlTransportTest, PeerHangingUpAfterReadingIsConnectionFailedSent) {
  HttpPeer peer(HttpPeer::Mode::hang_up);
  auto transport = make(peer.url());
  auto r = transport->post(request_of("/keys/batch_allocate", "{}"), AttemptTimeouts{1000ms, 2000ms});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_TRUE(r.error().sent);
}

// libcurl resends a request by itself when a reused connection dies before any answer ("Connection
// died, retrying a fresh connect"). The request may have been applied, so that repeat is the
// client's decision (docs/design.md, "Retries"), never libcurl's: the peer must see it once.
TEST_P(CurlTransportTest, DeadReusedConnectionIsNotResentByLibcurl) {
  HttpPeer peer(HttpPeer::Mode::answer_once, echo);
  auto transport = make(peer.url());
  ASSERT_TRUE(transport->post(request_of("/keys/batch_exists", "{}"), AttemptTimeouts{}));  // pools a connection
  auto r = transport->post(request_of("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})"), AttemptTimeouts{});
  ASSERT_FALSE(r) << "libcurl repeated the request on a fresh connection";
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_TRUE(r.error().sent);
  const auto seen = peer.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].target, "/keys/batch_allocate");
  EXPECT_EQ(seen[1].body, R"({"rank":0,"keys":[["a",""]]})");
  // The handle is still usable: the next call connects afresh.
  ASSERT_TRUE(transport->post(request_of("/keys/batch_exists", "{}"), AttemptTimeouts{}));
  EXPECT_EQ(peer.requests().size(), 3u);
}

TEST_P(CurlTransportTest, SendsBodyHeadersAndReadsAnswer) {
  HttpPeer peer(HttpPeer::Mode::answer, echo);
  auto transport = make(peer.url() + "/");  // a trailing slash is tolerated
  auto r = transport->post(request_of("/keys/batch_exists", R"({"keys":["k"]})", "abc"), AttemptTimeouts{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r.value().status, 200);
  EXPECT_EQ(r.value().content_type, "application/json");
  EXPECT_EQ(r.value().body, R"({"path":"/keys/batch_exists"})");
  EXPECT_EQ(r.value().header("x-request-id-dedup"), "1");
  EXPECT_EQ(r.value().header("Content-Length"), "29");
  const auto seen = peer.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/keys/batch_exists");
  EXPECT_EQ(seen[0].body, R"({"keys":["k"]})");
  EXPECT_EQ(seen[0].header("content-type"), "application/json");
  EXPECT_EQ(seen[0].header("x-request-id"), "abc");
  EXPECT_FALSE(seen[0].header("expect"));
}

TEST_P(CurlTransportTest, LargeBodyIsSentWithoutExpectContinue) {
  HttpPeer peer(HttpPeer::Mode::answer, echo);
  auto transport = make(peer.url());
  const std::string body(3 << 20, 'x');  // libcurl asks for 100-continue above 1 MB unless told not to
  auto r = transport->post(request_of("/keys/batch_exists", body), AttemptTimeouts{});
  ASSERT_TRUE(r) << r.error().message;
  const auto seen = peer.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].body.size(), body.size());
  EXPECT_FALSE(seen[0].header("expect"));
}

TEST_P(CurlTransportTest, EmptyBodyIsSentAsEmpty) {
  HttpPeer peer(HttpPeer::Mode::answer, echo);
  auto transport = make(peer.url());
  ASSERT_TRUE(transport->post(request_of("/clear", ""), AttemptTimeouts{}));
  ASSERT_EQ(peer.requests().size(), 1u);
  EXPECT_EQ(peer.requests()[0].header("content-length"), "0");
}

TEST_P(CurlTransportTest, NonSuccessStatusIsAnAnswerNotAnError) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse out;
    out.status = 307;
    out.content_type = "";
    out.headers.push_back({"Location", "http://127.0.0.1:1/clear"});
    return out;
  });
  auto transport = make(peer.url());
  auto r = transport->post(request_of("/clear/", ""), AttemptTimeouts{});
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value().status, 307);  // not followed
  EXPECT_EQ(peer.requests().size(), 1u);
}

TEST_P(CurlTransportTest, SequentialCallsReuseOneConnection) {
  HttpPeer peer(HttpPeer::Mode::answer, echo);
  auto transport = make(peer.url());
  for (int i = 0; i < 25; ++i) {
    auto r = transport->post(request_of(i % 2 ? "/keys/batch_exists" : "/keys/get_locations", "{}"), AttemptTimeouts{});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r.value().body, std::string(R"({"path":")") + (i % 2 ? "/keys/batch_exists" : "/keys/get_locations") +
                                  "\"}");
  }
  EXPECT_EQ(peer.accepts(), 1);
  EXPECT_EQ(peer.requests().size(), 25u);
}

// One handle serves every call: a GET (GET /stats) must not turn the next POST into a GET, nor carry
// a body; the POST after it carries its own.
TEST_P(CurlTransportTest, AGetThenAPostOnOneHandleSendEachWithItsMethod) {
  HttpPeer peer(HttpPeer::Mode::answer, echo);
  auto transport = make(peer.url());
  HttpRequest get = request_of("/stats", "");
  get.method = "GET";
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(transport->post(get, AttemptTimeouts{}));
    ASSERT_TRUE(transport->post(request_of("/keys/batch_exists", R"({"keys":[]})"), AttemptTimeouts{}));
  }
  const auto seen = peer.requests();
  ASSERT_EQ(seen.size(), 4u);
  for (int i = 0; i < 4; i += 2) {
    EXPECT_EQ(seen[i].method, "GET");
    EXPECT_EQ(seen[i].target, "/stats");
    EXPECT_EQ(seen[i].body, "");
    EXPECT_FALSE(seen[i].header("content-length").has_value() && seen[i].header("content-length") != "0");
    EXPECT_EQ(seen[i + 1].method, "POST");
    EXPECT_EQ(seen[i + 1].target, "/keys/batch_exists");
    EXPECT_EQ(seen[i + 1].body, R"({"keys":[]})");
  }
  EXPECT_EQ(peer.accepts(), 1);
}

TEST_P(CurlTransportTest, ReconnectsWhenThePeerClosesTheConnection) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse out;
    out.body = "{}";
    out.close = true;
    return out;
  });
  auto transport = make(peer.url());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(transport->post(request_of("/clear", ""), AttemptTimeouts{}));
  EXPECT_EQ(peer.accepts(), 3);
}

// A 2 GB answer must not take the worker's memory: reading stops at the limit.
TEST_P(CurlTransportTest, AnAnswerOverTheLimitIsAProtocolErrorSent) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse r;
    r.body = std::string(4 << 20, ' ');
    return r;
  });
  auto transport = make(peer.url(), 1 << 20);
  auto r = transport->post(request_of("/keys/batch_exists", "{}"), AttemptTimeouts{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_TRUE(r.error().sent);
  EXPECT_THAT(r.error().message, HasSubstr("larger than 1048576 bytes"));
  std::string request_text = "(POST ";
  request_text.append(peer.url()).append("/keys/batch_exists)");
  EXPECT_THAT(r.error().message, HasSubstr(request_text));
  // Under a larger limit the same answer is read whole.
  auto small = make(peer.url(), 8 << 20)->post(request_of("/keys/batch_exists", "{}"), AttemptTimeouts{});
  ASSERT_TRUE(small) << small.error().message;
  EXPECT_EQ(small.value().body.size(), std::size_t{4} << 20);
}

// The asio transport has no TLS: an https:// endpoint fails without anything sent, and not as
// unreachable (no restart to ride out), so that a client does not wait on it until its deadline.
TEST(AsioTransportTest, AnHttpsEndpointIsRefusedNotSent) {
  testing::BlockingAsyncTransport transport("https://127.0.0.1:1", kDefaultMaxAnswerBytes, /*asio=*/true);
  auto r = transport.post(request_of("/clear", ""), AttemptTimeouts{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().sent);
  EXPECT_FALSE(r.error().unreachable);
  EXPECT_THAT(r.error().message, HasSubstr("https:// is not supported"));
}

TEST(CurlClientTest, AnAnswerOverTheLimitIsNotReadFurther) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse r;
    r.body = std::string(4 << 20, ' ');
    return r;
  });
  ClientOptions options;
  options.base_url = peer.url();
  options.max_answer_bytes = 1 << 20;
  Client client(options);
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_THAT(r.error().detail, ::testing::HasSubstr("larger than 1048576 bytes"));
}

// An answer that arrives too slowly is cut at the call's deadline: reading it counts. The whole
// answer takes 10 s, an attempt's own timeout 5 s: a call over in well under 5 s was cut by its
// deadline. How late a call may end (100 ms, README) is the retry loop's arithmetic, tested on a
// fake clock (retry_loop_test); here a loaded machine's scheduling is allowed for.
TEST(CurlClientTest, ASlowAnswerEndsTheCallAtItsDeadline) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse r;
    r.body = std::string(1000, ' ');  // 10 s at one byte per 10 ms
    r.pace = 10ms;
    return r;
  });
  ClientOptions options;
  options.base_url = peer.url();
  Client client(options);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.batch_exists({"k"}, CallOptions{300ms});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_TRUE(r.error().sent);
  EXPECT_LT(took, 300ms + 2000ms);
}

TEST(CurlClientTest, ClientOverCurlReusesOneConnection) {
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse out;
    out.body = R"({"exists":[true]})";
    return out;
  });
  ClientOptions options;
  options.base_url = peer.url();
  Client client(options);
  for (int i = 0; i < 10; ++i) {
    auto r = client.batch_exists({"k"});
    ASSERT_TRUE(r) << r.error().message();
  }
  EXPECT_EQ(peer.accepts(), 1);
  const auto seen = peer.requests();
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_NE(seen[0].header("x-request-id"), seen[1].header("x-request-id"));
}

// A request goes to its endpoint, else to the transport's base URL; a client of several
// endpoints reaches the leader a standby names, over one transport, and keeps going there.
TEST_P(CurlTransportTest, ARequestGoesToItsEndpointElseToTheBaseUrl) {
  HttpPeer base(HttpPeer::Mode::answer, echo);
  HttpPeer other(HttpPeer::Mode::answer, echo);
  auto transport = make(base.url() + "/");
  HttpRequest to_other = request_of("/clear", "");
  to_other.endpoint = other.url() + "/";
  ASSERT_TRUE(transport->post(to_other, AttemptTimeouts{}));
  ASSERT_TRUE(transport->post(request_of("/clear", ""), AttemptTimeouts{}));
  ASSERT_TRUE(transport->post(to_other, AttemptTimeouts{}));
  EXPECT_EQ(other.requests().size(), 2u);
  ASSERT_EQ(base.requests().size(), 1u);
  EXPECT_EQ(base.requests()[0].target, "/clear");
}

TEST(CurlClientTest, ClientOverCurlFollowsTheLeaderAStandbyNames) {
  HttpPeer leader(HttpPeer::Mode::answer, [](const PeerRequest&) {
    PeerResponse out;
    out.body = R"({"exists":[true]})";
    return out;
  });
  const std::string leader_url = leader.url();
  HttpPeer standby(HttpPeer::Mode::answer, [&](const PeerRequest&) {
    PeerResponse out;
    out.status = 503;
    out.body = R"({"detail":"not the leader: nothing applied"})";
    out.headers.push_back({"X-Hf3fs-Leader", leader_url});
    return out;
  });
  RefusingPort gone;
  ClientOptions options;
  options.endpoints = {gone.url(), standby.url()};
  options.backoff_policy = std::make_shared<ExponentialBackoffPolicy>(1ms, 2ms);
  Client client(options);
  for (int i = 0; i < 3; ++i) {
    auto r = client.batch_exists({"k"});
    ASSERT_TRUE(r) << r.error().message();
  }
  EXPECT_EQ(standby.requests().size(), 1u);
  EXPECT_EQ(leader.requests().size(), 3u);
}

TEST(CurlClientTest, ClientOverCurlRefusedGivesUpWithConnectionFailed) {
  RefusingPort port;
  ClientOptions options;
  options.base_url = port.url();
  options.backoff_policy = std::make_shared<ExponentialBackoffPolicy>(1ms, 2ms);
  Client client(options);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.allocate(0, {"k"}, CallOptions{200ms});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().sent);
  // Unsent: repeated even for allocate, past the attempt count (4), until the deadline.
  EXPECT_GT(r.error().attempts, 4);
  EXPECT_THAT(r.error().message(), HasSubstr("deadline of 0.2 s"));
  // Ended by the deadline, not the default one (10 s); how late at most is retry_loop_test's (fake
  // clock), as above.
  EXPECT_LT(took, 200ms + 2000ms);
}

TEST(CurlClientTest, ClientOverCurlDoesNotRepeatATimedOutAllocate) {
  HttpPeer peer(HttpPeer::Mode::silent);
  ClientOptions options;
  options.base_url = peer.url();
  options.request_timeout = 200ms;
  Client client(options);
  auto r = client.allocate(0, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_TRUE(r.error().sent);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(r.error().stop_reason, "not safe to repeat allocate after timeout (request sent)");
  EXPECT_EQ(peer.requests().size(), 1u);
}

}  // namespace
}  // namespace hf3fs_meta
