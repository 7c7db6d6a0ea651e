// hf3fs-meta-proxy against the server it stands for: the same requests sent to a server directly and
// through the proxy to another server (both fresh, with the same flags) get the same status,
// content type and body, byte for byte; the proxy's own routes; a tenant's token and namespace
// applied upstream.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "contract/wire_rows.hpp"
#include "server/server_test_support.hpp"  // FaultRules
#include "support/proxy_process.hpp"
#include "support/raw_http.hpp"
#include "support/server_process.hpp"
#include "support/temp_file.hpp"
#include "support/test_certificate.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using ::testing::StartsWith;
using testing::ProxyProcess;
using testing::RawConnection;
using testing::RawResponse;
using testing::ServerProcess;
using Headers = std::vector<std::pair<std::string, std::string>>;

// The front's limits, the same on both sides.
const std::vector<std::string> kFrontLimits{"--max-body-bytes", "4096"};

// What a process wrote to the file at `path` so far (ProxyProcess's stderr_path).
std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

RawResponse send_to(const ProxyProcess& proxy, std::string_view method, std::string_view target,
                    std::string_view body = {}) {
  return testing::raw_request(proxy.host(), proxy.port(), method, target, body);
}

// Waits up to `timeout` for `text` to appear in the file at `path` (a child's stderr): true once it has.
bool wait_for_text(const std::string& path, std::string_view text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (file_text(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class ProxyWireTest : public ::testing::Test {
 protected:
  ServerProcess direct_{with({"--threads", "1"}, kFrontLimits)};
  ServerProcess upstream_{{"--threads", "1"}};
  // Operator routes allowed: their answers too are compared.
  ProxyProcess proxy_{upstream_.base_url(),
                      with({"--deadline-ms", "10000", "--threads", "2", "--allow-operator-routes"}, kFrontLimits)};

  // SIGTERM stops the proxy cleanly: exit 0 (under the sanitizers, also no leak and no error).
  void TearDown() override { EXPECT_EQ(proxy_.terminate(), 0); }

  RawResponse to_direct(std::string_view method, std::string_view target, std::string_view body,
                        const Headers& headers = {}) {
    return testing::raw_request(direct_.host(), direct_.port(), method, target, body, headers);
  }
  RawResponse to_proxy(std::string_view method, std::string_view target, std::string_view body,
                       const Headers& headers = {}) {
    return testing::raw_request(proxy_.host(), proxy_.port(), method, target, body, headers);
  }

  // Sends the request both ways; the answers must be the same. Returns the direct one.
  RawResponse both(std::string_view method, std::string_view target, std::string_view body = {}) {
    const RawResponse direct = to_direct(method, target, body);
    const RawResponse proxied = to_proxy(method, target, body);
    std::string request(method);
    request.append(" ").append(target).append(" ").append(body);
    EXPECT_EQ(proxied.status, direct.status) << request;
    EXPECT_EQ(proxied.header("content-type"), direct.header("content-type")) << request;
    EXPECT_EQ(proxied.body, direct.body) << request;
    return direct;
  }
  RawResponse post(std::string_view target, std::string_view body) { return both("POST", target, body); }

  // WireTest's set-up (wire_rows.hpp), from empty, both ways.
  void set_up_rows_state() {
    ASSERT_EQ(post("/clear", "").status, 204);
    ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":8})").status, 200);
    ASSERT_EQ(post("/rank/1/initialize", R"({"num_pages":8,"role":"worker"})").status, 200);
    ASSERT_EQ(post(kAllocate, R"({"rank":0,"keys":[["done",""],["pending",""]]})").status, 200);
    ASSERT_EQ(post(kAllocate, R"({"rank":1,"keys":[["done",""]]})").status, 200);
    ASSERT_EQ(post(kConfirm, R"({"rank":0,"confirmations":[["done",0]]})").status, 204);
    ASSERT_EQ(post(kConfirm, R"({"rank":1,"confirmations":[["done",0]],"pages_to_release":[]})").status, 204);
  }

  // What a client can see of the state afterwards, both ways (WireTest::expect_initial_state's reads).
  void compare_state() {
    both("GET", "/stats");
    post(kExists, R"({"keys":["done","pending","k","x","other"]})");
    post(kLocations, R"({"rank":0,"keys":["done","pending"]})");
    post(kLocations, R"({"rank":1,"keys":["done"]})");
    post(kAllocate, R"({"rank":0,"keys":[["probe",""]]})");
    post(kAllocate, R"({"rank":1,"keys":[["probe",""]]})");
    post(kConfirm, R"({"rank":0,"confirmations":[["pending",1]]})");
  }
};

// Every row of contract_wire_test's tables (docs/protocol.md's defects and deviations): the same
// answer through the proxy, and the same state after it.
TEST_F(ProxyWireTest, EveryWireRowAnswersAsTheServerDoes) {
  for (const std::span<const Row> table : {std::span<const Row>(kDefectRows), std::span<const Row>(kDeviationRows)}) {
    for (const Row& row : table) {
      SCOPED_TRACE(row.name);
      set_up_rows_state();
      const RawResponse direct = post(row.target, row.body);
      EXPECT_EQ(direct.status, row.status);  // the table's answer, so that the comparison means something
      compare_state();
    }
  }
}

TEST_F(ProxyWireTest, WorkerSequencesAnswerAsTheServerDoes) {
  // A scheduler and two workers, an allocate that runs out of pages, a released page, deletes,
  // drops and the extensions' reads.
  post("/rank/0/initialize", R"({"num_pages":2,"role":"scheduler"})");
  post("/rank/0/initialize", R"({"num_pages":3})");
  post("/rank/1/initialize", R"({"num_pages":3})");
  post("/rank/1/initialize", R"({"num_pages":5})");  // another num_pages: the rank is kept
  post(kAllocate, R"({"rank":0,"keys":[["a",""],["b","a"],["c","b"],["d","c"]]})");
  post(kConfirm, R"({"rank":0,"confirmations":[["a",0],["b",1]],"pages_to_release":[2]})");
  post(kAllocate, R"({"rank":1,"keys":[["a",""],["b","a"]]})");
  post(kConfirm, R"({"rank":1,"confirmations":[["a",0],["b",1]]})");
  post(kExists, R"({"keys":["a","b","c","\u00e9"]})");
  post(kLocations, R"({"rank":1,"keys":["b","a","zz"]})");
  post("/keys/status", R"({"keys":["a","c","nope"]})");
  post("/keys/delete", R"({"keys":["a","zz"]})");
  post("/keys/status", R"({"keys":["a","b"]})");
  post(kAllocate, R"({"rank":0,"keys":[["",""]]})");  // an empty key: the SDK refuses it, the server not
  post(kAllocate, R"({"rank":0,"keys":[]})");
  post(kConfirm, R"({"rank":7})");
  post(kConfirm, R"({"rank":0,"confirmations":[["b",0]],"pages_to_release":[0]})");
  post(kLocations, R"({"rank":9,"keys":["b"]})");  // 500: a rank never initialized
  post("/rank/1/drop", "");
  post("/rank/x/drop", "");
  both("GET", "/namespaces");
  post("/namespaces/default/drop", "");
  post("/namespaces/not%20a%20name/drop", "");
  post("/namespaces/m1/drop", "");
  both("GET", "/stats");
  post("/clear", "ignored");
  both("GET", "/stats");
}

// A /clear through the proxy clears its memory of the ranks initialized through it, and a drop that
// rank: a rank not initialized again gets the server's "not initialized", as from vLLM's server,
// instead of the proxy's re-initialization and an empty answer.
TEST_F(ProxyWireTest, ClearAndDropThroughTheProxyAnswerAsTheServerDoes) {
  post("/rank/0/initialize", R"({"num_pages":4})");
  post("/rank/1/initialize", R"({"num_pages":4})");
  post(kAllocate, R"({"rank":0,"keys":[["a",""]]})");
  post(kConfirm, R"({"rank":0,"confirmations":[["a",0]]})");
  post("/clear", "");
  const RawResponse cleared = post(kLocations, R"({"rank":0,"keys":["a"]})");
  EXPECT_EQ(cleared.status, 500);
  EXPECT_THAT(cleared.body, HasSubstr("Rank 0 not initialized"));
  post(kAllocate, R"({"rank":1,"keys":[["b",""]]})");
  post(kConfirm, R"({"rank":1,"confirmations":[["b",0]]})");
  both("GET", "/stats");
  // Initialized again, then dropped: that rank is forgotten, the other one not.
  post("/rank/0/initialize", R"({"num_pages":4})");
  post("/rank/1/initialize", R"({"num_pages":4})");
  post(kAllocate, R"({"rank":0,"keys":[["c",""]]})");
  post("/rank/0/drop", "");
  const RawResponse dropped = post(kAllocate, R"({"rank":0,"keys":[["d",""]]})");
  EXPECT_EQ(dropped.status, 500);
  EXPECT_THAT(dropped.body, HasSubstr("Rank 0 not initialized"));
  post(kLocations, R"({"rank":0,"keys":["c"]})");
  post(kAllocate, R"({"rank":1,"keys":[["e",""]]})");
  both("GET", "/stats");
}

TEST_F(ProxyWireTest, RoutingAndFramingAnswerAsTheServerDoes) {
  both("GET", kAllocate);                    // 405
  both("DELETE", "/stats");                  // 405
  both("HEAD", "/stats");                    // 405, no body
  both("GET", "/nowhere");                   // 404
  both("POST", "/keys/batch_allocate/x", "{}");
  both("POST", "/rank//initialize", "{}");
  both("POST", "/rank/%31/initialize", R"({"num_pages":4})");  // percent-decoded: rank 1
  both("POST", "/rank/1_0/initialize", R"({"num_pages":4})");
  // A trailing slash: 307 to the same path on the same host (each side's own).
  const RawResponse direct = to_direct("POST", "/keys/batch_exists/?q=1", "{}");
  const RawResponse proxied = to_proxy("POST", "/keys/batch_exists/?q=1", "{}");
  EXPECT_EQ(direct.status, 307);
  EXPECT_EQ(proxied.status, 307);
  EXPECT_EQ(proxied.header("location"),
            "http://127.0.0.1:" + std::to_string(proxy_.port()) + "/keys/batch_exists?q=1");
  EXPECT_EQ(direct.header("location"),
            "http://127.0.0.1:" + std::to_string(direct_.port()) + "/keys/batch_exists?q=1");
  // A body over --max-body-bytes: 413 from the front on both sides.
  post(kExists, R"({"keys":[")" + std::string(5000, 'k') + R"("]})");
  // Not HTTP at all: the front's 400.
  for (const std::uint16_t port : {direct_.port(), proxy_.port()}) {
    RawConnection connection("127.0.0.1", port);
    connection.send("NOT HTTP\r\n\r\n");
    const RawResponse r = connection.read_response();
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.body, "Invalid HTTP request received.");
  }
}

