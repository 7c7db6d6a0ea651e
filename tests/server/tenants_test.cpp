// --tenants-file's table on its own (mock_server/tenants.hpp): the format, every error naming the
// file and the line, lookups, --auth-token-file's token as an operator, and the reloadable holder
// with a connection's cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "hf3fs_meta/state.hpp"
#include "internal/namespace_name.hpp"
#include "metrics.hpp"
#include "router.hpp"
#include "server_options.hpp"
#include "support/temp_file.hpp"
#include "tenants.hpp"

namespace hf3fs_meta::server {
namespace {

using ::testing::HasSubstr;

// A tenants file edited in place, as an operator does before SIGHUP.
void rewrite(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.flush()) << path;
}

TenantTable::Parsed parse(std::string_view text, std::string_view operator_token = {}) {
  return TenantTable::parse("t.conf", text, operator_token);
}

std::shared_ptr<const TenantTable> table_of(std::string_view text, std::string_view operator_token = {}) {
  auto parsed = parse(text, operator_token);
  EXPECT_TRUE(parsed.table) << parsed.error;
  EXPECT_TRUE(parsed.error.empty());
  return parsed.table;
}

TEST(TenantTableTest, ReadsTokensNamespacesOperatorsCommentsAndBlankLines) {
  const auto table = table_of(
      "# tenants of the cluster\n"
      "\n"
      "tok-a   model-a\n"
      "  tok-b\tmodel.b_2   # a trailing comment\n"
      "ops#1 *\n"  // a '#' inside a token is part of it
      "tok-d default\r\n"
      "   \t\n"
      "last model-a");  // no newline at the end
  ASSERT_TRUE(table);
  EXPECT_EQ(table->tokens(), 5u);
  EXPECT_EQ(table->operators(), 1u);
  const Principal* a = table->find("tok-a");
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->operator_access);
  EXPECT_EQ(a->ns, "model-a");
  ASSERT_NE(table->find("tok-b"), nullptr);
  EXPECT_EQ(table->find("tok-b")->ns, "model.b_2");
  ASSERT_NE(table->find("ops#1"), nullptr);
  EXPECT_TRUE(table->find("ops#1")->operator_access);
  // `default` is the default namespace: the empty name everywhere else.
  ASSERT_NE(table->find("tok-d"), nullptr);
  EXPECT_EQ(table->find("tok-d")->ns, "");
  EXPECT_FALSE(table->find("tok-d")->operator_access);
  EXPECT_EQ(table->find("last")->ns, "model-a");
  EXPECT_EQ(table->find("tok-"), nullptr);
  EXPECT_EQ(table->find("tok-aa"), nullptr);
  EXPECT_EQ(table->find("ops"), nullptr);
  EXPECT_EQ(table->find(""), nullptr);
}

