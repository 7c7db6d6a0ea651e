// --tenants-file on the real server: every route but /healthz needs a token of the file;
// a tenant is held to its namespace (403 naming another, the same whether it exists or not) and off
// the operator's routes; operators (`*` and --auth-token-file's token) act in any namespace; SIGHUP
// reads the file again, and a file that does not parse keeps the tokens in use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "server/server_test_support.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;

void rewrite(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.flush()) << path;
}

std::string detail(std::string_view text) { return R"({"detail":")" + std::string(text) + R"("})"; }


class ServerTenantsTest : public ::testing::Test {
 protected:
  ServerTenantsTest()
      : server_({"--threads", "2", "--enable-fault-injection", "--auth-token-file", boss_.path(), "--tenants-file",
                 tenants_.path()},
                log_.path()) {}
  void TearDown() override { EXPECT_EQ(server_.terminate(), 0); }

  RawResponse as(std::string_view token, std::string_view method, std::string_view target, std::string_view body = {},
                 Headers headers = {}) {
    if (!token.empty()) headers.emplace_back("Authorization", "Bearer " + std::string(token));
    return raw_request(server_.host(), server_.port(), method, target, body, headers);
  }
  RawResponse in(std::string_view token, std::string_view ns, std::string_view method, std::string_view target,
                 std::string_view body = {}) {
    return as(token, method, target, body, {{"X-Hf3fs-Namespace", std::string(ns)}});
  }

  bool wait_for_log(std::string_view line) { return testing::wait_for_log(log_.path(), line); }

  TempFile boss_{"tok-boss\n"};
  TempFile tenants_{"# the cluster's tenants\ntok-a model-a\ntok-b model-b\ntok-op *\n"};
  TempFile log_{""};
  ServerProcess server_;
};

TEST_F(ServerTenantsTest, TheReadyLineCountsTheTokens) {
  // tok-a, tok-b, tok-op and --auth-token-file's tok-boss.
  EXPECT_TRUE(wait_for_log("hf3fs-meta-server: ready (")) << read_all(log_.path());
  EXPECT_THAT(read_all(log_.path()), HasSubstr(", tenants 4"));
  EXPECT_THAT(read_all(log_.path()), ::testing::Not(HasSubstr("bearer token required")));
}

TEST_F(ServerTenantsTest, NoOrAnUnknownTokenIs401) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"", "Not authenticated"},
      {"tok-c", "Invalid authentication credentials"},
      {"tok-a2", "Invalid authentication credentials"}};
  for (const auto& [token, text] : refused) {
    SCOPED_TRACE(token);
    const auto r = as(token, "POST", "/keys/batch_exists", R"({"keys":["k"]})");
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.body, detail(text));
    EXPECT_EQ(r.header("www-authenticate"), "Bearer");
    EXPECT_EQ(as(token, "GET", "/metrics").status, 401);
  }
  const auto health = as("", "GET", "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");
  EXPECT_EQ(in("tok-c", "a/b", "GET", "/healthz").status, 200);
}

