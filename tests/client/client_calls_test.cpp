// Client over a GoogleMock transport: what each call sends, how each answer decodes, how each
// failure is classified, and what the client refuses before sending.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/mocks/mock_connection.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::StrictMock;
using namespace hf3fs_meta::testing;

class ClientCallTest : public ::testing::Test {
 protected:
  ClientCallTest() {
    ClientOptions options;
    options.transport = transport;
    options.clock = clock;
    options.sleeper = sleeper;
    // One attempt: these tests look at single exchanges; retries have their own tests.
    options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(1);
    client = std::make_unique<Client>(std::move(options));
  }

  // Answers the next post with `answer`, keeping the request for inspection.
  void answer_once(TransportResult answer) {
    EXPECT_CALL(*transport, post(_, _)).WillOnce(DoAll(SaveArg<0>(&sent), Return(std::move(answer))));
  }

  std::optional<std::string_view> sent_header(std::string_view name) const {
    for (const auto& h : sent.headers) {
      if (h.name == name) return h.value;
    }
    return std::nullopt;
  }

  std::shared_ptr<StrictMock<MockTransport>> transport = std::make_shared<StrictMock<MockTransport>>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  std::shared_ptr<FakeSleeper> sleeper = std::make_shared<FakeSleeper>(clock);
  std::unique_ptr<Client> client;
  HttpRequest sent;
};

// ---- What each endpoint sends ----

TEST_F(ClientCallTest, InitializeSendsPathAndBody) {
  answer_once(http_answer(200, R"j({"message":"Rank 3 initialized with 1024 pages"})j"));
  auto r = client->initialize(3, 1024);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), "Rank 3 initialized with 1024 pages");
  EXPECT_EQ(sent.path, "/rank/3/initialize");
  EXPECT_EQ(sent.body, R"j({"num_pages":1024,"role":"worker"})j");
  ASSERT_TRUE(sent_header("X-Request-Id"));
  EXPECT_FALSE(sent_header("X-Request-Id")->empty());
}

TEST_F(ClientCallTest, NoAuthorizationHeaderWithoutAToken) {
  answer_once(http_answer(200, R"j({"exists":[false]})j"));
  ASSERT_TRUE(client->batch_exists({"k"}));
  EXPECT_FALSE(sent_header("Authorization"));
}

TEST_F(ClientCallTest, AuthTokenIsSentAsABearerTokenOnEveryAttempt) {
  ClientOptions options;
  options.transport = transport;
  options.clock = clock;
  options.sleeper = sleeper;
  options.auth_token = "t0ken";
  Client with_token(std::move(options));
  std::vector<HttpRequest> posts;
  EXPECT_CALL(*transport, post(_, _))
      .WillOnce(DoAll(::testing::Invoke([&](const HttpRequest& r, const AttemptTimeouts&) { posts.push_back(r); }),
                      Return(http_answer(503, R"j({"detail":"busy"})j"))))
      .WillOnce(DoAll(::testing::Invoke([&](const HttpRequest& r, const AttemptTimeouts&) { posts.push_back(r); }),
                      Return(http_answer(200, R"j({"exists":[true]})j"))));
  ASSERT_TRUE(with_token.batch_exists({"k"}));
  ASSERT_EQ(posts.size(), 2u);
  for (const auto& post : posts) {
    EXPECT_EQ(std::count(post.headers.begin(), post.headers.end(), HttpHeader{"Authorization", "Bearer t0ken"}), 1);
  }
}

TEST_F(ClientCallTest, InitializeSchedulerNegativeRank) {
  answer_once(http_answer(200, R"j({"message":"Scheduler role does not require initialization"})j"));
  auto r = client->initialize(-7, 0, Role::scheduler);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), "Scheduler role does not require initialization");
  EXPECT_EQ(sent.path, "/rank/-7/initialize");
  EXPECT_EQ(sent.body, R"j({"num_pages":0,"role":"scheduler"})j");
}

TEST_F(ClientCallTest, AllocateSendsKeysWithPrefixes) {
  answer_once(http_answer(200, R"j({"rank":3,"results":[["a",4],["b",-1]]})j"));
  auto r = client->allocate(3, std::vector<BlockKey>{{"a", "p"}, {"b", ""}});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.path, "/keys/batch_allocate");
  EXPECT_EQ(sent.body, R"j({"rank":3,"keys":[["a","p"],["b",""]]})j");
  EXPECT_EQ(r.value(), (std::vector<Page>{4, kNoPage}));
}