TEST(TenantTableTest, EveryErrorNamesTheFileAndTheLine) {
  struct Case {
    std::string text;
    std::string error;
  };
  const Case cases[] = {
      {"tok-a model-a\n\nlonely\n", "--tenants-file t.conf: line 3: `TOKEN NAMESPACE` expected (NAMESPACE `*` for an "
                                     "operator), found 1 field"},
      {"a b c\n", "--tenants-file t.conf: line 1: `TOKEN NAMESPACE` expected (NAMESPACE `*` for an operator), found "
                  "3 or more fields"},
      {"# c\ntok\x01x ns\n", "--tenants-file t.conf: line 2: the token: byte 0x01 at offset 3 is not visible ASCII"},
      {"tok\xC3\xA9 ns\n", "--tenants-file t.conf: line 1: the token: byte 0xC3 at offset 3"},
      {"tok ns/1\n", "--tenants-file t.conf: line 1: the namespace has byte 0x2F at offset 2: a namespace name is 1 to "
                     "64 characters of A-Z, a-z, 0-9, '.', '_' and '-', or `*` for an operator"},
      {"tok " + std::string(65, 'n') + "\n", "--tenants-file t.conf: line 1: the namespace is 65 bytes"},
      {"tok **\n", "--tenants-file t.conf: line 1: the namespace has byte 0x2A at offset 0"},
      {"x a\ntok a\ny b\ntok b\n", "--tenants-file t.conf: line 4: the token of line 2 again (a token has one namespace)"},
      {"tok a\ntok a\n", "--tenants-file t.conf: line 2: the token of line 1 again"},
      {"tok *\ntok *\n", "--tenants-file t.conf: line 2: the token of line 1 again"},
      {"", "--tenants-file t.conf: no token in it (every request but /healthz would get 401)"},
      {"# only\n\n  # comments\n", "--tenants-file t.conf: no token in it"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const auto parsed = parse(c.text);
    EXPECT_FALSE(parsed.table);
    EXPECT_THAT(parsed.error, ::testing::StartsWith(c.error));
  }
}

TEST(TenantTableTest, AnErrorNeverEchoesTheToken) {
  const auto parsed = parse("s3cret-one a\ns3cret-one b\n");
  EXPECT_FALSE(parsed.table);
  EXPECT_THAT(parsed.error, ::testing::Not(HasSubstr("s3cret")));
}

TEST(TenantTableTest, TheAuthTokenFilesTokenIsAnOperator) {
  const auto table = table_of("tok-a model-a\n", "boss");
  ASSERT_TRUE(table);
  EXPECT_EQ(table->tokens(), 2u);
  EXPECT_EQ(table->operators(), 1u);
  ASSERT_NE(table->find("boss"), nullptr);
  EXPECT_TRUE(table->find("boss")->operator_access);
  // Named again as `*`: allowed, still one token; bound to a namespace: an error naming the line.
  const auto again = table_of("boss *\n", "boss");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->tokens(), 1u);
  const auto bound = parse("tok-a a\nboss model-a\n", "boss");
  EXPECT_FALSE(bound.table);
  EXPECT_EQ(bound.error,
            "--tenants-file t.conf: line 2: this is --auth-token-file's token, an operator's: it can only be `*` here");
  // With it, a file of comments only is a table of one operator.
  const auto only = table_of("# nobody yet\n", "boss");
  ASSERT_TRUE(only);
  EXPECT_EQ(only->tokens(), 1u);
}

TEST(TenantTableTest, ReadNamesAFileThatCannotBeRead) {
  const auto parsed = TenantTable::read("/nonexistent/tenants", {});
  EXPECT_FALSE(parsed.table);
  EXPECT_EQ(parsed.error, "--tenants-file /nonexistent/tenants: cannot be read");
  testing::TempFile file("tok-a model-a\n");
  const auto read = TenantTable::read(file.path(), {});
  ASSERT_TRUE(read.table) << read.error;
  EXPECT_EQ(read.table->find("tok-a")->ns, "model-a");
  testing::TempFile bad("tok-a\n");
  EXPECT_EQ(TenantTable::read(bad.path(), {}).error,
            "--tenants-file " + bad.path() + ": line 1: `TOKEN NAMESPACE` expected (NAMESPACE `*` for an operator), "
            "found 1 field");
}

TEST(TenantsTest, ResolveCachesPerConnectionAndSeesAReload) {
  testing::TempFile file("tok-a model-a\ntok-b model-b\n");
  Tenants tenants(TenantTable::read(file.path(), {}).table);
  TenantCache cache;
  const Principal* a = tenants.resolve("tok-a", cache);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ns, "model-a");
  const auto generation = cache.generation;
  EXPECT_NE(generation, 0u);
  // The same token again: the cached principal, the same table.
  EXPECT_EQ(tenants.resolve("tok-a", cache), a);
  EXPECT_EQ(cache.generation, generation);
  // Another token on the same connection: looked up, not confused with the cached one.
  ASSERT_NE(tenants.resolve("tok-b", cache), nullptr);
  EXPECT_EQ(cache.principal->ns, "model-b");
  EXPECT_EQ(tenants.resolve("tok-c", cache), nullptr);
  EXPECT_EQ(tenants.resolve("tok-c", cache), nullptr);  // an unknown one, cached as unknown
  EXPECT_EQ(tenants.resolve("tok-", cache), nullptr);
  ASSERT_NE(tenants.resolve("tok-a", cache), nullptr);

  // Another connection's request, under way across the reload below.
  TenantCache other;
  const Principal* held = tenants.resolve("tok-a", other);
  ASSERT_NE(held, nullptr);

  // A reload that removes tok-a and adds tok-c: the cache sees it at its next lookup.
  rewrite(file.path(), "tok-b model-b\ntok-c *\n");
  const auto reloaded = tenants.reload(file.path(), {});
  ASSERT_TRUE(reloaded.table) << reloaded.error;
  EXPECT_EQ(tenants.table(), reloaded.table);
  EXPECT_EQ(tenants.resolve("tok-a", cache), nullptr);
  EXPECT_GT(cache.generation, generation);
  ASSERT_NE(tenants.resolve("tok-c", cache), nullptr);
  EXPECT_TRUE(cache.principal->operator_access);
  // A principal handed out before the reload stays valid while its cache holds the old table (the
  // other connection has not looked anything up since). `a` is not: its cache moved on.
  EXPECT_EQ(held->ns, "model-a");
  EXPECT_EQ(other.table->tokens(), 2u);
}