TEST_F(ServerTenantsTest, ATenantIsServedAndHeldToItsNamespace) {
  auto r = as("tok-a", "POST", "/rank/0/initialize", R"({"num_pages":4})");
  EXPECT_EQ(r.status, 200) << r.body;
  r = in("tok-a", "model-a", "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})");
  EXPECT_EQ(r.status, 200) << r.body;
  // Another tenant's namespace (initialized above by tok-b) and one that no one has: the same 403.
  ASSERT_EQ(as("tok-b", "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  for (const std::string other : {"model-b", "nobody-has-it"}) {
    r = in("tok-a", other, "POST", "/keys/batch_exists", R"({"keys":["k"]})");
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("X-Hf3fs-Namespace " + other + ": not permitted for this token"));
  }
  // A bad header is 400, and not echoed.
  r = in("tok-a", "a\xC3\xA9", "POST", "/keys/batch_exists", R"({"keys":["k"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, detail("X-Hf3fs-Namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"));
  // The operator's routes.
  r = as("tok-a", "GET", "/metrics");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body, detail("/metrics needs an operator token"));
  EXPECT_EQ(as("tok-a", "POST", "/_faults", R"({"status":500})").status, 403);
  EXPECT_EQ(as("tok-a", "GET", "/namespaces").status, 403);
  EXPECT_EQ(as("tok-a", "POST", "/namespaces/model-b/drop").status, 403);
  // None of it reached the server's state or rules: the tenant's request still succeeds, and the
  // operator sees the refusals counted.
  EXPECT_EQ(as("tok-a", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
  const auto metrics = as("tok-op", "GET", "/metrics").body;
  EXPECT_THAT(metrics, HasSubstr("hf3fs_meta_requests_total{route=\"/metrics\",status=\"403\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("hf3fs_meta_requests_total{route=\"/_faults\",status=\"403\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("hf3fs_meta_requests_total{route=\"/keys/batch_exists\",status=\"403\"} 2\n"));
}

// Two tenants save the same key on the same rank, each without naming a namespace: each acts in its
// own, sees only its own page and completes its key with its own ranks; an operator reads each by
// the header, and the default namespace holds nothing of theirs.
TEST_F(ServerTenantsTest, TenantsWithoutTheHeaderActInTheirOwnNamespaces) {
  ASSERT_EQ(as("tok-a", "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(as("tok-a", "POST", "/rank/1/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(as("tok-b", "POST", "/rank/0/initialize", R"({"num_pages":8})").status, 200);
  // tok-b takes page 0 for another key first, so the same key gets page 1 in model-b.
  ASSERT_EQ(as("tok-b", "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["other",""]]})").body,
            R"({"rank":0,"results":[["other",0]]})");
  const auto a = as("tok-a", "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})");
  EXPECT_EQ(a.body, R"({"rank":0,"results":[["k",0]]})");
  EXPECT_EQ(a.header("x-hf3fs-namespace"), std::nullopt);  // no header came, none goes back
  EXPECT_EQ(as("tok-b", "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})").body,
            R"({"rank":0,"results":[["k",1]]})");
  ASSERT_EQ(as("tok-a", "POST", "/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})").status, 204);
  ASSERT_EQ(as("tok-b", "POST", "/keys/confirm_write", R"({"rank":0,"confirmations":[["k",1]]})").status, 204);
  // model-a has two ranks, so k waits for rank 1 there; model-b has one, so k is complete there.
  EXPECT_EQ(as("tok-a", "POST", "/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(as("tok-b", "POST", "/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(as("tok-b", "POST", "/keys/get_locations", R"({"rank":0,"keys":["k"]})").body, R"({"locations":[1]})");
  // A tenant naming its own namespace is served, and the answer echoes it.
  const auto echoed = in("tok-b", "model-b", "POST", "/keys/batch_exists", R"({"keys":["k"]})");
  EXPECT_EQ(echoed.body, R"({"exists":[true]})");
  EXPECT_EQ(echoed.header("x-hf3fs-namespace"), "model-b");
  // The operator: each namespace by its header; the default one has no ranks and no keys.
  EXPECT_EQ(in("tok-op", "model-b", "POST", "/keys/get_locations", R"({"rank":0,"keys":["k"]})").body,
            R"({"locations":[1]})");
  EXPECT_EQ(as("tok-op", "POST", "/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(as("tok-op", "GET", "/namespaces").body,
            R"({"namespaces":[{"name":"default","ranks":[],"pages":0,"keys":0},)"
            R"({"name":"model-a","ranks":[0,1],"pages":8,"keys":1},)"
            R"({"name":"model-b","ranks":[0],"pages":8,"keys":1}]})");
  // tok-a's /clear empties model-a alone.
  ASSERT_EQ(as("tok-a", "POST", "/clear").status, 204);
  EXPECT_EQ(as("tok-b", "POST", "/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[true]})");
  EXPECT_EQ(as("tok-a", "POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})").body,
            R"({"detail":"Allocation failed: Rank 0 not initialized"})");
}

TEST_F(ServerTenantsTest, OperatorsActInAnyNamespace) {
  for (const auto* token : {"tok-op", "tok-boss"}) {
    SCOPED_TRACE(token);
    EXPECT_EQ(as(token, "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
    EXPECT_EQ(in(token, "model-a", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
    EXPECT_EQ(in(token, "nobody-has-it", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
    EXPECT_EQ(as(token, "GET", "/metrics").status, 200);
    EXPECT_EQ(as(token, "POST", "/_faults", R"({"delay_ms":0,"path":"/nowhere"})").status, 200);
    EXPECT_EQ(as(token, "DELETE", "/_faults").status, 200);
  }
}

TEST_F(ServerTenantsTest, SighupReloadsTheFile) {
  // A keep-alive connection that has used tok-a: its cached lookup must not outlive the reload.
  RawConnection connection(server_.host(), server_.port());
  const Headers a{{"Authorization", "Bearer tok-a"}};
  ASSERT_EQ(connection.request("POST", "/keys/batch_exists", R"({"keys":["k"]})", a).status, 200);
  ASSERT_EQ(as("tok-new", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 401);

  rewrite(tenants_.path(), "tok-b model-b\ntok-new model-new\n");
  ASSERT_EQ(::kill(server_.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log("hf3fs-meta-server: --tenants-file " + tenants_.path() +
                           " reloaded: 3 tokens (1 operators)\n"))
      << read_all(log_.path());
  EXPECT_EQ(connection.request("POST", "/keys/batch_exists", R"({"keys":["k"]})", a).status, 401);
  EXPECT_EQ(as("tok-a", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 401);
  EXPECT_EQ(as("tok-op", "GET", "/metrics").status, 401);
  EXPECT_EQ(as("tok-new", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
  EXPECT_EQ(in("tok-new", "model-b", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 403);
  EXPECT_EQ(as("tok-boss", "GET", "/metrics").status, 200);  // --auth-token-file's stays an operator

  // A file that does not parse: logged with its line, and the tokens in use stay.
  rewrite(tenants_.path(), "tok-b model-b\ntok-x\n");
  ASSERT_EQ(::kill(server_.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log("hf3fs-meta-server: --tenants-file " + tenants_.path() +
                           ": line 2: `TOKEN NAMESPACE` expected (NAMESPACE `*` for an operator), found 1 field; "
                           "the previous 3 tokens stay\n"))
      << read_all(log_.path());
  EXPECT_EQ(as("tok-new", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
  EXPECT_EQ(as("tok-x", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 401);
  // The server goes on, and a third SIGHUP (the handler re-armed) reads a fixed file.
  rewrite(tenants_.path(), "tok-x model-x\n");
  ASSERT_EQ(::kill(server_.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(" reloaded: 2 tokens (1 operators)\n")) << read_all(log_.path());
  EXPECT_EQ(as("tok-x", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
  EXPECT_EQ(as("tok-new", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 401);
}

TEST(ServerTenantsOptionsTest, ABadFileAtStartIsAUsageError) {
  TempFile bad("tok-a model-a\ntok-a model-b\n");
  auto ran = ServerProcess::run_to_exit({"--port", "0", "--tenants-file", bad.path()});
  EXPECT_EQ(ran.exit_code, 2) << ran.output;
  EXPECT_EQ(ran.output, "hf3fs-meta-server: --tenants-file " + bad.path() +
                            ": line 2: the token of line 1 again (a token has one namespace)\n");
  ran = ServerProcess::run_to_exit({"--port", "0", "--tenants-file", "/nonexistent/tenants"});
  EXPECT_EQ(ran.exit_code, 2) << ran.output;
  EXPECT_EQ(ran.output, "hf3fs-meta-server: --tenants-file /nonexistent/tenants: cannot be read\n");
  // --auth-token-file's token bound to a namespace.
  TempFile boss("tok-boss\n");
  TempFile bound("tok-boss model-a\n");
  ran = ServerProcess::run_to_exit({"--port", "0", "--tenants-file", bound.path(), "--auth-token-file", boss.path()});
  EXPECT_EQ(ran.exit_code, 2) << ran.output;
  EXPECT_THAT(ran.output, HasSubstr("line 1: this is --auth-token-file's token, an operator's"));
}

// Operators send SIGHUP to reload; a server with nothing to reload logs it and goes on with its
// state (its default action would end a memory-only server and everything it held).
TEST(ServerTenantsOptionsTest, WithoutTheFileSighupIsLoggedAndIgnored) {
  TempFile log("");
  ServerProcess server({"--threads", "1"}, log.path());
  ASSERT_EQ(raw_request(server.host(), server.port(), "POST", "/rank/0/initialize", R"({"num_pages":4})").status, 200);
  ASSERT_EQ(::kill(server.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_log(log.path(),
                           "hf3fs-meta-server: SIGHUP ignored: there is nothing to reload without --tenants-file\n"))
      << read_all(log.path());
  ASSERT_EQ(::kill(server.pid(), SIGHUP), 0);  // a second one as well
  const auto located = raw_request(server.host(), server.port(), "POST", "/keys/get_locations",
                                   R"({"rank":0,"keys":["k"]})");
  EXPECT_EQ(located.status, 200) << located.body;  // rank 0 is still initialized
  EXPECT_EQ(server.terminate(), 0);
}

TEST_F(ServerTenantsTest, TwoAuthorizationHeadersOnTheWireAre400) {
  const auto twice = as("tok-boss", "POST", "/keys/batch_exists", R"({"keys":["k"]})",
                        {{"Authorization", "Bearer tok-a"}});
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(twice.body, detail("Authorization was given more than once"));
  EXPECT_EQ(as("tok-a", "POST", "/keys/batch_exists", R"({"keys":["k"]})").status, 200);
}

}  // namespace
}  // namespace hf3fs_meta::testing
