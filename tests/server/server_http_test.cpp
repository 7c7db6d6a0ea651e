// hf3fs-meta-server at the HTTP level: framing, headers, server routes, timeouts and shutdown.
#include <signal.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "server/server_test_support.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

class ServerHttpTest : public ServerTestBase {};

void expect_json(const RawResponse& r, int status, std::string_view body) {
  EXPECT_EQ(r.status, status);
  EXPECT_EQ(r.body, body);
  EXPECT_THAT(r.header("content-type"), Optional(std::string("application/json")));
  EXPECT_THAT(r.header("content-length"), Optional(std::to_string(body.size())));
  EXPECT_THAT(r.header("x-request-id-dedup"), Optional(std::string("60000")));
}

TEST_F(ServerHttpTest, PrintsTheStartupLineWithTheChosenPort) {
  const std::string prefix = "listening on http://127.0.0.1:";
  ASSERT_EQ(server_.startup_line().substr(0, prefix.size()), prefix);
  const auto digits = server_.startup_line().substr(prefix.size());
  EXPECT_FALSE(digits.empty());
  EXPECT_EQ(digits.find_first_not_of("0123456789"), std::string::npos) << server_.startup_line();
  EXPECT_NE(server_.port(), 0);
  EXPECT_EQ(server_.startup_line(), "listening on " + server_.base_url());
}