TEST(TenantsTest, AReloadThatFailsKeepsTheTableInUse) {
  testing::TempFile file("tok-a model-a\n");
  Tenants tenants(TenantTable::read(file.path(), {}).table);
  const auto before = tenants.table();
  TenantCache cache;
  ASSERT_NE(tenants.resolve("tok-a", cache), nullptr);
  const auto generation = cache.generation;
  rewrite(file.path(), "tok-a model-a\ntok-b\n");
  const auto failed = tenants.reload(file.path(), {});
  EXPECT_FALSE(failed.table);
  EXPECT_EQ(failed.error, "--tenants-file " + file.path() +
                              ": line 2: `TOKEN NAMESPACE` expected (NAMESPACE `*` for an operator), found 1 field");
  EXPECT_EQ(tenants.table(), before);
  ASSERT_NE(tenants.resolve("tok-a", cache), nullptr);
  EXPECT_EQ(cache.generation, generation);  // nothing swapped
  EXPECT_EQ(tenants.resolve("tok-b", cache), nullptr);
}

TEST(TenantsTest, ASecondRequestWithTheSameTokenIsAnsweredFromTheCache) {
  Tenants tenants(table_of("tok-a model-a\n"));
  TenantCache cache;
  ASSERT_NE(tenants.resolve("tok-a", cache), nullptr);
  // What the cache holds is what the same token gets, without a lookup (so no digest): a principal
  // planted there comes back.
  const Principal planted{true, "planted"};
  cache.principal = &planted;
  EXPECT_EQ(tenants.resolve("tok-a", cache), &planted);
  // Another token is looked up in the table.
  EXPECT_EQ(tenants.resolve("tok-b", cache), nullptr);
}

TEST(TenantsTest, NeedsATable) { EXPECT_THROW(Tenants(nullptr), std::invalid_argument); }

}  // namespace
}  // namespace hf3fs_meta::server

namespace hf3fs_meta::server {
namespace {

// Router::admit's namespace and tenant steps (no sockets): what it answers, and the namespace a
// request goes on to act in (exchange.ns).
class RouterAdmitTest : public ::testing::Test {
 protected:
  struct Sent {
    int status = 0;
    std::string body;
    std::string ns;
    std::string label;
  };

  explicit RouterAdmitTest(ServerOptions options = {}) : options_(std::move(options)) {}

  // One request on the test's connection (one Exchange, reset between requests as the session does).
  Sent send(std::string method, std::string target, const std::vector<std::string>& ns_headers = {},
            std::string authorization = {}, std::string body = {}) {
    Request request;
    request.method = std::move(method);
    request.target = std::move(target);
    request.body = std::move(body);
    request.authorization = std::move(authorization);
    for (const auto& value : ns_headers) {
      request.ns = value;  // as the parser: the last value, and how many came (at most 2)
      if (request.ns_headers < 2) ++request.ns_headers;
    }
    exchange_.reset();
    EXPECT_EQ(router_.step(request, exchange_), Router::Next::reply);
    return Sent{exchange_.reply.status, exchange_.reply.body, std::string(exchange_.ns),
                std::string(exchange_.label.name())};
  }
  static std::string detail(std::string_view text) { return R"({"detail":")" + std::string(text) + R"("})"; }