TEST_F(ClientCallTest, AllocateStringKeysSendEmptyPrefix) {
  answer_once(http_answer(200, R"j({"rank":-2,"results":[["9e107d9d372bb6826bd81d3542a419d6",0]]})j"));
  auto r = client->allocate(-2, {"9e107d9d372bb6826bd81d3542a419d6"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.body, R"j({"rank":-2,"keys":[["9e107d9d372bb6826bd81d3542a419d6",""]]})j");
  EXPECT_EQ(r.value(), (std::vector<Page>{0}));
}

TEST_F(ClientCallTest, ConfirmWriteSendsConfirmationsAndReleases) {
  answer_once(no_content());
  auto r = client->confirm_write(3, {{"a", 4}, {"b", 5}}, {7, 8});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.path, "/keys/confirm_write");
  EXPECT_EQ(sent.body, R"j({"rank":3,"confirmations":[["a",4],["b",5]],"pages_to_release":[7,8]})j");
}

TEST_F(ClientCallTest, ConfirmWriteWithoutReleasesSendsEmptyList) {
  answer_once(no_content());
  ASSERT_TRUE(client->confirm_write(0, {{"a", 0}}));
  EXPECT_EQ(sent.body, R"j({"rank":0,"confirmations":[["a",0]],"pages_to_release":[]})j");
}