// --log-requests: a line per request with its method, target, status and time; without the flag,
// none.
TEST(ServerLogRequestsTest, EveryRequestIsALineWithItsStatusOnlyWithTheFlag) {
  TempFile log("");
  {
    ServerProcess server({"--threads", "1", "--log-requests"}, log.path());
    ASSERT_EQ(raw_request(server.host(), server.port(), "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
    ASSERT_EQ(raw_request(server.host(), server.port(), "POST", "/keys/get_locations", R"({"rank":9,"keys":["k"]})").status,
              500);
    EXPECT_EQ(server.terminate(), 0);
  }
  const std::string logged = read_all(log.path());
  EXPECT_THAT(logged, ::testing::ContainsRegex(R"(POST /rank/0/initialize -> 200 \([0-9]+\.[0-9]{3} ms\))"));
  EXPECT_THAT(logged, ::testing::ContainsRegex(R"(POST /keys/get_locations -> 500 \([0-9]+\.[0-9]{3} ms\))"));
  TempFile quiet("");
  {
    ServerProcess server({"--threads", "1"}, quiet.path());
    ASSERT_EQ(raw_request(server.host(), server.port(), "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
    EXPECT_EQ(server.terminate(), 0);
  }
  EXPECT_THAT(read_all(quiet.path()), Not(HasSubstr(" -> ")));
}

TEST_F(ServerHttpTest, HealthzAnswers200AndOnlyToGet) {
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
  auto r = send("POST", "/healthz");
  expect_json(r, 405, R"({"detail":"Method Not Allowed"})");
  EXPECT_THAT(r.header("allow"), Optional(std::string("GET")));
}

TEST_F(ServerHttpTest, ProtocolRoundTripThroughService) {
  initialize(0, 8);
  expect_json(post("/keys/batch_allocate", R"({"rank":0,"keys":[["k1",""],["k2",""]]})"), 200,
              R"({"rank":0,"results":[["k1",0],["k2",1]]})");
  auto confirm = post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k1",0]],"pages_to_release":[1]})");
  EXPECT_EQ(confirm.status, 204);
  EXPECT_EQ(confirm.body, "");
  EXPECT_FALSE(confirm.header("content-type"));
  EXPECT_FALSE(confirm.header("content-length"));
  EXPECT_THAT(confirm.header("x-request-id-dedup"), Optional(std::string("60000")));
  expect_json(post("/keys/batch_exists", R"({"keys":["k1","k2"]})"), 200, R"({"exists":[true,false]})");
  expect_json(post("/keys/get_locations", R"({"rank":0,"keys":["k1","k2"]})"), 200, R"({"locations":[0,null]})");
  // Page 1 went to the back of the pool, so the next key gets page 2.
  expect_json(allocate(0, "k3"), 200, allocate_answer(0, "k3", 2));
  auto clear = post("/clear", "not even json");
  EXPECT_EQ(clear.status, 204);
  expect_json(allocate(0, "k4"), 500, R"({"detail":"Allocation failed: Rank 0 not initialized"})");
}

// A parser that recursed per nesting level would overflow the stack on this: the server must refuse
// it and keep serving.
TEST_F(ServerHttpTest, DeeplyNestedBodiesAreRefusedWithoutHarm) {
  const std::string deep(1'000'000, '[');
  for (std::string_view path : {"/keys/batch_allocate", "/keys/batch_exists", "/keys/get_locations",
                                "/keys/confirm_write", "/rank/0/initialize"}) {
    // Bare, as a field, and behind a member the fast decoders do not know (full parser).
    for (const std::string& prefix : {std::string(), std::string(R"({"rank":0,"keys":)"),
                                      std::string(R"({ "rank" : 0, "other" : )")}) {
      EXPECT_EQ(post(path, prefix + deep).status, 400) << path << ' ' << prefix;
    }
  }
  EXPECT_EQ(get("/healthz").status, 200);
}

TEST_F(ServerHttpTest, UnknownPathIs404ForEveryMethod) {
  expect_json(post("/nope", "{}"), 404, R"({"detail":"Not Found"})");
  expect_json(get("/nope"), 404, R"({"detail":"Not Found"})");
  expect_json(send("DELETE", "/keys"), 404, R"({"detail":"Not Found"})");
  // Without the flag, the fault-injection route does not exist.
  expect_json(post("/_faults", R"({"status":503})"), 404, R"({"detail":"Not Found"})");
}

TEST_F(ServerHttpTest, HeadGetsTheHeadersWithoutABody) {
  RawConnection connection(server_.host(), server_.port());
  auto r = connection.request("HEAD", "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(r.header("content-length"), Optional(std::string("22")));
  EXPECT_EQ(r.body, "");
  // The connection is still in step: the next answer is read whole.
  expect_json(connection.request("GET", "/healthz"), 200, R"({"status":"ok"})");
}

TEST_F(ServerHttpTest, GetOnAPostRouteIs405WithAllow) {
  auto r = get("/keys/batch_allocate");
  expect_json(r, 405, R"({"detail":"Method Not Allowed"})");
  EXPECT_THAT(r.header("allow"), Optional(std::string("POST")));
}

TEST_F(ServerHttpTest, TrailingSlashIs307ToTheAbsolutePathFromTheHostHeader) {
  auto r = post("/keys/batch_exists/", R"({"keys":[]})");
  EXPECT_EQ(r.status, 307);
  EXPECT_THAT(r.header("location"), Optional(server_.base_url() + "/keys/batch_exists"));
  EXPECT_EQ(r.body, "");
  auto other_host = post("/clear/", "", {});
  EXPECT_EQ(other_host.status, 307);

  RawConnection connection(server_.host(), server_.port());
  connection.send("POST /keys/batch_exists/ HTTP/1.1\r\nHost: meta.example:18000\r\nContent-Length: 0\r\n\r\n");
  auto named = connection.read_response();
  EXPECT_EQ(named.status, 307);
  EXPECT_THAT(named.header("location"), Optional(std::string("http://meta.example:18000/keys/batch_exists")));
}

TEST_F(ServerHttpTest, PathRankThatIsNotAnIntegerIs422WithPydantic2Body) {
  expect_json(post("/rank/abc/initialize", R"({"num_pages":4})"), 422,
              R"({"detail":[{"type":"int_parsing","loc":["path","rank"],)"
              R"("msg":"Input should be a valid integer, unable to parse string as an integer","input":"abc"}]})");
}

// POST /rank/{rank}/drop (extension, always served like /keys/delete and /stats): what it answers,
// and the same method and path checks as every route.
TEST_F(ServerHttpTest, DropRankAnswersItsCountsAndIsCheckedLikeEveryRoute) {
  initialize(0, 2);
  initialize(1, 4);
  for (int rank : {0, 1}) {
    ASSERT_EQ(allocate(rank, "both").status, 200);
    ASSERT_EQ(post("/keys/confirm_write", R"({"rank":)" + std::to_string(rank) + R"(,"confirmations":[["both",0]]})").status,
              204);
  }
  ASSERT_EQ(allocate(1, "only").status, 200);
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":1,"confirmations":[["only",1]]})").status, 204);

  expect_json(post("/rank/1/drop", ""), 200, R"({"rank":1,"dropped":true,"pages":4,"mappings":2,"keys_removed":1})");
  // "only" had no page left and is gone; "both" keeps its page on rank 0, but its tp_world_size (2,
  // fixed at its first confirmation) says it is incomplete now.
  expect_json(post("/keys/batch_exists", R"({"keys":["both","only"]})"), 200, R"({"exists":[false,false]})");
  expect_json(post("/keys/get_locations", R"({"rank":1,"keys":["both"]})"), 500,
              R"({"detail":"Failed to get key locations: Rank 1 not initialized"})");
  expect_json(post("/rank/1/drop", ""), 200, R"({"rank":1,"dropped":false,"pages":0,"mappings":0,"keys_removed":0})");

  auto get_drop = get("/rank/0/drop");
  expect_json(get_drop, 405, R"({"detail":"Method Not Allowed"})");
  EXPECT_THAT(get_drop.header("allow"), Optional(std::string("POST")));
  expect_json(post("/rank/x/drop", ""), 422,
              R"({"detail":[{"type":"int_parsing","loc":["path","rank"],)"
              R"("msg":"Input should be a valid integer, unable to parse string as an integer","input":"x"}]})");
  // The rank comes back empty: its pool starts again at page 0.
  initialize(1, 4);
  expect_json(allocate(1, "only"), 200, allocate_answer(1, "only", 0));
}

TEST_F(ServerHttpTest, ContentTypeIsNotChecked) {
  expect_json(post("/keys/batch_exists", R"({"keys":[]})", {{"Content-Type", "text/plain"}}), 200,
              R"({"exists":[]})");
}

TEST_F(ServerHttpTest, BodyThatIsNotAJsonObjectIsRefusedWith400) {
  // A body that is not a JSON object is one of the deviations: the server answers 400 naming it.
  auto r = post("/keys/batch_exists", "[1,2]");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.header("content-type"), Optional(std::string("application/json")));
}

TEST_F(ServerHttpTest, KeepAliveServesManyRequestsOnOneConnection) {
  RawConnection connection(server_.host(), server_.port());
  initialize(1, 100);
  for (int i = 0; i < 20; ++i) {
    auto r = connection.request("POST", "/keys/batch_allocate",
                                R"({"rank":1,"keys":[["key)" + std::to_string(i) + R"(",""]]})");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.body, allocate_answer(1, "key" + std::to_string(i), i));
    EXPECT_FALSE(r.header("connection"));
  }
  EXPECT_FALSE(connection.peer_closed(std::chrono::milliseconds(50)));
}