TEST_F(ProxyWireTest, TheProxysOwnRoutes) {
  const RawResponse health = to_proxy("GET", "/healthz", {});
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");
  EXPECT_EQ(to_proxy("POST", "/healthz", {}).status, 405);
  ASSERT_EQ(to_proxy("POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(to_proxy("POST", kAllocate, R"({"rank":0,"keys":[["x"]]})").status, 400);  // local: not a pair
  ASSERT_EQ(to_proxy("POST", kAllocate, R"({"rank":3,"keys":[["x",""]]})").status, 500);   // upstream's answer
  const RawResponse metrics = to_proxy("GET", "/metrics", {});
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.header("content-type"), Optional(StartsWith("text/plain")));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_proxy_forwarded_total{outcome=\"ok\",route=\"/rank/{rank}/initialize\"} 1\n"));
  EXPECT_THAT(metrics.body,
              HasSubstr("hf3fs_meta_proxy_forwarded_total{outcome=\"answered\",route=\"/keys/batch_allocate\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_proxy_upstream_duration_seconds_count 2\n"));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_proxy_reinitializations_total 0\n"));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_requests_total{route=\"/healthz\",status=\"200\"} 1\n"));
  // A namespace header other than the proxy's own (none here) is refused, naming the header.
  const RawResponse named = to_proxy("POST", kExists, R"({"keys":["x"]})", {{"X-Hf3fs-Namespace", "m1"}});
  EXPECT_EQ(named.status, 400);
  EXPECT_THAT(named.body, HasSubstr("X-Hf3fs-Namespace: hf3fs-meta-proxy acts in the namespace of its --namespace"));

  // The upstream forgets its state: the rank the proxy initialized is initialized again, and the
  // call repeated, so vLLM never sees "not initialized".
  upstream_.restart();
  const RawResponse after = to_proxy("POST", kAllocate, R"({"rank":0,"keys":[["y",""]]})");
  EXPECT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(after.body, R"({"rank":0,"results":[["y",0]]})");
  EXPECT_THAT(to_proxy("GET", "/metrics", {}).body, HasSubstr("hf3fs_meta_proxy_reinitializations_total 1\n"));

  // The upstream gone: /healthz says so.
  upstream_.kill();
  const RawResponse down = to_proxy("GET", "/healthz", {});
  EXPECT_EQ(down.status, 503);
  EXPECT_THAT(down.body, StartsWith(R"({"status":"unavailable","detail":"no upstream leader answered: )"));
}