  ServerOptions options_;
  Metrics metrics_{1};
  MetadataState state_{StateOptions{}};
  Router router_{options_, state_, metrics_};
  Exchange exchange_;
};

TEST_F(RouterAdmitTest, TheNamespaceHeaderIsCheckedAndSetsTheNamespace) {
  // None: the default namespace, and the answer of today.
  auto r = send("POST", "/rank/0/initialize", {}, {}, R"({"num_pages":4})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.ns, "");
  r = send("POST", "/keys/batch_exists", {"model-a"}, {}, R"({"keys":[]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.ns, "model-a");
  // `default` names the default namespace: the empty name.
  r = send("POST", "/keys/batch_exists", {"default"}, {}, R"({"keys":[]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.ns, "");
  // The next request on the connection, without the header, is in the default namespace again.
  r = send("POST", "/keys/batch_exists", {"model-a"}, {}, R"({"keys":[]})");
  ASSERT_EQ(r.ns, "model-a");
  r = send("POST", "/keys/batch_exists", {}, {}, R"({"keys":[]})");
  EXPECT_EQ(r.ns, "");
  EXPECT_EQ(r.status, 200);
}

TEST_F(RouterAdmitTest, ARepeatedOrBadHeaderIs400AndNeverEchoed) {
  const auto repeated = send("POST", "/clear", {"model-a", "model-a"});
  EXPECT_EQ(repeated.status, 400);
  EXPECT_EQ(repeated.body, detail("X-Hf3fs-Namespace was given more than once"));
  EXPECT_EQ(repeated.body, detail(internal::namespace_header_repeated()));
  EXPECT_EQ(repeated.label, "/clear");  // counted under the route it was sent to
  const std::string invalid =
      detail("X-Hf3fs-Namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'");
  for (const std::string& bad : {std::string(), std::string("a/b"), std::string("mod el"), std::string(65, 'n'),
                                std::string("caf\xC3\xA9"), std::string("a\r\nX-Evil: 1"), std::string("*")}) {
    SCOPED_TRACE(bad);
    const auto r = send("POST", "/keys/batch_exists", {bad}, {}, R"({"keys":[]})");
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.body, invalid);
    EXPECT_EQ(r.label, "/keys/batch_exists");
  }
  EXPECT_EQ(send("POST", "/keys/batch_exists", {std::string(64, 'n')}, {}, R"({"keys":[]})").status, 200);
  // Refused before anything is applied: the rank initialized first survives a refused /clear.
  ASSERT_EQ(send("POST", "/rank/0/initialize", {}, {}, R"({"num_pages":4})").status, 200);
  EXPECT_EQ(send("POST", "/clear", {"a", "b"}).status, 400);
  EXPECT_EQ(send("POST", "/clear", {"a/b"}).status, 400);
  EXPECT_EQ(state_.rank_count(), 1u);
}

TEST_F(RouterAdmitTest, TheServersOwnRoutesIgnoreTheHeader) {
  EXPECT_EQ(send("GET", "/healthz", {"a/b"}).status, 200);
  EXPECT_EQ(send("GET", "/healthz", {"a", "b"}).status, 200);
  EXPECT_EQ(send("GET", "/metrics", {"a/b"}).status, 200);
}

constexpr std::string_view kTenants =
    "tok-a model-a\n"
    "tok-b model-b\n"
    "tok-d default\n"
    "tok-op *\n";

ServerOptions tenant_options(bool faults) {
  ServerOptions o;
  o.auth_token = "tok-boss";
  o.tenants = TenantTable::parse("t.conf", kTenants, o.auth_token).table;
  o.enable_fault_injection = faults;
  return o;
}

class RouterTenantsTest : public RouterAdmitTest {
 protected:
  RouterTenantsTest() : RouterAdmitTest(tenant_options(true)) {}
  Sent as(std::string_view token, std::string method, std::string target, const std::vector<std::string>& ns = {},
          std::string body = {}) {
    return send(std::move(method), std::move(target), ns, "Bearer " + std::string(token), std::move(body));
  }
  Sent exists(std::string_view token, const std::vector<std::string>& ns = {}) {
    return as(token, "POST", "/keys/batch_exists", ns, R"({"keys":[]})");
  }
};

TEST_F(RouterTenantsTest, NoOrAnUnknownTokenIs401WithTodaysTexts) {
  for (const auto& target : {"/keys/batch_exists", "/metrics", "/namespaces", "/clear", "/nowhere"}) {
    SCOPED_TRACE(target);
    auto r = send("POST", target, {}, {});
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.body, detail("Not authenticated"));
    EXPECT_EQ(r.label, "unauthorized");
    for (const std::string authorization : {"Bearer tok-c", "Bearer tok-a ", "Basic tok-a", "tok-a", "Bearer ",
                                            "Bearer tok-boss2"}) {
      r = send("POST", target, {}, authorization);
      EXPECT_EQ(r.status, 401) << authorization;
      EXPECT_EQ(r.body, detail("Invalid authentication credentials"));
    }
  }
  EXPECT_EQ(send("GET", "/healthz").status, 200);
  EXPECT_EQ(send("GET", "/healthz", {}, "Bearer wrong").status, 200);
}

// Two Authorization fields are refused, whichever of them is right: neither may win silently (a
// proxy adding its own beside the client's). The parser counts them (ServerWire tests the wire).
TEST_F(RouterTenantsTest, TwoAuthorizationHeadersAre400WhicheverIsRight) {
  for (const auto& target : {"/keys/batch_exists", "/namespaces", "/clear"}) {
    SCOPED_TRACE(target);
    Request request;
    request.method = "POST";
    request.target = target;
    request.body = R"({"keys":[]})";
    request.authorization = "Bearer tok-boss";  // the last one, as the parser keeps it
    request.auth_headers = 2;
    exchange_.reset();
    ASSERT_EQ(router_.step(request, exchange_), Router::Next::reply);
    EXPECT_EQ(exchange_.reply.status, 400);
    EXPECT_EQ(exchange_.reply.body, detail("Authorization was given more than once"));
  }
  EXPECT_EQ(exists("tok-boss").status, 200);  // one is enough
}

class RouterOperatorTokenTest : public RouterAdmitTest {
 protected:
  RouterOperatorTokenTest() : RouterAdmitTest([] {
    ServerOptions o;
    o.auth_token = "tok-boss";
    return o;
  }()) {}
};

TEST_F(RouterOperatorTokenTest, TwoAuthorizationHeadersAre400WithAnAuthTokenFileToo) {
  Request request;
  request.method = "POST";
  request.target = "/clear";
  request.authorization = "Bearer tok-boss";
  request.auth_headers = 2;
  exchange_.reset();
  ASSERT_EQ(router_.step(request, exchange_), Router::Next::reply);
  EXPECT_EQ(exchange_.reply.status, 400);
  EXPECT_EQ(exchange_.reply.body, detail("Authorization was given more than once"));
  request.auth_headers = 1;
  exchange_.reset();
  ASSERT_EQ(router_.step(request, exchange_), Router::Next::reply);
  EXPECT_EQ(exchange_.reply.status, 204) << exchange_.reply.body;  // cleared
}

TEST_F(RouterTenantsTest, ATenantActsInItsNamespace) {
  auto r = exists("tok-a");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.ns, "model-a");
  r = exists("tok-a", {"model-a"});  // naming its own: the same
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.ns, "model-a");
  r = exists("tok-b");
  EXPECT_EQ(r.ns, "model-b");
  // The scheme's name in any case, as --auth-token-file's.
  EXPECT_EQ(send("POST", "/keys/batch_exists", {}, "bEaReR  tok-a", R"({"keys":[]})").ns, "model-a");
  // A tenant of the default namespace: no header, or `default`.
  r = exists("tok-d");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.ns, "");
  r = exists("tok-d", {"default"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.ns, "");
}

TEST_F(RouterTenantsTest, ATenantNamingAnotherNamespaceIs403WhetherItExistsOrNot) {
  // model-b is another tenant's, nobody-has-it is no one's: the same answer but for the name.
  ASSERT_EQ(as("tok-b", "POST", "/rank/0/initialize", {}, R"({"num_pages":4})").status, 200);
  for (const std::string other : {"model-b", "nobody-has-it", "default"}) {
    const auto r = exists("tok-a", {other});
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("X-Hf3fs-Namespace " + other + ": not permitted for this token"));
    EXPECT_EQ(r.label, "/keys/batch_exists");
  }
  const auto r = exists("tok-d", {"model-a"});
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body, detail("X-Hf3fs-Namespace model-a: not permitted for this token"));
  // A bad header is 400 before it is a tenant's question (and is never echoed).
  EXPECT_EQ(exists("tok-a", {"a/b"}).status, 400);
  EXPECT_EQ(exists("tok-a", {"model-a", "model-a"}).status, 400);
}