TEST_F(ServerHttpTest, ParallelConnectionsNeverGetTheSamePage) {
  initialize(0, 100000);
  constexpr int kClients = 6;
  constexpr int kRequests = 150;
  std::vector<std::vector<std::string>> bodies(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      RawConnection connection(server_.host(), server_.port());
      for (int i = 0; i < kRequests; ++i) {
        std::string body = R"({"rank":0,"keys":[["c)";
        body += std::to_string(c);
        body += '-';
        body += std::to_string(i);
        body += R"(",""]]})";
        auto r = connection.request("POST", "/keys/batch_allocate", body);
        bodies[c].push_back(std::to_string(r.status) + " " + r.body);
      }
    });
  }
  for (auto& client : clients) client.join();
  std::set<std::string> pages;
  for (const auto& list : bodies) {
    for (const auto& body : list) {
      ASSERT_EQ(body.substr(0, 4), "200 ") << body;
      const auto comma = body.rfind(',');
      pages.insert(body.substr(comma + 1, body.find(']', comma) - comma - 1));
    }
  }
  EXPECT_EQ(pages.size(), static_cast<std::size_t>(kClients * kRequests));
  EXPECT_EQ(pages.count("-1"), 0u);
}

TEST_F(ServerHttpTest, PipelinedRequestsAreAnsweredInOrder) {
  RawConnection connection(server_.host(), server_.port());
  const auto host = connection.host_header();
  connection.send(format_request("GET", "/healthz", host, "") + format_request("GET", "/nope", host, "") +
                  format_request("POST", "/keys/batch_exists", host, R"({"keys":["x"]})"));
  EXPECT_EQ(connection.read_response().status, 200);
  EXPECT_EQ(connection.read_response().status, 404);
  auto third = connection.read_response();
  EXPECT_EQ(third.status, 200);
  EXPECT_EQ(third.body, R"({"exists":[false]})");
}

