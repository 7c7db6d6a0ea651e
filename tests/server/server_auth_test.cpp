// --auth-token-file: every route but /healthz needs `Authorization: Bearer <token>`, else 401 with a
// JSON detail and `WWW-Authenticate: Bearer`; a refused request changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>


#include <string>
#include <vector>

#include "server/server_test_support.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::testing {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kToken = "s3cret-Token_42";

struct Call {
  std::string method;
  std::string target;
  std::string body;
  int status;  // with the right token
};

// Every route the server serves, with a request that succeeds once authenticated (in this order:
// initialize comes first, clear last).
const std::vector<Call>& every_route() {
  static const std::vector<Call> calls = {
      {"POST", "/rank/0/initialize", R"({"num_pages":8})", 200},
      {"POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})", 200},
      {"POST", "/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0]]})", 204},
      {"POST", "/keys/batch_exists", R"({"keys":["a"]})", 200},
      {"POST", "/keys/get_locations", R"({"rank":0,"keys":["a"]})", 200},
      {"GET", "/metrics", "", 200},
      {"POST", "/_faults", R"({"delay_ms":0,"path":"/nowhere"})", 200},
      {"DELETE", "/_faults", "", 200},
      {"GET", "/keys/batch_exists", "", 405},
      {"POST", "/keys/batch_exists/", "{}", 307},
      {"POST", "/nowhere", "{}", 404},
      {"POST", "/clear", "", 204},
  };
  return calls;
}

class ServerAuthTest : public ServerTestBase {
 protected:
  // The file holds the token with surrounding whitespace and a trailing newline, as an editor saves it.
  static inline TempFile token_file{"  " + std::string(kToken) + " \n"};
  ServerAuthTest()
      : ServerTestBase({"--threads", "2", "--enable-fault-injection", "--auth-token-file", token_file.path()}) {}

  RawResponse call(const Call& c, const std::string& authorization) {
    Headers headers;
    if (!authorization.empty()) headers.emplace_back("Authorization", authorization);
    return send(c.method, c.target, c.body, headers);
  }

  static void expect_refused(const RawResponse& r, std::string_view detail) {
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    EXPECT_EQ(r.body, R"({"detail":")" + std::string(detail) + R"("})");
    EXPECT_EQ(r.header("www-authenticate"), "Bearer");
  }
};

TEST_F(ServerAuthTest, EveryRouteRefusesAMissingOrWrongTokenAndServesTheRightOne) {
  const std::string right = "Bearer " + std::string(kToken);
  const std::vector<std::string> wrong = {
      "Bearer wrong",
      "Bearer " + std::string(kToken) + "x",                // longer
      "Bearer " + std::string(kToken.substr(1)),            // shorter
      "Bearer " + std::string(kToken.substr(0, 14)) + "3",  // same length, last byte differs
      "Basic " + std::string(kToken),                       // another scheme
      std::string(kToken),                                  // no scheme
      "Bearer",
  };
  for (const Call& c : every_route()) {
    SCOPED_TRACE(c.method + " " + c.target);
    expect_refused(call(c, ""), "Not authenticated");
    for (const auto& authorization : wrong) {
      SCOPED_TRACE(authorization);
      expect_refused(call(c, authorization), "Invalid authentication credentials");
    }
    EXPECT_EQ(call(c, right).status, c.status);
  }
}

TEST_F(ServerAuthTest, TheSchemeNameIsCaseInsensitive) {
  EXPECT_EQ(call(every_route().front(), "bearer " + std::string(kToken)).status, 200);
  EXPECT_EQ(call(every_route().front(), "BEARER  " + std::string(kToken)).status, 200);
}

TEST_F(ServerAuthTest, HealthzIsOpen) {
  const auto r = get("/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"ok"})");
  EXPECT_EQ(call({"GET", "/healthz", "", 200}, "Bearer wrong").status, 200);
}

TEST_F(ServerAuthTest, ARefusedRequestChangesNothing) {
  const std::string right = "Bearer " + std::string(kToken);
  ASSERT_EQ(call(every_route()[0], right).status, 200);
  ASSERT_EQ(call(every_route()[1], right).status, 200);  // allocate "a" on rank 0
  // Refused: a clear, a fault rule that would fail every request, and a second allocate of "b".
  expect_refused(call({"POST", "/clear", "", 0}, ""), "Not authenticated");
  expect_refused(call({"POST", "/_faults", R"({"status":500})", 0}, "Bearer nope"),
                 "Invalid authentication credentials");
  expect_refused(call({"POST", "/keys/batch_allocate", R"({"rank":0,"keys":[["b",""]]})", 0}, ""),
                 "Not authenticated");
  // No fault rule fires, the rank survived (no clear), and it holds one allocated page ("a"), not two.
  const auto exists = call({"POST", "/keys/batch_exists", R"({"keys":["a","b"]})", 0}, right);
  EXPECT_EQ(exists.status, 200) << exists.body;
  const auto metrics = call({"GET", "/metrics", "", 0}, right);
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_ranks{namespace=\"default\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_rank_pages{namespace=\"default\",rank=\"0\",state=\"allocated\"} 1\n"));
  EXPECT_THAT(metrics.body, HasSubstr("hf3fs_meta_requests_total{route=\"unauthorized\",status=\"401\"} 3\n"));
}

TEST(ServerAuthOptionsTest, AnUnusableTokenFileIsAUsageError) {
  TempFile blank(" \n\t\n");
  TempFile spaced("two words\n");
  for (const std::string& path : {std::string("/nonexistent/token"), blank.path(), spaced.path()}) {
    SCOPED_TRACE(path);
    const auto ran = ServerProcess::run_to_exit({"--port", "0", "--auth-token-file", path});
    EXPECT_EQ(ran.exit_code, 2) << ran.output;
    EXPECT_THAT(ran.output, HasSubstr("--auth-token-file"));
  }
}

TEST(ServerAuthOptionsTest, WithoutTheOptionNothingIsAsked) {
  ServerProcess server({"--threads", "1"});
  EXPECT_EQ(raw_request(server.host(), server.port(), "POST", "/clear").status, 204);
  EXPECT_EQ(raw_request(server.host(), server.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(server.terminate(), 0);
}

}  // namespace
}  // namespace hf3fs_meta::testing