TEST_F(RouterTenantsTest, OperatorsActInAnyNamespace) {
  for (const auto token : {"tok-op", "tok-boss"}) {
    SCOPED_TRACE(token);
    auto r = exists(token);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.ns, "");
    r = exists(token, {"model-a"});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.ns, "model-a");
    r = exists(token, {"nobody-has-it"});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.ns, "nobody-has-it");
    EXPECT_EQ(as(token, "GET", "/metrics").status, 200);
    EXPECT_EQ(as(token, "POST", "/_faults", {}, R"({"delay_ms":0,"path":"/nowhere"})").status, 200);
    EXPECT_EQ(as(token, "DELETE", "/_faults").status, 200);
    auto listed = as(token, "GET", "/namespaces");
    EXPECT_EQ(listed.status, 200) << listed.body;
    listed = as(token, "POST", "/namespaces/model-a/drop");
    EXPECT_EQ(listed.status, 200) << listed.body;
  }
}

TEST_F(RouterTenantsTest, TheServersOwnRoutesAndNamespacesNeedAnOperator) {
  for (const auto token : {"tok-a", "tok-d"}) {
    SCOPED_TRACE(token);
    auto r = as(token, "GET", "/metrics");
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("/metrics needs an operator token"));
    EXPECT_EQ(r.label, "/metrics");
    r = as(token, "POST", "/_faults", {}, R"({"status":500})");
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("/_faults needs an operator token"));
    EXPECT_EQ(as(token, "DELETE", "/_faults").status, 403);
    r = as(token, "GET", "/namespaces");
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("/namespaces needs an operator token"));
    r = as(token, "POST", "/namespaces/model-a/drop", {"model-a"});
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(r.body, detail("/namespaces/{name}/drop needs an operator token"));
    // Not those routes: not refused as them.
    EXPECT_NE(as(token, "POST", "/namespaces/a/b/drop").status, 403);
    EXPECT_NE(as(token, "POST", "/namespacesx").status, 403);
    EXPECT_EQ(as(token, "GET", "/healthz").status, 200);
  }
  // The fault rule a tenant tried to add was not added: a request still succeeds.
  EXPECT_EQ(exists("tok-a").status, 200);
}