TEST_F(ServerHttpTest, ConnectionCloseIsHonoured) {
  RawConnection connection(server_.host(), server_.port());
  auto r = connection.request("GET", "/healthz", {}, {{"Connection", "close"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.header("connection"), Optional(std::string("close")));
  EXPECT_TRUE(connection.peer_closed(std::chrono::seconds(5)));
}

TEST_F(ServerHttpTest, ChunkedBodyIsAccepted) {
  RawConnection connection(server_.host(), server_.port());
  connection.send("POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\n{\"key\r\n6\r\ns\":[]}\r\n0\r\n\r\n");
  auto r = connection.read_response();
  expect_json(r, 200, R"({"exists":[]})");
}

TEST_F(ServerHttpTest, ExpectContinueGets100BeforeTheBody) {
  RawConnection connection(server_.host(), server_.port());
  const std::string body = R"({"keys":["a"]})";
  connection.send("POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n");
  auto interim = connection.read_response();
  EXPECT_EQ(interim.status, 100);
  connection.send(body);
  expect_json(connection.read_response(), 200, R"({"exists":[false]})");
}

TEST_F(ServerHttpTest, MalformedHttpIs400AndClosesTheConnection) {
  RawConnection connection(server_.host(), server_.port());
  connection.send("THIS IS NOT HTTP\r\n\r\n");
  auto r = connection.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "Invalid HTTP request received.");
  EXPECT_THAT(r.header("connection"), Optional(std::string("close")));
  EXPECT_TRUE(connection.peer_closed(std::chrono::seconds(5)));
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
}

TEST_F(ServerHttpTest, HeaderOverTheLimitIs400AndCloses) {
  RawConnection connection(server_.host(), server_.port());
  std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ";
  request.append(70 * 1024, 'a');
  request.append("\r\n\r\n");
  connection.send(request);
  auto r = connection.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.header("connection"), Optional(std::string("close")));
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
}

TEST_F(ServerHttpTest, GarbageNeverCrashesTheServer) {
  std::mt19937 random(20261130);
  const std::vector<std::string> seeds = {
      "POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"keys\":[1]}",
      "POST /keys/batch_allocate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n{\"rank\":0}\r\n0\r\n\r\n",
      "GET /rank/%ff%fe/initialize HTTP/1.0\r\n\r\n",
  };
  for (int i = 0; i < 150; ++i) {
    std::string bytes = seeds[static_cast<std::size_t>(i) % seeds.size()];
    const int mutations = 1 + static_cast<int>(random() % 8);
    for (int m = 0; m < mutations; ++m) {
      const auto at = random() % bytes.size();
      switch (random() % 3) {
        case 0: bytes[at] = static_cast<char>(random() % 256); break;
        case 1: bytes.erase(at, 1 + random() % 4); break;
        default: bytes.insert(at, 1, static_cast<char>(random() % 256)); break;
      }
      if (bytes.empty()) bytes.push_back('x');
    }
    RawConnection connection(server_.host(), server_.port(), std::chrono::seconds(5));
    connection.send(bytes);
    connection.shutdown_write();
    // Once the input ends, the server answers what it could frame, each answer well-formed HTTP
    // (read_response throws on anything else), and closes: a connection never hangs, and the
    // server never goes down (every later connection is answered).
    for (int answers = 0;; ++answers) {
      if (connection.peer_closed(std::chrono::seconds(5))) break;
      ASSERT_TRUE(connection.has_input()) << "input " << i << ": still open 5 s after its end, " << answers
                                          << " answers";
      const auto r = connection.read_response();
      EXPECT_TRUE(r.status >= 200 && r.status < 600) << "input " << i << ": status " << r.status;
    }
  }
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
}