// --tenants-file upstream: a proxy with a tenant's token acts in its namespace there; one whose
// --namespace is another tenant's gets the server's 403, and reaches nothing of it.
TEST(ProxyTenantTest, TheTokenAndNamespaceApplyUpstream) {
  testing::TempFile tenants("tok-a model-a\ntok-b model-b\ntok-ops *\n");
  testing::TempFile token_a("tok-a\n");
  ServerProcess server({"--threads", "1", "--tenants-file", tenants.path()});
  ProxyProcess own(server.base_url(), {"--token-file", token_a.path(), "--namespace", "model-a"});
  ProxyProcess other(server.base_url(), {"--token-file", token_a.path(), "--namespace", "model-b"});
  ProxyProcess no_token(server.base_url(), {"--namespace", "model-a"});

  const auto send = [](const ProxyProcess& proxy, std::string_view target, std::string_view body) {
    return testing::raw_request(proxy.host(), proxy.port(), "POST", target, body);
  };
  ASSERT_EQ(send(own, "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(send(own, kAllocate, R"({"rank":0,"keys":[["k",""]]})").body, R"({"rank":0,"results":[["k",0]]})");
  ASSERT_EQ(send(own, kConfirm, R"({"rank":0,"confirmations":[["k",0]]})").status, 204);
  EXPECT_EQ(send(own, kExists, R"({"keys":["k"]})").body, R"({"exists":[true]})");

  const RawResponse refused = send(other, kExists, R"({"keys":["k"]})");
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.body, R"({"detail":"X-Hf3fs-Namespace model-b: not permitted for this token"})");
  EXPECT_EQ(send(other, "/rank/0/initialize", R"({"num_pages":4})").status, 403);
  EXPECT_EQ(send(no_token, kExists, R"({"keys":["k"]})").status, 401);

  // The key is in model-a only: model-b (its tenant's own token) and the default namespace (an
  // operator's) do not have it.
  const auto exists_as = [&](const char* token, const char* ns) {
    Headers headers{{"Authorization", std::string("Bearer ") + token}};
    if (ns) headers.emplace_back("X-Hf3fs-Namespace", ns);
    return testing::raw_request(server.host(), server.port(), "POST", kExists, R"({"keys":["k"]})", headers).body;
  };
  EXPECT_EQ(exists_as("tok-a", nullptr), R"({"exists":[true]})");
  EXPECT_EQ(exists_as("tok-b", nullptr), R"({"exists":[false]})");
  EXPECT_EQ(exists_as("tok-ops", nullptr), R"({"exists":[false]})");
  for (ProxyProcess* proxy : {&own, &other, &no_token}) EXPECT_EQ(proxy->terminate(), 0);
}

// A proxy acts in its namespace only: the operator routes (kRoutes' and kServerRoutes' operator_only)
// get its own 403 whatever its token, and reach nothing upstream, unless --allow-operator-routes
// (the protocol's); an operator's token is warned about at start, a tenant's not.
TEST(ProxyOperatorRoutesTest, OperatorRoutesAreRefusedUnlessAllowed) {
  testing::TempFile tenants("tok-a model-a\ntok-b model-b\ntok-ops *\n");
  testing::TempFile token_ops("tok-ops\n");
  testing::TempFile token_a("tok-a\n");
  testing::TempFile ops_log("");
  testing::TempFile tenant_log("");
  ServerProcess server({"--threads", "1", "--tenants-file", tenants.path(), "--enable-fault-injection"});
  const auto as_b = [&](std::string_view target, std::string_view body) {
    return testing::raw_request(server.host(), server.port(), "POST", target, body,
                                {{"Authorization", "Bearer tok-b"}});
  };
  ASSERT_EQ(as_b("/rank/0/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(as_b(kAllocate, R"({"rank":0,"keys":[["kb",""]]})").status, 200);
  ASSERT_EQ(as_b(kConfirm, R"({"rank":0,"confirmations":[["kb",0]]})").status, 204);

  ProxyProcess confined(server.base_url(), {"--token-file", token_ops.path(), "--namespace", "model-a"},
                        ops_log.path());
  EXPECT_THAT(file_text(ops_log.path()),
              HasSubstr("hf3fs-meta-proxy: warning: the upstream takes --token-file's token as an operator's"));
  const RawResponse listing = send_to(confined, "GET", "/namespaces");
  EXPECT_EQ(listing.status, 403);
  EXPECT_EQ(listing.body,
            R"({"detail":"hf3fs-meta-proxy: /namespaces is an operator's route, beyond the namespace this proxy acts )"
            R"(in (model-a): start it with --allow-operator-routes to forward it"})");
  const RawResponse drop = send_to(confined, "POST", "/namespaces/model-b/drop");
  EXPECT_EQ(drop.status, 403);
  EXPECT_THAT(drop.body, HasSubstr("/namespaces/{name}/drop is an operator's route"));
  const RawResponse faults = send_to(confined, "POST", "/_faults", R"({"status":500})");
  EXPECT_EQ(faults.status, 403);
  EXPECT_THAT(faults.body, HasSubstr("/_faults is an operator's route, beyond the namespace this proxy acts in "
                                     "(model-a): it is the server's own and never forwarded"));
  // The proxy's /metrics is its own, not the upstream's.
  const RawResponse metrics = send_to(confined, "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_proxy_retries_total 0\n"));
  // Nothing of it reached the upstream: model-b keeps its key, no fault rule fails the next call.
  EXPECT_EQ(as_b(kExists, R"({"keys":["kb"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(send_to(confined, "POST", kExists, R"({"keys":["kb"]})").body, R"({"exists":[false]})");

  // A tenant's token: no warning (the ready line, written after the check, is there).
  ProxyProcess tenant(server.base_url(), {"--token-file", token_a.path(), "--namespace", "model-a"},
                      tenant_log.path());
  const std::string tenant_said = file_text(tenant_log.path());
  EXPECT_THAT(tenant_said, HasSubstr("hf3fs-meta-proxy: ready"));
  EXPECT_THAT(tenant_said, Not(HasSubstr("warning")));

  // Allowed: forwarded, as the operator the token is.
  ProxyProcess allowed(server.base_url(),
                       {"--token-file", token_ops.path(), "--namespace", "model-a", "--allow-operator-routes"});
  const RawResponse all = send_to(allowed, "GET", "/namespaces");
  EXPECT_EQ(all.status, 200);
  EXPECT_THAT(all.body, HasSubstr(R"("model-b")"));
  EXPECT_EQ(send_to(allowed, "POST", "/namespaces/model-b/drop").status, 200);
  EXPECT_EQ(as_b(kExists, R"({"keys":["kb"]})").body, R"({"exists":[false]})");
  for (ProxyProcess* proxy : {&confined, &tenant, &allowed}) EXPECT_EQ(proxy->terminate(), 0);
}

// The proxy's 503 says what happened: the upstream's last status and detail when it answered, what
// ended the call when nothing answered before the deadline, "within N ms" only when the deadline
// passed; and the attempts each time.
TEST(ProxyUnavailableTest, The503SaysWhatHappened) {
  ServerProcess server({"--threads", "1", "--enable-fault-injection"});
  ProxyProcess proxy(server.base_url(), {"--deadline-ms", "3000"});
  testing::FaultRules faults(server);

  // The upstream answers 503 to every attempt, each at once.
  faults.add(R"({"path":"/keys/batch_exists","status":503,"detail":"busy","times":1000})");
  const RawResponse answered = send_to(proxy, "POST", kExists, R"({"keys":["k"]})");
  EXPECT_EQ(answered.status, 503);
  EXPECT_THAT(answered.body, HasSubstr(R"({"detail":"hf3fs-meta-proxy: the upstream answered 503 \"busy\" to )"
                                       R"(the last of )"));
  EXPECT_THAT(answered.body, HasSubstr(" attempts, "));
  EXPECT_THAT(answered.body, HasSubstr(" ms into a deadline of 3000 ms: the metadata server is unavailable"));
  EXPECT_THAT(answered.body, Not(HasSubstr("no answer")));
  EXPECT_EQ(testing::raw_request(server.host(), server.port(), "DELETE", "/_faults").status, 200);

  // The connection closed with the request sent: a delete is not repeated, and the proxy says so at
  // once, not as a deadline.
  faults.add(R"({"path":"/keys/delete","close_connection":"before","times":1})");
  const RawResponse closed = send_to(proxy, "POST", "/keys/delete", R"({"keys":["k"]})");
  EXPECT_EQ(closed.status, 503);
  EXPECT_THAT(closed.body, HasSubstr(R"({"detail":"hf3fs-meta-proxy: no answer from the upstream ()"));
  EXPECT_THAT(closed.body, HasSubstr(") to the last of 1 attempt, "));
  EXPECT_THAT(closed.body, HasSubstr("not safe to repeat delete_keys"));
  EXPECT_THAT(closed.body, Not(HasSubstr("within")));

  // Held upstream past the deadline: no answer within it.
  ProxyProcess hurried(server.base_url(), {"--deadline-ms", "1000"});
  faults.add(R"({"path":"/keys/batch_exists","delay_ms":3000,"times":1})");
  const RawResponse late = send_to(hurried, "POST", kExists, R"({"keys":["k"]})");
  EXPECT_EQ(late.status, 503);
  EXPECT_THAT(late.body, HasSubstr(R"({"detail":"hf3fs-meta-proxy: no answer from the upstream within 1000 ms (1 )"
                                   R"(attempt), )"));
  for (ProxyProcess* p : {&proxy, &hurried}) EXPECT_EQ(p->terminate(), 0);
}

// A call held upstream holds no other connection's calls: those behind it, each on a new connection,
// are answered while it waits, though the proxy has one I/O thread: its calls do not block it.
TEST(ProxyConcurrencyTest, ACallHeldUpstreamDoesNotHoldTheOthers) {
  ServerProcess server({"--threads", "2", "--enable-fault-injection"});
  ProxyProcess proxy(server.base_url(), {"--threads", "1"});
  const auto send = [&](std::string_view target, std::string_view body) {
    return testing::raw_request(proxy.host(), proxy.port(), "POST", target, body);
  };
  ASSERT_EQ(send("/rank/0/initialize", R"({"num_pages":4})").status, 200);
  testing::FaultRules faults(server);
  faults.add(R"({"path":"/keys/batch_allocate","delay_ms":3000,"times":1})");
  RawConnection slow(proxy.host(), proxy.port());
  slow.send(testing::format_request("POST", kAllocate, slow.host_header(), R"({"rank":0,"keys":[["k1",""]]})"));
  // The rule is used up: the upstream holds the slow call for 3 s.
  ASSERT_TRUE(faults.wait_until_armed(0));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(send(kExists, R"({"keys":["k1"]})").body, R"({"exists":[false]})");
  EXPECT_FALSE(slow.has_input());
  const RawResponse r = slow.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"rank":0,"results":[["k1",0]]})");
  EXPECT_EQ(proxy.terminate(), 0);  // under TSan, also: no data race between the front and the client
}

// An https:// upstream: the proxy's calls speak TLS (libcurl's multi transport; the asio one serves
// plain http://), checking the server's certificate against --ca-file.
TEST(ProxyTlsTest, AnHttpsUpstreamIsReachedOverTlsWithTheCaFile) {
  testing::TestCertificate cert;
  testing::TestCertificate other;  // a CA that did not sign the server's certificate
  ServerProcess server({"--threads", "1", "--tls-cert", cert.cert_path(), "--tls-key", cert.key_path()});
  ASSERT_THAT(server.base_url(), StartsWith("https://"));
  ProxyProcess proxy(server.base_url(), {"--ca-file", cert.cert_path(), "--deadline-ms", "5000"});
  const auto send = [](ProxyProcess& p, std::string_view target, std::string_view body) {
    return testing::raw_request(p.host(), p.port(), "POST", target, body);
  };
  EXPECT_EQ(send(proxy, "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  EXPECT_EQ(send(proxy, kAllocate, R"({"rank":0,"keys":[["k1",""]]})").body, R"({"rank":0,"results":[["k1",0]]})");
  EXPECT_EQ(send(proxy, kExists, R"({"keys":["k1"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(proxy.terminate(), 0);

  // A certificate the CA file does not vouch for: nothing reaches the server, vLLM gets the 503.
  ProxyProcess wrong(server.base_url(), {"--ca-file", other.cert_path(), "--deadline-ms", "1000"});
  const auto refused = send(wrong, kExists, R"({"keys":["k1"]})");
  EXPECT_EQ(refused.status, 503);
  EXPECT_THAT(refused.body, HasSubstr("certificate"));
  EXPECT_EQ(wrong.terminate(), 0);
}

// vLLM's bare releases go upstream keyed where the proxy saw the allocate that gave the page to a key
// (to a server that advertises X-Hf3fs-Keyed-Release, as the reference server does): a late bare
// release of a page another writer now holds changes nothing.
TEST(ProxyKeyedReleaseTest, ALateBareReleaseLeavesAnotherWritersPage) {
  ServerProcess server({"--threads", "1", "--enable-fault-injection"});
  ProxyProcess proxy(server.base_url());
  const auto direct = [&](std::string_view target, std::string_view body) {
    return testing::raw_request(server.host(), server.port(), "POST", target, body);
  };
  ASSERT_EQ(send_to(proxy, "POST", "/rank/0/initialize", R"({"num_pages":1})").status, 200);
  ASSERT_EQ(send_to(proxy, "POST", kAllocate, R"({"rank":0,"keys":[["mine",""]]})").body,
            R"({"rank":0,"results":[["mine",0]]})");
  // The upstream forgets everything (as vLLM's server does in a restart), and another writer is given
  // page 0 for its key.
  testing::FaultRules(server).add(R"({"forget_state":true})");
  ASSERT_EQ(direct("/rank/0/initialize", R"({"num_pages":1})").status, 200);
  ASSERT_EQ(direct(kAllocate, R"({"rank":0,"keys":[["theirs",""]]})").body, R"({"rank":0,"results":[["theirs",0]]})");
  // vLLM releases the page it was given, bare, late: sent as ["mine",0], it frees nothing.
  EXPECT_EQ(send_to(proxy, "POST", kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":[0]})").status, 204);
  EXPECT_EQ(direct(kConfirm, R"({"rank":0,"confirmations":[["theirs",0]]})").status, 204);
  EXPECT_EQ(direct(kExists, R"({"keys":["theirs"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(proxy.terminate(), 0);
}

// SIGHUP, which operators send to reload, is logged and ignored: the proxy goes on answering, and
// SIGTERM still stops it cleanly.
TEST(ProxySignalTest, SighupIsLoggedAndIgnored) {
  ServerProcess server({"--threads", "1"});
  testing::TempFile log("");
  ProxyProcess proxy(server.base_url(), {}, log.path());
  ASSERT_EQ(::kill(proxy.pid(), SIGHUP), 0);
  EXPECT_TRUE(wait_for_text(log.path(), "hf3fs-meta-proxy: SIGHUP ignored", std::chrono::seconds(10)))
      << file_text(log.path());
  EXPECT_EQ(send_to(proxy, "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  EXPECT_EQ(proxy.terminate(), 0);
  EXPECT_THAT(file_text(log.path()), HasSubstr("hf3fs-meta-proxy: stopped (SIGTERM)"));
}

TEST(ProxyFailoverTest, AnEndpointThatAcceptsNothingIsPassedOver) {
  std::string gone;
  {
    ServerProcess stopped({"--threads", "1"});
    gone = stopped.base_url();
  }  // stopped: its port accepts nothing now
  ServerProcess server({"--threads", "1"});
  ProxyProcess proxy(gone + "," + server.base_url(), {"--threads", "2"});
  const RawResponse r = testing::raw_request(proxy.host(), proxy.port(), "POST", "/rank/0/initialize",
                                             R"({"num_pages":4})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"message":"Rank 0 initialized with 4 pages"})");
  const std::string metrics = testing::raw_request(proxy.host(), proxy.port(), "GET", "/metrics").body;
  EXPECT_THAT(metrics, HasSubstr("hf3fs_meta_proxy_failovers_total 1\n"));
  EXPECT_THAT(metrics, HasSubstr("hf3fs_meta_proxy_retries_total 1\n"));
  EXPECT_EQ(proxy.terminate(), 0);
}

// A batch_exists body of `keys` 64-character keys (67 bytes of body a key).
std::string exists_body(std::size_t keys) {
  std::string body = R"({"keys":[)";
  for (std::size_t i = 0; i < keys; ++i) {
    if (i) body += ',';
    std::string key = std::to_string(i);
    body.append("\"").append(64 - key.size(), 'k').append(key).append("\"");
  }
  return body + "]}";
}

// The value of the family `name` (a single sample, no labels) in a /metrics text; -1 when absent.
double metric_value(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

// --max-inflight-body-bytes bounds what the proxy holds for the requests in flight, the copies it
// makes of them counted (decoded, re-encoded upstream, the answer's): a body that fits beside
// another connection's half-sent body when counted raw, but not with its copies, gets the front's
// 503 and nothing goes upstream; alone, it is answered; one that could never fit with its copies
// gets 413. What each took is given back once it is answered.
TEST(ProxyMemoryTest, TheBodyBudgetCountsTheProxysCopies) {
  constexpr std::size_t kLimit = 1'000'000;
  ServerProcess server({"--threads", "1"});
  ProxyProcess proxy(server.base_url(), {"--threads", "1", "--max-inflight-body-bytes", std::to_string(kLimit)});
  const auto proxy_metrics = [&] { return send_to(proxy, "GET", "/metrics").body; };
  const auto in_flight = [&] { return metric_value(proxy_metrics(), "hf3fs_meta_body_bytes_in_flight"); };
  // Waits (bounded) until the proxy holds `pred`'s bytes of the budget.
  const auto wait_in_flight = [&](auto pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred(in_flight()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred(in_flight());
  };
  const std::string body = exists_body(1500);  // 100.5 kB; about 500 kB with its copies

  const RawResponse alone = send_to(proxy, "POST", kExists, body);
  EXPECT_EQ(alone.status, 200);
  EXPECT_THAT(alone.body, StartsWith(R"({"exists":[false,)"));
  ASSERT_TRUE(wait_in_flight([](double v) { return v == 0; }));

  // Another connection has sent 600 kB of a 700 kB body: counted raw, the body would fit beside it
  // (700 kB of 1 MB); with its copies it does not.
  auto holder = std::make_unique<RawConnection>(proxy.host(), proxy.port());
  const std::string half = exists_body(9000).substr(0, 600'000);
  holder->send("POST /keys/batch_exists HTTP/1.1\r\nHost: x\r\nContent-Length: 700000\r\n\r\n" + half);
  ASSERT_TRUE(wait_in_flight([](double v) { return v >= 600'000; }));
  const RawResponse busy = send_to(proxy, "POST", kExists, body);
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.header("retry-after"), "1");
  EXPECT_EQ(busy.body, R"({"detail":"Server busy: request bodies in flight are at their limit of 1000000 bytes; )"
                       R"(nothing was applied, retry later"})");
  const std::string metrics = proxy_metrics();
  EXPECT_EQ(metric_value(metrics, "hf3fs_meta_body_budget_refused_total"), 1);
  EXPECT_THAT(metrics, HasSubstr(R"(hf3fs_meta_proxy_forwarded_total{outcome="busy",route="/keys/batch_exists"} 1)"));
  // Nothing of it went upstream: the server answered the first body only.
  EXPECT_THAT(testing::raw_request(server.host(), server.port(), "GET", "/metrics").body,
              HasSubstr(R"(hf3fs_meta_requests_total{route="/keys/batch_exists",status="200"} 1)" "\n"));
  EXPECT_TRUE(wait_in_flight([](double v) { return v == 600'000; }));  // the refused one's share given back

  holder.reset();  // closed half-way: its share given back
  ASSERT_TRUE(wait_in_flight([](double v) { return v == 0; }));
  EXPECT_EQ(send_to(proxy, "POST", kExists, body).status, 200);

  // 268 kB fits the budget raw, but never with its copies (about 1.3 MB): 413, not a 503 to repeat.
  const RawResponse never = send_to(proxy, "POST", kExists, exists_body(4000));
  EXPECT_EQ(never.status, 413);
  EXPECT_THAT(never.body, HasSubstr("over --max-inflight-body-bytes 1000000"));
  EXPECT_TRUE(wait_in_flight([](double v) { return v == 0; }));
  EXPECT_EQ(proxy.terminate(), 0);
}

TEST(ProxyFlagsTest, BadFlagsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{}, "--upstream is required"},
      {{"--upstream", "ftp://x"}, "--upstream: 'ftp://x' is not an http:// or https:// URL"},
      {{"--upstream", "http://a,"}, "--upstream[1]: empty"},
      {{"--upstream", "http://a", "--listen", "18000"}, "--listen: expected HOST:PORT"},
      {{"--upstream", "http://a", "--listen", "h:70000"}, "--listen: the port must be 0 to 65535"},
      {{"--upstream", "http://a", "--namespace", "a b"}, "--namespace: has byte 0x20 at offset 1"},
      {{"--upstream", "http://a", "--token-file", "/nonexistent/token"}, "--token-file"},
      {{"--upstream", "http://a", "--deadline-ms", "0"}, "--deadline-ms"},
      {{"--upstream", "http://a", "--threads", "0"}, "--threads"},
      {{"--upstream", "http://a", "--max-body-bytes", "0"}, "--max-body-bytes"},
      {{"--upstream", "http://a", "--bogus"}, "--bogus"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{ProxyProcess::binary_path()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto finished = ServerProcess::run_binary_to_exit(args);
    EXPECT_EQ(finished.exit_code, 2) << c.says;
    EXPECT_THAT(finished.output, HasSubstr(c.says));
  }
  const auto help = ServerProcess::run_binary_to_exit({ProxyProcess::binary_path(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--listen", "--upstream", "--namespace", "--token-file", "--ca-file", "--deadline-ms",
                           "--threads", "--allow-operator-routes", "--max-body-bytes", "--max-inflight-body-bytes",
                           "--max-connections", "--idle-timeout-ms"}) {
    EXPECT_THAT(help.output, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace hf3fs_meta::contract