TEST_F(ClientCallTest, BatchExistsAllowsDuplicateKeys) {
  answer_once(http_answer(200, R"j({"exists":[true,false,true]})j"));
  auto r = client->batch_exists({"a", "b", "a"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.path, "/keys/batch_exists");
  EXPECT_EQ(sent.body, R"j({"keys":["a","b","a"]})j");
  EXPECT_EQ(r.value(), (std::vector<bool>{true, false, true}));
}

TEST_F(ClientCallTest, GetLocationsAllowsDuplicateKeys) {
  answer_once(http_answer(200, R"j({"locations":[5,null,5]})j"));
  auto r = client->get_locations(3, {"a", "b", "a"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.path, "/keys/get_locations");
  EXPECT_EQ(sent.body, R"j({"rank":3,"keys":["a","b","a"]})j");
  EXPECT_EQ(r.value(), (std::vector<std::optional<Page>>{5, std::nullopt, 5}));
}

TEST_F(ClientCallTest, ClearSendsEmptyBody) {
  answer_once(no_content());
  ASSERT_TRUE(client->clear());
  EXPECT_EQ(sent.path, "/clear");
  EXPECT_EQ(sent.body, "");
}

TEST_F(ClientCallTest, RawPostsBodyAsIsAndReturnsAnswer) {
  answer_once(http_answer(200, "whatever", "text/plain"));
  auto r = client->raw("/keys/batch_allocate", "{not json");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.path, "/keys/batch_allocate");
  EXPECT_EQ(sent.body, "{not json");
  EXPECT_EQ(r.value().status, 200);
  EXPECT_EQ(r.value().content_type, "text/plain");
  EXPECT_EQ(r.value().body, "whatever");
}

TEST_F(ClientCallTest, TimeoutsGivenToTheTransportComeFromOptions) {
  ClientOptions options;
  options.transport = transport;
  options.clock = clock;
  options.connect_timeout = std::chrono::milliseconds(250);
  options.request_timeout = std::chrono::milliseconds(1500);
  Client c(std::move(options));
  AttemptTimeouts seen;
  EXPECT_CALL(*transport, post(_, _)).WillOnce(DoAll(SaveArg<1>(&seen), Return(TransportResult(no_content()))));
  ASSERT_TRUE(c.clear());
  EXPECT_EQ(seen.connect, std::chrono::milliseconds(250));
  EXPECT_EQ(seen.total, std::chrono::milliseconds(1500));
}

// ---- Every error class, from every status and detail of docs/protocol.md ----

struct ErrorCase {
  const char* name;
  int status;
  const char* content_type;
  const char* body;
  errc code;
  std::optional<Rank> rank;
};

const ErrorCase kErrorCases[] = {
    {"allocate_not_initialized", 500, "application/json", R"j({"detail":"Allocation failed: Rank 3 not initialized"})j",
     errc::rank_not_initialized, 3},
    {"locations_not_initialized", 500, "application/json",
     R"j({"detail":"Failed to get key locations: Rank 4 not initialized"})j", errc::rank_not_initialized, 4},
    {"confirm_keyerror", 500, "application/json", R"j({"detail":"Confirmation failed: 9"})j",
     errc::rank_not_initialized, 9},
    {"rank_true", 500, "application/json", R"j({"detail":"Allocation failed: Rank True not initialized"})j",
     errc::rank_not_initialized, 1},
    {"need_rank_keys", 400, "application/json",
     R"j({"detail":"Invalid request format: need 'rank' and 'keys'"})j", errc::invalid_request, std::nullopt},
    {"need_rank_confirmations", 400, "application/json",
     R"j({"detail":"Invalid request format: need 'rank' and 'confirmations'"})j", errc::invalid_request, std::nullopt},
    {"invalid_keys_format", 400, "application/json", R"j({"detail":"Invalid keys format"})j", errc::invalid_request,
     std::nullopt},
    {"field_naming_400", 400, "application/json", R"j({"detail":"keys[1]: expected a [key, prefix_key] pair"})j",
     errc::invalid_request, std::nullopt},
    {"invalid_initialization", 400, "application/json", R"j({"detail":"Invalid initialization parameters"})j",
     errc::invalid_initialization, std::nullopt},
    {"invalid_initialization_max", 400, "application/json",
     R"j({"detail":"Invalid initialization parameters: num_pages 99999999 is above the maximum 16777216"})j",
     errc::invalid_initialization, std::nullopt},
    {"unpack", 500, "application/json",
     R"j({"detail":"Allocation failed: too many values to unpack (expected 2)"})j", errc::allocation_failed,
     std::nullopt},
    {"confirm_unpack", 500, "application/json",
     R"j({"detail":"Confirmation failed: not enough values to unpack (expected 2, got 1)"})j",
     errc::confirmation_failed, std::nullopt},
    {"confirm_not_iterable", 500, "application/json",
     R"j({"detail":"Confirmation failed: 'int' object is not iterable"})j", errc::confirmation_failed, std::nullopt},
    {"exists_unhashable", 500, "application/json",
     R"j({"detail":"Key existence check failed: unhashable type: 'list'"})j", errc::existence_check_failed,
     std::nullopt},
    {"locations_other", 500, "application/json", R"j({"detail":"Failed to get key locations: boom"})j",
     errc::location_lookup_failed, std::nullopt},
    {"stale", 409, "application/json",
     R"j({"detail":"Confirmation failed: page 5 of key k is not allocated on rank 3"})j", errc::stale_allocation, 3},
    {"mapped", 409, "application/json",
     R"j({"detail":"Confirmation failed: page 5 of key k is mapped to key j on rank 3"})j", errc::stale_allocation, 3},
    {"pydantic1", 422, "application/json",
     R"j({"detail":[{"loc":["path","rank"],"msg":"value is not a valid integer","type":"type_error.integer"}]})j",
     errc::validation_error, std::nullopt},
    {"pydantic2", 422, "application/json",
     R"j({"detail":[{"type":"int_parsing","loc":["path","rank"],"msg":"Input should be a valid integer, unable to parse string as an integer","input":"abc"}]})j",
     errc::validation_error, std::nullopt},
    {"internal_text", 500, "text/plain; charset=utf-8", "Internal Server Error", errc::server_error, std::nullopt},
    {"unknown_prefix", 500, "application/json", R"j({"detail":"Something else failed: x"})j", errc::server_error,
     std::nullopt},
    {"bad_gateway", 502, "text/html", "<html>bad gateway</html>", errc::unavailable, std::nullopt},
    {"unavailable", 503, "application/json", R"j({"detail":"Service Unavailable"})j", errc::unavailable,
     std::nullopt},
    {"gateway_timeout", 504, "text/html", "", errc::unavailable, std::nullopt},
    {"not_found", 404, "application/json", R"j({"detail":"Not Found"})j", errc::unexpected_status, std::nullopt},
    {"method_not_allowed", 405, "application/json", R"j({"detail":"Method Not Allowed"})j", errc::unexpected_status,
     std::nullopt},
    {"redirect", 307, "", "", errc::unexpected_status, std::nullopt},
    {"too_large", 413, "text/plain", "too large", errc::unexpected_status, std::nullopt},
};

class ClientErrorClassTest : public ClientCallTest, public ::testing::WithParamInterface<std::tuple<ErrorCase, int>> {};

// Every call (raw included) classifies by status and detail alone.
TEST_P(ClientErrorClassTest, ClassifiesByStatusAndDetail) {
  const auto& [c, call] = GetParam();
  answer_once(http_answer(c.status, c.body, c.content_type));
  std::optional<Error> error;
  Operation op{};
  switch (call) {
    case 0: op = Operation::initialize; error = client->initialize(3, 8).error(); break;
    case 1: op = Operation::allocate; error = client->allocate(3, {"k"}).error(); break;
    case 2: op = Operation::confirm_write; error = client->confirm_write(3, {{"k", 1}}).error(); break;
    case 3: op = Operation::batch_exists; error = client->batch_exists({"k"}).error(); break;
    case 4: op = Operation::get_locations; error = client->get_locations(3, {"k"}).error(); break;
    case 5: op = Operation::clear; error = client->clear().error(); break;
    default: op = Operation::raw; error = client->raw("/x", "{}").error(); break;
  }
  EXPECT_EQ(error->code, c.code) << to_string(error->code) << ": " << error->message();
  EXPECT_EQ(error->operation, op);
  EXPECT_EQ(error->status, c.status);
  EXPECT_TRUE(error->sent);
  EXPECT_EQ(error->attempts, 1);
  EXPECT_FALSE(error->request_id.empty());
  if (c.code == errc::rank_not_initialized) {
    EXPECT_EQ(error->rank, c.rank);
  }
  EXPECT_FALSE(error->message().empty());
  EXPECT_EQ(error->error_code(), make_error_code(c.code));
}

std::string error_case_name(const ::testing::TestParamInfo<std::tuple<ErrorCase, int>>& info) {
  static const char* const calls[] = {"initialize", "allocate", "confirm_write", "exists", "locations", "clear", "raw"};
  return std::string(std::get<0>(info.param).name) + "_" + calls[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(AllCalls, ClientErrorClassTest,
                         ::testing::Combine(::testing::ValuesIn(kErrorCases), ::testing::Range(0, 7)),
                         error_case_name);

TEST_F(ClientCallTest, TransportFailuresKeepCodeAndSent) {
  answer_once(transport_failure(errc::connection_failed, false, "Couldn't connect to server"));
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().sent);
  EXPECT_FALSE(r.error().status);
  EXPECT_EQ(r.error().detail, "Couldn't connect to server");

  answer_once(transport_failure(errc::timeout, true, "Operation timed out"));
  r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_TRUE(r.error().sent);
}

TEST_F(ClientCallTest, ErrorThrowsSystemErrorThroughValue) {
  answer_once(detail_answer(400, "Invalid keys format"));
  auto r = client->batch_exists({"k"});
  try {
    (void)r.value();
    FAIL() << "value() of an error must throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::invalid_request);
  }
}

// ---- protocol_error: a success that is not the expected shape ----

struct ShapeCase {
  const char* name;
  int call;  // 0 initialize, 1 allocate ["a","b"], 2 exists ["a","b"], 3 locations ["a","b"]
  const char* body;
};

const ShapeCase kShapeCases[] = {
    {"init_not_json", 0, "Rank 3 initialized"},
    {"init_no_message", 0, R"j({"msg":"x"})j"},
    {"init_array", 0, R"j(["x"])j"},
    {"alloc_not_json", 1, "{"},
    {"alloc_no_results", 1, R"j({"rank":3})j"},
    {"alloc_short", 1, R"j({"rank":3,"results":[["a",1]]})j"},
    {"alloc_long", 1, R"j({"rank":3,"results":[["a",1],["b",2],["c",3]]})j"},
    {"alloc_unknown_key", 1, R"j({"rank":3,"results":[["a",1],["z",2]]})j"},
    {"alloc_out_of_order", 1, R"j({"rank":3,"results":[["b",2],["a",1]]})j"},
    {"alloc_page_not_int", 1, R"j({"rank":3,"results":[["a","1"],["b",2]]})j"},
    {"alloc_not_pairs", 1, R"j({"rank":3,"results":["a","b"]})j"},
    {"exists_not_json", 2, ""},
    {"exists_missing", 2, R"j({})j"},
    {"exists_short", 2, R"j({"exists":[true]})j"},
    {"exists_long", 2, R"j({"exists":[true,false,true]})j"},
    {"exists_not_bool", 2, R"j({"exists":[1,0]})j"},
    {"locations_not_json", 3, "null"},
    {"locations_missing", 3, R"j({"exists":[1,2]})j"},
    {"locations_short", 3, R"j({"locations":[1]})j"},
    {"locations_long", 3, R"j({"locations":[1,null,2]})j"},
    {"locations_not_int", 3, R"j({"locations":["1",null]})j"},
};

class ClientShapeTest : public ClientCallTest, public ::testing::WithParamInterface<ShapeCase> {};

TEST_P(ClientShapeTest, MalformedSuccessIsProtocolError) {
  const auto& c = GetParam();
  answer_once(http_answer(200, c.body));
  std::optional<Error> error;
  switch (c.call) {
    case 0: {
      auto r = client->initialize(3, 8);
      ASSERT_FALSE(r);
      error = r.error();
      break;
    }
    case 1: {
      auto r = client->allocate(3, {"a", "b"});
      ASSERT_FALSE(r) << "got " << r.value().size() << " allocations";
      error = r.error();
      break;
    }
    case 2: {
      auto r = client->batch_exists({"a", "b"});
      ASSERT_FALSE(r);
      error = r.error();
      break;
    }
    default: {
      auto r = client->get_locations(3, {"a", "b"});
      ASSERT_FALSE(r);
      error = r.error();
      break;
    }
  }
  EXPECT_EQ(error->code, errc::protocol_error) << error->message();
  EXPECT_EQ(error->status, 200);
  EXPECT_TRUE(error->sent);
  EXPECT_FALSE(error->detail.empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClientShapeTest, ::testing::ValuesIn(kShapeCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- invalid_argument: refused before sending, nothing sent ----

// The StrictMock fails any test that reaches the transport.
TEST_F(ClientCallTest, RefusesBeforeSending) {
  struct Case {
    std::function<Result<void>(Client&)> call;
    std::string detail;
  };
  const auto drop = [](auto r) -> Result<void> {
    if (r) return boost::outcome_v2::success();
    return r.error();
  };
  const std::vector<Case> cases = {
      {[&](Client& c) { return drop(c.allocate(3, {"a", ""})); }, "keys[1]: empty key"},
      {[&](Client& c) { return drop(c.allocate(3, {"abc", "x", "abc"})); },
       "keys[2]: duplicate key 'abc' (also keys[0])"},
      {[&](Client& c) { return drop(c.allocate(3, std::vector<BlockKey>{{"a", "p"}, {"a", "q"}})); },
       "keys[1]: duplicate key 'a' (also keys[0])"},
      {[&](Client& c) { return drop(c.batch_exists({"a", ""})); }, "keys[1]: empty key"},
      {[&](Client& c) { return drop(c.get_locations(1, {""})); }, "keys[0]: empty key"},
      {[&](Client& c) { return c.confirm_write(3, {{"", 1}}); }, "confirmations[0]: empty key"},
      {[&](Client& c) { return c.confirm_write(3, {{"a", 1}, {"b", 2}, {"a", 3}}); },
       "confirmations[2]: duplicate key 'a' (also confirmations[0])"},
      {[&](Client& c) { return c.confirm_write(3, {{"a", 1}, {"b", 1}}); },
       "confirmations[1]: page 1 of key 'b' is also named by key 'a' (confirmations[0])"},
      {[&](Client& c) { return c.confirm_write(3, {}, {4, 5, 4}); },
       "pages_to_release[2]: duplicate page 4 (also pages_to_release[0])"},
      {[&](Client& c) { return c.confirm_write(3, {{"a", 1}, {"b", 5}}, {7, 5}); },
       "pages_to_release[1]: page 5 is also confirmed for key 'b' (confirmations[1])"},
      {[&](Client& c) { return c.confirm_write(3, {{"a", -1}}); }, "confirmations[0]: negative page -1"},
      {[&](Client& c) { return c.confirm_write(3, {}, {2, -5}); }, "pages_to_release[1]: negative page -5"},
      {[&](Client& c) { return drop(c.initialize(3, 0)); }, "num_pages: must be positive for a worker, got 0"},
      {[&](Client& c) { return drop(c.initialize(3, -4)); }, "num_pages: must be positive for a worker, got -4"},
      {[&](Client& c) { return drop(c.ensure_initialized(3, 0)); },
       "num_pages: must be positive for a worker, got 0"},
  };
  for (const auto& c : cases) {
    auto r = c.call(*client);
    ASSERT_FALSE(r) << c.detail;
    EXPECT_EQ(r.error().code, errc::invalid_argument) << c.detail;
    EXPECT_EQ(r.error().detail, c.detail);
    EXPECT_FALSE(r.error().sent);
    EXPECT_EQ(r.error().attempts, 0);
    EXPECT_FALSE(r.error().message().empty());
  }
}

// Large batches take the hashed path of the duplicate checks; the answer must be the same.
TEST_F(ClientCallTest, RefusesDuplicatesInLargeBatches) {
  std::vector<BlockKey> keys;
  // (operator+ on a literal trips g++ 12's -Wrestrict false positive; append instead.)
  const auto named = [](std::string_view stem, int i) { return std::string(stem).append(std::to_string(i)); };
  for (int i = 0; i < 100; ++i) keys.push_back(named("key", i));
  keys.push_back("key42");
  auto r = client->allocate(1, keys);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().detail, "keys[100]: duplicate key 'key42' (also keys[42])");

  std::vector<Confirmation> confirmations;
  std::vector<Page> releases;
  for (int i = 0; i < 40; ++i) confirmations.push_back({named("k", i), i});
  for (int i = 100; i < 140; ++i) releases.push_back(i);
  releases.push_back(17);
  auto c = client->confirm_write(1, confirmations, releases);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().detail, "pages_to_release[40]: page 17 is also confirmed for key 'k17' (confirmations[17])");

  releases.back() = 120;
  c = client->confirm_write(1, confirmations, releases);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().detail, "pages_to_release[40]: duplicate page 120 (also pages_to_release[20])");
}

TEST_F(ClientCallTest, SchedulerMayInitializeWithZeroPages) {
  answer_once(http_answer(200, R"j({"message":"Scheduler role does not require initialization"})j"));
  EXPECT_TRUE(client->initialize(0, 0, Role::scheduler));
}

TEST_F(ClientCallTest, EmptyBatchesAreSent) {
  answer_once(http_answer(200, R"j({"exists":[]})j"));
  auto r = client->batch_exists({});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r.value().empty());
}

// Client over a Connection: each call reaches the connection once, with Client's defaults filled in
// and the caller's CallOptions as given; the connection's answer comes back as it is, a failure
// included (so the calls without a value answer with an error, which a Client making up its own
// success would not pass on).
TEST(ClientOverConnectionTest, EveryCallReachesTheConnectionWithItsDefaults) {
  auto mock = std::make_shared<StrictMock<hf3fs_meta_mocks::MockConnection>>();
  const auto no_deadline = Field(&CallOptions::deadline, std::optional<std::chrono::milliseconds>());
  const auto deadline_7 = Field(&CallOptions::deadline, std::optional(std::chrono::milliseconds(7)));
  const auto failure = [](Operation operation, int status, std::string detail) {
    Error e;
    e.code = errc::server_error;
    e.operation = operation;
    e.status = status;
    e.detail = std::move(detail);
    return e;
  };
  StateStats stats;
  stats.ranks.push_back({3, RankStats{8, 7, 0, 1, 0, 0}});
  stats.keys_complete = 1;
  const DropOutcome dropped{true, 8, 1, 1};
  {
    ::testing::InSequence in_order;
    EXPECT_CALL(*mock, initialize(3, 8, Role::worker, no_deadline)).WillOnce(Return(std::string("ok")));
    EXPECT_CALL(*mock, ensure_initialized(4, 0, Role::scheduler, deadline_7)).WillOnce(Return(std::string("s")));
    EXPECT_CALL(*mock, register_rank(5, 2, Role::worker));
    EXPECT_CALL(*mock, allocate(3, ElementsAre(BlockKey("a"), BlockKey("b", "p")), no_deadline))
        .WillOnce(Return(std::vector<Page>{1, kNoPage}));
    EXPECT_CALL(*mock, confirm_write(3, ElementsAre(Confirmation{"a", 1}), ::testing::IsEmpty(), no_deadline))
        .WillOnce(Return(failure(Operation::confirm_write, 409, "confirm refused")));
    EXPECT_CALL(*mock, batch_exists(ElementsAre("a"), deadline_7)).WillOnce(Return(std::vector<bool>{true}));
    EXPECT_CALL(*mock, get_locations(3, ElementsAre("a"), no_deadline))
        .WillOnce(Return(std::vector<std::optional<Page>>{1}));
    EXPECT_CALL(*mock, delete_keys(ElementsAre("a", "z"), deadline_7)).WillOnce(Return(std::vector<bool>{true, false}));
    EXPECT_CALL(*mock, stats(no_deadline)).WillOnce(Return(stats));
    EXPECT_CALL(*mock, drop_rank(3, deadline_7)).WillOnce(Return(dropped));
    EXPECT_CALL(*mock, clear(no_deadline)).WillOnce(Return(failure(Operation::clear, 503, "clear refused")));
    EXPECT_CALL(*mock, raw(std::string_view("/x"), std::string_view("{}"), no_deadline))
        .WillOnce(Return(RawResponse{200, "application/json", "{}"}));
  }
  Client client(mock);
  const CallOptions seven{std::chrono::milliseconds(7)};
  EXPECT_EQ(client.initialize(3, 8).value(), "ok");
  EXPECT_EQ(client.ensure_initialized(4, 0, Role::scheduler, seven).value(), "s");
  client.register_rank(5, 2);
  EXPECT_EQ(client.allocate(3, {"a", {"b", "p"}}).value(), (std::vector<Page>{1, kNoPage}));
  const auto confirmed = client.confirm_write(3, {{"a", 1}});
  ASSERT_FALSE(confirmed);
  EXPECT_EQ(confirmed.error().operation, Operation::confirm_write);
  EXPECT_EQ(confirmed.error().status, 409);
  EXPECT_EQ(confirmed.error().detail, "confirm refused");
  EXPECT_EQ(client.batch_exists({"a"}, seven).value(), std::vector<bool>{true});
  EXPECT_EQ(client.get_locations(3, {"a"}).value(), (std::vector<std::optional<Page>>{1}));
  EXPECT_EQ(client.delete_keys({"a", "z"}, seven).value(), (std::vector<bool>{true, false}));
  const auto got = client.stats().value();
  ASSERT_EQ(got.ranks.size(), 1u);
  EXPECT_EQ(got.ranks[0].first, 3);
  EXPECT_EQ(got.ranks[0].second.free, 7);
  EXPECT_EQ(got.keys_complete, 1u);
  EXPECT_EQ(client.drop_rank(3, seven).value(), dropped);
  const auto cleared = client.clear();
  ASSERT_FALSE(cleared);
  EXPECT_EQ(cleared.error().operation, Operation::clear);
  EXPECT_EQ(cleared.error().status, 503);
  EXPECT_EQ(cleared.error().detail, "clear refused");
  EXPECT_EQ(client.raw("/x", "{}").value().body, "{}");
}

// Copies share the connection (and so its registered ranks, budget and transport).
TEST(ClientOverConnectionTest, CopiesShareTheConnection) {
  auto mock = std::make_shared<StrictMock<hf3fs_meta_mocks::MockConnection>>();
  EXPECT_CALL(*mock, clear(_)).Times(2).WillRepeatedly(Return(boost::outcome_v2::success()));
  Client first(mock);
  Client second = first;
  EXPECT_TRUE(first.clear());
  EXPECT_TRUE(second.clear());
}

TEST(ClientOverConnectionTest, ANullConnectionIsRefusedAtConstruction) {
  EXPECT_THROW(Client(std::shared_ptr<Connection>()), std::invalid_argument);
}

// NiceMock: a call nobody set up is not a test failure by itself, and answers an error naming the
// method rather than a value the code under test would trust.
TEST(ClientOverConnectionTest, AnUnsetCallOfANiceMockAnswersAnErrorNamingIt) {
  auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
  Client client(mock);
  auto a = client.allocate(3, {"a"});
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().operation, Operation::allocate);
  EXPECT_EQ(a.error().detail, "MockConnection::allocate: no expectation or default action was set");
  auto c = client.clear();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().operation, Operation::clear);
  client.register_rank(1, 1);  // void: nothing to answer
}

}  // namespace
}  // namespace hf3fs_meta