class ServerLimitsTest : public ServerTestBase {
 protected:
  ServerLimitsTest()
      : ServerTestBase({"--threads", "2", "--max-body-bytes", "1000", "--idle-timeout-ms", "300"}) {}
};

TEST_F(ServerLimitsTest, BodyOverTheLimitIs413) {
  const std::string big(1001, ' ');
  RawConnection connection(server_.host(), server_.port());
  auto r = connection.request("POST", "/keys/batch_exists", big);
  expect_json(r, 413, R"({"detail":"Request body too large"})");
  EXPECT_THAT(r.header("connection"), Optional(std::string("close")));
  EXPECT_TRUE(connection.peer_closed(std::chrono::seconds(5)));
  // Exactly at the limit is fine.
  std::string at_limit = R"({"keys":[]})";
  at_limit.resize(1000, ' ');
  expect_json(post("/keys/batch_exists", at_limit), 200, R"({"exists":[]})");
}

TEST_F(ServerLimitsTest, ChunkedBodyOverTheLimitIs413) {
  RawConnection connection(server_.host(), server_.port());
  std::string request = "POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) request += "190\r\n" + std::string(400, ' ') + "\r\n";
  request += "0\r\n\r\n";
  connection.send(request);
  EXPECT_EQ(connection.read_response().status, 413);
}