TEST_F(RouterTenantsTest, AReloadIsSeenByTheNextRequestOfAConnection) {
  testing::TempFile file("tok-b model-b\ntok-new model-new\n");
  ASSERT_EQ(exists("tok-a").status, 200);  // cached on this connection
  const auto reloaded = router_.tenants()->reload(file.path(), options_.auth_token);
  ASSERT_TRUE(reloaded.table) << reloaded.error;
  auto r = exists("tok-a");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body, detail("Invalid authentication credentials"));
  r = exists("tok-new");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.ns, "model-new");
  EXPECT_EQ(exists("tok-boss", {"x"}).ns, "x");  // --auth-token-file's is kept as an operator
  EXPECT_EQ(as("tok-op", "GET", "/metrics").status, 401);  // removed with the file's line
}

class RouterTenantsNoFaultsTest : public RouterAdmitTest {
 protected:
  RouterTenantsNoFaultsTest() : RouterAdmitTest(tenant_options(false)) {}
};

TEST_F(RouterTenantsNoFaultsTest, FaultsWithoutFaultInjectionAreNoRouteForAnyone) {
  EXPECT_EQ(send("POST", "/_faults", {}, "Bearer tok-a", "{}").status, 404);
  EXPECT_EQ(send("POST", "/_faults", {}, "Bearer tok-op", "{}").status, 404);
  EXPECT_EQ(send("GET", "/metrics", {}, "Bearer tok-a").status, 403);
}

}  // namespace
}  // namespace hf3fs_meta::server