TEST_F(ServerLimitsTest, HalfARequestTimesOutAndOthersAreStillServed) {
  RawConnection half(server_.host(), server_.port());
  half.send("POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"keys");
  RawConnection silent(server_.host(), server_.port());
  // While those two hang, the server answers a third connection.
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
  EXPECT_TRUE(half.peer_closed(std::chrono::seconds(10)));
  EXPECT_TRUE(silent.peer_closed(std::chrono::seconds(10)));
  expect_json(get("/healthz"), 200, R"({"status":"ok"})");
}

TEST_F(ServerLimitsTest, HeaderSentByteByByteStillTimesOut) {
  RawConnection drip(server_.host(), server_.port());
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  bool closed = false;
  // Dripping a byte every 100 ms does not keep a 300 ms idle timeout away: the connection is closed
  // while the drip goes on (3.3 s), not after its last byte, as it would be were the timeout
  // counted again from each byte.
  for (std::size_t i = 0; i < request.size() && !closed; ++i) {
    try {
      drip.send(request.substr(i, 1));
    } catch (const std::exception&) {
      closed = true;  // a send fails only once the server has closed the connection
      break;
    }
    closed = drip.peer_closed(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(closed) << "still open after the whole header was dripped";
}

TEST(ServerProcessTest, SigtermExitsZero) {
  ServerProcess server({"--threads", "2"});
  EXPECT_EQ(raw_request(server.host(), server.port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(server.terminate(), 0);
  EXPECT_FALSE(server.running());
}

TEST(ServerProcessTest, SigintExitsZero) {
  ServerProcess server({"--threads", "1"});
  EXPECT_EQ(server.signal_and_wait(SIGINT), 0);
}

TEST(ServerProcessTest, SigtermClosesIdleKeepAliveConnections) {
  ServerProcess server({"--threads", "2"});
  RawConnection idle(server.host(), server.port());
  EXPECT_EQ(idle.request("GET", "/healthz").status, 200);
  EXPECT_EQ(server.terminate(), 0);
  EXPECT_TRUE(idle.peer_closed(std::chrono::seconds(5)));
}

TEST(ServerProcessTest, SigtermFinishesTheRequestInFlight) {
  ServerProcess server({"--threads", "2", "--enable-fault-injection"});
  FaultRules faults(server);
  faults.add(R"({"delay_ms":2000,"times":1})");
  RawConnection connection(server.host(), server.port());
  connection.send(format_request("POST", "/keys/batch_exists", connection.host_header(), R"({"keys":["a"]})"));
  ASSERT_TRUE(faults.wait_until_armed(0));  // the server holds the request for 2 s
  ::kill(server.pid(), SIGTERM);
  EXPECT_FALSE(connection.has_input());  // not answered before the SIGTERM
  auto r = connection.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"exists":[false]})");
  EXPECT_THAT(r.header("connection"), Optional(std::string("close")));
  EXPECT_EQ(server.terminate(), 0);
}

TEST(ServerProcessTest, KillAndRestartOnTheSamePortForgetsEverything) {
  ServerProcess server({"--threads", "2"});
  const auto port = server.port();
  ASSERT_EQ(raw_request(server.host(), port, "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  server.kill();
  EXPECT_FALSE(server.running());
  EXPECT_THROW(raw_request(server.host(), port, "GET", "/healthz"), std::runtime_error);
  server.restart();
  EXPECT_EQ(server.port(), port);
  auto r = raw_request(server.host(), port, "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, R"({"detail":"Allocation failed: Rank 0 not initialized"})");
}

TEST(ServerProcessTest, BadArgumentsExitTwoWithoutListening) {
  auto r = ServerProcess::run_to_exit({"--port", "0", "--threads", "zero"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--threads: Value zero not in range 1 to 1024"));
  EXPECT_THAT(r.output, Not(HasSubstr("listening on")));
  r = ServerProcess::run_to_exit({"--port", "0", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--no-such-flag"));
  EXPECT_THAT(r.output, Not(HasSubstr("listening on")));
}

TEST(ServerProcessTest, PortInUseExitsTwoNamingTheAddress) {
  ServerProcess first({"--threads", "1"});
  const auto port = std::to_string(first.port());
  const auto r = ServerProcess::run_to_exit({"--host", "127.0.0.1", "--port", port, "--threads", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot listen on 127.0.0.1 port " + port + ": Address already in use"));
  EXPECT_THAT(r.output, Not(HasSubstr("listening on http")));
  EXPECT_EQ(raw_request(first.host(), first.port(), "GET", "/healthz").status, 200);  // the first one goes on
}

class ServerMetricsTest : public ServerTestBase {};

TEST_F(ServerMetricsTest, MetricsCountRequestsAndDescribeTheState) {
  initialize(3, 10);
  ASSERT_EQ(allocate(3, "a").status, 200);
  ASSERT_EQ(allocate(3, "b").status, 200);
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":3,"confirmations":[["a",0]],"pages_to_release":[0]})").status, 204);
  ASSERT_EQ(allocate(9, "c").status, 500);
  ASSERT_EQ(get("/nope").status, 404);

  auto r = get("/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.header("content-type"), Optional(std::string("text/plain; version=0.0.4; charset=utf-8")));
  EXPECT_THAT(r.body, HasSubstr("# TYPE hf3fs_meta_requests_total counter\n"));
  EXPECT_THAT(r.body, HasSubstr("# TYPE hf3fs_meta_request_duration_seconds histogram\n"));
  // Every family has its HELP line, right before its TYPE line.
  int families = 0;
  for (std::size_t at = r.body.find("# TYPE "); at != std::string::npos; at = r.body.find("# TYPE ", at + 1)) {
    const std::string name = r.body.substr(at + 7, r.body.find(' ', at + 7) - (at + 7));
    ASSERT_GE(at, 2u) << name << ": no HELP line before the first TYPE line";
    const std::size_t line = r.body.rfind('\n', at - 2) + 1;
    EXPECT_EQ(r.body.compare(line, 8 + name.size(), "# HELP " + name + " "), 0) << name;
    ++families;
  }
  EXPECT_GT(families, 20);
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="/keys/batch_allocate",status="200"})"), Optional(std::string("2")));
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="/keys/batch_allocate",status="500"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="/keys/confirm_write",status="204"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="/rank/{rank}/initialize",status="200"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_requests_total{route="not_found",status="404"})"), Optional(std::string("1")));
  // The releasing of page 0, mapped to "a", was refused.
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="3",state="free"})"), Optional(std::string("8")));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="3",state="allocated"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="3",state="mapped"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_rank_pages{namespace="default",rank="3",state="orphaned"})"), Optional(std::string("0")));
  EXPECT_THAT(metric(R"(hf3fs_meta_releases_kept_mapped_total{namespace="default",rank="3"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_keys{namespace="default"})"), Optional(std::string("1")));
  EXPECT_THAT(metric(R"(hf3fs_meta_ranks{namespace="default"})"), Optional(std::string("1")));
  EXPECT_THAT(metric("hf3fs_meta_request_id_cache_hits_total"), Optional(std::string("0")));
  // Every answered request so far is in the histogram (7 before this scrape, and the earlier scrapes).
  const auto scrape = get("/metrics").body;
  const std::string count_name = "\nhf3fs_meta_request_duration_seconds_count ";
  const auto at = scrape.find(count_name);
  ASSERT_NE(at, std::string::npos);
  const auto count = scrape.substr(at + count_name.size(), scrape.find('\n', at + 1) - at - count_name.size());
  EXPECT_GE(std::stoi(count), 7);
  EXPECT_THAT(scrape, HasSubstr("hf3fs_meta_request_duration_seconds_bucket{le=\"+Inf\"} " + count + "\n"));
}

TEST_F(ServerMetricsTest, HelpDescribesTheOptions) {
  // --help prints usage and exits 0 without listening.
  const auto ran = ServerProcess::run_to_exit({"--help"});
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_THAT(ran.output, HasSubstr("--threads"));
  EXPECT_THAT(ran.output, HasSubstr("0.0.0.0"));
  EXPECT_THAT(ran.output, HasSubstr("--idle-timeout-ms"));
  EXPECT_THAT(ran.output, HasSubstr("--eviction"));
  EXPECT_THAT(ran.output, HasSubstr("5000 with --eviction lru, else 0"));
  EXPECT_THAT(ran.output, HasSubstr("--allocation-ttl-ms"));
  EXPECT_THAT(ran.output, HasSubstr("--data-dir"));
  EXPECT_THAT(ran.output, HasSubstr("--fsync"));
  EXPECT_THAT(ran.output, HasSubstr("always|everysec|no"));
  EXPECT_THAT(ran.output, HasSubstr("--snapshot-after-bytes"));
  EXPECT_THAT(ran.output, HasSubstr("--verify-data-dir"));
}

TEST_F(ServerMetricsTest, VersionPrintsTheProjectVersionAndExitsZero) {
  // The project's version (CMakeLists.txt's project(), the same definition the server is built with),
  // alone on stdout, whatever other options come with it; nothing is listened on.
  static_assert(sizeof(HF3FS_META_VERSION) > 1, "the project version is passed to the test");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--version"},
                                               std::vector<std::string>{"--threads", "2", "--version"}}) {
    const auto ran = ServerProcess::run_to_exit(args);
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    EXPECT_EQ(ran.output, "hf3fs-meta-server " HF3FS_META_VERSION "\n");
  }
  EXPECT_THAT(ServerProcess::run_to_exit({"--help"}).output, HasSubstr("--version"));
}

TEST_F(ServerMetricsTest, EveryBadOptionExitsTwoWithoutListening) {
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"}, {"--port=99999"}, {"--port", "99999"}, {"--threads=0"}, {"--max-pages"}, {"--host="},
      {"--dedup-ttl-ms=0"}, {"--log-requests=maybe"}, {"stray"}, {"--eviction=mru"}, {"--eviction"},
      {"--read-lease-ms=-1"}, {"--allocation-ttl-ms=soon"}, {"--data-dir="}, {"--fsync=sometimes"}, {"--fsync"},
      {"--snapshot-after-bytes=-1"}, {"--verify-data-dir="}};
  for (const auto& args : bad) {
    const std::string shown = ::testing::PrintToString(args);
    const auto ran = ServerProcess::run_to_exit(args);
    EXPECT_EQ(ran.exit_code, 2) << shown << ": " << ran.output;
    EXPECT_THAT(ran.output, HasSubstr("hf3fs-meta-server: ")) << shown;
    EXPECT_THAT(ran.output, Not(HasSubstr("listening"))) << shown;
  }
}

}  // namespace
}  // namespace hf3fs_meta::testing
