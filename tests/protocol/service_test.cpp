// Service: every route, error, defect and deviation of docs/protocol.md that a
// (method, target, body) -> answer function can show, with the exact status and body, and the state
// left unchanged by every refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/service.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::StartsWith;

// Everything observable about the state, to show that a refusal changed nothing.
using Snapshot = std::tuple<std::vector<std::tuple<Rank, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                   std::int64_t, std::uint64_t>>,
                            std::size_t, std::size_t>;

Snapshot snapshot(const MetadataState& state) {
  std::vector<std::tuple<Rank, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::uint64_t>>
      ranks;
  for (const auto& [rank, s] : state.all_rank_stats()) {
    ranks.emplace_back(rank, s.num_pages, s.free, s.allocated, s.mapped, s.orphaned, s.kept_on_release);
  }
  return {ranks, state.key_count(), state.rank_count()};
}

class ServiceTest : public ::testing::Test {
 protected:
  ServiceAnswer post(std::string_view target, std::string_view body) { return service_.handle("POST", target, body); }

  // A JSON answer with this status and exactly this body.
  void expect_json(const ServiceAnswer& a, int status, std::string_view body) {
    EXPECT_EQ(a.status, status) << a.body;
    EXPECT_EQ(a.content_type, "application/json");
    EXPECT_EQ(a.body, body);
  }
  void expect_no_content(const ServiceAnswer& a) {
    EXPECT_EQ(a.status, 204) << a.body;
    EXPECT_EQ(a.content_type, "");
    EXPECT_EQ(a.body, "");
  }
  // A refusal: status and exact body, and nothing changed.
  void expect_refused(std::string_view target, std::string_view body, int status, std::string_view answer) {
    const Snapshot before = snapshot(state_);
    const ServiceAnswer a = post(target, body);
    expect_json(a, status, answer);
    EXPECT_EQ(snapshot(state_), before) << "state changed by " << target << " " << body;
  }
  void expect_refused_detail(std::string_view target, std::string_view body, int status, std::string_view detail) {
    expect_refused(target, body, status, protocol::encode_detail(detail));
  }

  void init(Rank rank, std::int64_t pages) {
    ASSERT_EQ(post(request_path(Route::initialize, rank), R"({"num_pages":)" + std::to_string(pages) + "}").status, 200);
  }
  // Allocates and confirms `key` on `rank`, returning its page.
  Page write(Rank rank, const std::string& key) {
    const std::vector<BlockKey> keys{{key, ""}};
    const ServiceAnswer a = post(path_of(Route::batch_allocate), protocol::encode_allocate_request(rank, keys));
    EXPECT_EQ(a.status, 200) << a.body;
    auto decoded = protocol::decode_allocate_response(a.body, keys);
    EXPECT_TRUE(decoded) << a.body;
    if (!decoded) return kNoPage;
    const Page page = decoded.value()[0];
    const std::vector<Confirmation> confirmations{{key, page}};
    expect_no_content(post(path_of(Route::confirm_write), protocol::encode_confirm_write_request(rank, confirmations, {})));
    return page;
  }

  MetadataState state_;
  Service service_{state_};
};

// ---- Endpoints ----

TEST_F(ServiceTest, InitializeWorker) {
  const ServiceAnswer a = post("/rank/3/initialize", R"({"num_pages": 1024, "role": "worker"})");
  expect_json(a, 200, R"({"message":"Rank 3 initialized with 1024 pages"})");
  ASSERT_TRUE(state_.rank_stats(3));
  EXPECT_EQ(state_.rank_stats(3)->num_pages, 1024);
}

TEST_F(ServiceTest, InitializeIsIdempotentAndEchoesTheRequestedCount) {
  init(3, 8);
  expect_json(post("/rank/3/initialize", R"({"num_pages":16})"), 200, R"({"message":"Rank 3 initialized with 16 pages"})");
  EXPECT_EQ(state_.rank_stats(3)->num_pages, 8);
  expect_json(post("/rank/-4/initialize", R"({"num_pages":1})"), 200, R"({"message":"Rank -4 initialized with 1 pages"})");
}

TEST_F(ServiceTest, InitializeSchedulerChangesNothingAndIgnoresNumPages) {
  for (const char* body : {R"({"role":"scheduler"})", R"({"role":"scheduler","num_pages":0})",
                           R"({"role":"scheduler","num_pages":"lots"})", R"({"role":"scheduler","num_pages":null})",
                           R"({"num_pages":-1,"role":"scheduler"})"}) {
    expect_refused("/rank/5/initialize", body, 200, R"({"message":"Scheduler role does not require initialization"})");
  }
  EXPECT_EQ(state_.rank_count(), 0u);
}

TEST_F(ServiceTest, AllocateInRequestOrderEchoingTheRank) {
  init(3, 4);
  const ServiceAnswer a = post("/keys/batch_allocate", R"({"rank": 3, "keys": [["k", ""], ["j", "p"]]})");
  expect_json(a, 200, R"({"rank":3,"results":[["k",0],["j",1]]})");
  expect_json(post("/keys/batch_allocate", R"({"rank":3})"), 200, R"({"rank":3,"results":[]})");
}

TEST_F(ServiceTest, AllocateShortPoolTakesNothingButCompleteKeysGetTheirPage) {
  init(0, 2);
  const Page page = write(0, "done");
  const Snapshot before = snapshot(state_);
  expect_json(post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""],["done",""],["b",""]]})"), 200,
              R"({"rank":0,"results":[["a",-1],["done",)" + std::to_string(page) + R"(],["b",-1]]})");
  EXPECT_EQ(snapshot(state_), before);
}

TEST_F(ServiceTest, ConfirmWriteThenExistsAndLocations) {
  init(0, 4);
  init(1, 4);
  expect_json(post("/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})"), 200, R"({"rank":0,"results":[["k",0]]})");
  const ServiceAnswer confirm = post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]],"pages_to_release":[]})");
  expect_no_content(confirm);
  // Two ranks were initialized when k was first seen: not complete until both confirm.
  expect_json(post("/keys/batch_exists", R"({"keys":["k","x"]})"), 200, R"({"exists":[false,false]})");
  expect_json(post("/keys/get_locations", R"({"rank":0,"keys":["k","x"]})"), 200, R"({"locations":[null,null]})");
  write(1, "k");
  const ServiceAnswer exists = post("/keys/batch_exists", R"({"keys":["k","x"]})");
  expect_json(exists, 200, R"({"exists":[true,false]})");
  const ServiceAnswer locations = post("/keys/get_locations", R"({"rank":0,"keys":["k","x"]})");
  expect_json(locations, 200, R"({"locations":[0,null]})");
  expect_json(post("/keys/batch_exists", "{}"), 200, R"({"exists":[]})");
  expect_json(post("/keys/get_locations", R"({"rank":1})"), 200, R"({"locations":[]})");
}

TEST_F(ServiceTest, ConfirmWriteDefaultsAndReleases) {
  init(0, 4);
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""],["b",""]]})");
  expect_no_content(post("/keys/confirm_write", R"({"rank":0,"pages_to_release":[1]})"));
  EXPECT_EQ(state_.rank_stats(0)->free, 3);
  expect_no_content(post("/keys/confirm_write", R"({"rank":0})"));
}

TEST_F(ServiceTest, ClearForgetsEverythingAndNeverReadsTheBody) {
  init(0, 4);
  write(0, "k");
  for (const char* body : {"", "not json", "[]", R"({"x":1})"}) {
    const ServiceAnswer a = post("/clear", body);
    expect_no_content(a);
    EXPECT_EQ(state_.rank_count(), 0u);
    EXPECT_EQ(state_.key_count(), 0u);
  }
}

TEST_F(ServiceTest, NonAsciiKeysStayUtf8) {
  init(0, 2);
  expect_json(post("/keys/batch_allocate", "{\"rank\":0,\"keys\":[[\"cl\\u00e9\",\"\"],[\"\xE2\x80\x94\\\"\",\"\"]]}"), 200,
              "{\"rank\":0,\"results\":[[\"cl\xC3\xA9\",0],[\"\xE2\x80\x94\\\"\",1]]}");
}

// ---- Errors as vLLM answers them ----

TEST_F(ServiceTest, RankNotInitialized) {
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":[["k",""]]})", 500,
                        "Allocation failed: Rank 3 not initialized");
  expect_refused_detail("/keys/get_locations", R"({"rank":4,"keys":["k"]})", 500,
                        "Failed to get key locations: Rank 4 not initialized");
  expect_refused_detail("/keys/confirm_write", R"({"rank":9,"confirmations":[],"pages_to_release":[1]})", 500,
                        "Confirmation failed: 9");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":-2,"keys":[]})", 500,
                        "Allocation failed: Rank -2 not initialized");
}

TEST_F(ServiceTest, RankForgottenAfterClear) {
  init(3, 4);
  post("/clear", "");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":[["k",""]]})", 500,
                        "Allocation failed: Rank 3 not initialized");
}

TEST_F(ServiceTest, ConfirmWriteOnMissingRankAppliesNothing) {
  // Deviation: vLLM applies the confirmations (204 when there are no releases).
  init(0, 4);
  expect_refused_detail("/keys/confirm_write", R"({"rank":9,"confirmations":[["k",0]]})", 500, "Confirmation failed: 9");
  expect_refused_detail("/keys/confirm_write", R"({"rank":9,"confirmations":[["k",0]],"pages_to_release":[0]})", 500,
                        "Confirmation failed: 9");
  EXPECT_EQ(state_.key_count(), 0u);
  // With nothing to apply, vLLM answers 204 and so do we.
  expect_no_content(post("/keys/confirm_write", R"({"rank":9,"confirmations":[],"pages_to_release":[]})"));
}

TEST_F(ServiceTest, VllmFormatRefusalsKeepTheirText) {
  init(3, 4);
  const std::string keys = "Invalid request format: need 'rank' and 'keys'";
  for (const char* body : {R"({"keys":[]})", R"({"rank":null,"keys":[]})", R"({"rank":3,"keys":"k"})",
                           R"({"rank":3,"keys":{"k":""}})", R"({"rank":3,"keys":null})"}) {
    expect_refused_detail("/keys/batch_allocate", body, 400, keys);
    expect_refused_detail("/keys/get_locations", body, 400, keys);
  }
  const std::string confirmations = "Invalid request format: need 'rank' and 'confirmations'";
  for (const char* body : {R"({"confirmations":[]})", R"({"rank":null})", R"({"rank":3,"confirmations":"x"})",
                           R"({"rank":3,"confirmations":null})"}) {
    expect_refused_detail("/keys/confirm_write", body, 400, confirmations);
  }
  for (const char* body : {R"({"keys":"k"})", R"({"keys":null})", R"({"keys":{}})"}) {
    expect_refused_detail("/keys/batch_exists", body, 400, "Invalid keys format");
  }
  for (const char* body : {R"({"num_pages":0})", R"({"num_pages":-1,"role":"worker"})", R"({})",
                           R"({"num_pages":4,"role":"admin"})", R"({"num_pages":4,"role":null})"}) {
    expect_refused_detail("/rank/7/initialize", body, 400, "Invalid initialization parameters");
  }
}

TEST_F(ServiceTest, MalformedKeysAreRefusedWithoutLosingPages) {
  // vLLM: 500 "too many values to unpack" and friends, after taking pages it never gives back.
  init(3, 8);
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":["blk1"]})", 400,
                        "keys[0]: expected a [key, prefix_key] pair of strings");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":[["a",""],["blk1"]]})", 400,
                        "keys[1]: expected a [key, prefix_key] pair of strings");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":[7]})", 400,
                        "keys[0]: expected a [key, prefix_key] pair of strings");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":3,"keys":["ab"]})", 400,
                        "keys[0]: expected a [key, prefix_key] pair of strings");
  EXPECT_EQ(state_.rank_stats(3)->free, 8);
}

TEST_F(ServiceTest, DuplicateKeyInOneBatchIsRefused) {
  init(3, 8);
  const Snapshot before = snapshot(state_);
  const ServiceAnswer a = post("/keys/batch_allocate", R"({"rank":3,"keys":[["a",""],["b",""],["a",""]]})");
  EXPECT_EQ(a.status, 400);
  EXPECT_THAT(a.body, StartsWith(R"({"detail":"keys[2]: duplicate key)"));
  EXPECT_EQ(snapshot(state_), before);
}

TEST_F(ServiceTest, MistypedRanksAreRefused) {
  // vLLM: "3" is another rank (500 "Rank 3 not initialized" even when rank 3 exists); true and 1.0 are rank 1.
  init(1, 4);
  init(3, 4);
  expect_refused_detail("/keys/batch_allocate", R"({"rank":"3","keys":[]})", 400, "rank: expected an integer");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":true,"keys":[["k",""]]})", 400, "rank: expected an integer");
  expect_refused_detail("/keys/get_locations", R"({"rank":1.0,"keys":[]})", 400, "rank: expected an integer");
  expect_refused_detail("/keys/confirm_write", R"({"rank":true,"confirmations":[["k",0]]})", 400,
                        "rank: expected an integer");
  expect_refused_detail("/keys/batch_allocate", R"({"rank":9223372036854775808,"keys":[]})", 400,
                        "rank: out of range for a 64-bit integer");
}

TEST_F(ServiceTest, MalformedConfirmationsAndReleases) {
  init(0, 4);
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})");
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["a"]]})", 400,
                        "confirmations[0]: expected a [key, page] pair of a string and an integer");
  // vLLM applies the confirmations, then fails with "'int' object is not iterable".
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0]],"pages_to_release":5})", 400,
                        "pages_to_release: expected a list of integers");
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0]],"pages_to_release":["1"]})", 400,
                        "pages_to_release[0]: expected an integer");
}

TEST_F(ServiceTest, PagesOutsideTheRankAreRefused) {
  init(0, 4);
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})");
  for (const char* body : {R"({"rank":0,"pages_to_release":[99]})", R"({"rank":0,"pages_to_release":[-5]})",
                           R"({"rank":0,"confirmations":[["a",0]],"pages_to_release":[1,4]})",
                           R"({"rank":0,"confirmations":[["a",4]]})", R"({"rank":0,"confirmations":[["a",-1]]})"}) {
    const Snapshot before = snapshot(state_);
    const ServiceAnswer a = post("/keys/confirm_write", body);
    EXPECT_EQ(a.status, 400) << body;
    EXPECT_THAT(a.body, StartsWith(R"({"detail":")")) << body;
    EXPECT_EQ(snapshot(state_), before) << body;
  }
}

TEST_F(ServiceTest, UnhashableKeysAreRefused) {
  expect_refused_detail("/keys/batch_exists", R"({"keys":["a",["b"]]})", 400, "keys[1]: expected a string");
  init(0, 1);
  expect_refused_detail("/keys/get_locations", R"({"rank":0,"keys":[{"a":1}]})", 400, "keys[0]: expected a string");
}

TEST_F(ServiceTest, BodiesThatAreNotJsonObjects) {
  // vLLM: 500 "Internal Server Error", text/plain.
  init(0, 4);
  for (const char* target : {"/keys/batch_allocate", "/keys/confirm_write", "/keys/batch_exists",
                             "/keys/get_locations", "/rank/0/initialize"}) {
    for (const char* body : {"", "not json", "{\"rank\":", "[1,2]", "3", "null"}) {
      const Snapshot before = snapshot(state_);
      const ServiceAnswer a = post(target, body);
      EXPECT_EQ(a.status, 400) << target << " " << body;
      EXPECT_EQ(a.content_type, "application/json");
      EXPECT_THAT(a.body, StartsWith(R"({"detail":"body: expected a JSON object)")) << target << " " << body;
      EXPECT_EQ(snapshot(state_), before);
    }
  }
}

TEST_F(ServiceTest, WorkerNumPagesOfTheWrongType) {
  for (const char* body : {R"({"num_pages":"8"})", R"({"num_pages":null})", R"({"num_pages":8.0})",
                           R"({"num_pages":true,"role":"worker"})"}) {
    expect_refused_detail("/rank/2/initialize", body, 400, "num_pages: expected an integer");
  }
  EXPECT_EQ(state_.rank_count(), 0u);
}

TEST_F(ServiceTest, NumPagesAboveTheMaximum) {
  const std::int64_t max = state_.options().max_pages;
  expect_refused_detail("/rank/2/initialize", R"({"num_pages":)" + std::to_string(max + 1) + "}", 400,
                        "Invalid initialization parameters: num_pages " + std::to_string(max + 1) +
                            " is above the maximum " + std::to_string(max));
  expect_refused_detail("/rank/2/initialize", R"({"num_pages":1000000000000})", 400,
                        "Invalid initialization parameters: num_pages 1000000000000 is above the maximum " +
                            std::to_string(max));
}

// ---- Paths and methods ----

TEST_F(ServiceTest, PathRankThatIsNotAPlainInteger) {
  for (const auto& [target, input] : std::vector<std::pair<std::string, std::string>>{
           {"/rank/abc/initialize", "abc"},
           {"/rank/+5/initialize", "+5"},
           {"/rank/%207/initialize", " 7"},
           {"/rank/1_0/initialize", "1_0"},
           {"/rank/10**23/initialize", "10**23"},
           {"/rank/99999999999999999999/initialize", "99999999999999999999"},
           {"/rank/1.0/initialize", "1.0"},
           {"/rank/%22q%22/initialize", "\"q\""},
           {"/rank/%FF/initialize", "\xEF\xBF\xBD"}}) {
    const ServiceAnswer a = post(target, R"({"num_pages":4})");
    expect_json(a, 422, protocol::encode_path_rank_validation_error(input));
    EXPECT_EQ(Service::route("POST", target).route, Route::initialize);
  }
  EXPECT_EQ(state_.rank_count(), 0u);
  expect_json(post("/rank/abc/initialize", R"({"num_pages":4})"), 422,
              R"({"detail":[{"type":"int_parsing","loc":["path","rank"],"msg":"Input should be a valid integer, unable to parse string as an integer","input":"abc"}]})");
}

TEST_F(ServiceTest, UnknownPath) {
  for (const char* target : {"/", "/keys", "/keys/batch_allocated", "/rank/3", "/rank//initialize",
                             "/rank/1/2/initialize", "/KEYS/batch_exists", "keys/batch_exists", "/healthz", "/metrics",
                             "/_faults"}) {
    const ServiceAnswer a = post(target, "{}");
    expect_json(a, 404, R"({"detail":"Not Found"})");
    EXPECT_EQ(Service::route("POST", target).route, Route::not_found) << target;
  }
  expect_json(service_.handle("GET", "/healthz", ""), 404, R"({"detail":"Not Found"})");
}

TEST_F(ServiceTest, OtherMethodsOnARoute) {
  init(0, 1);
  for (const char* method : {"GET", "PUT", "DELETE", "HEAD", "post", "PATCH"}) {
    for (const char* target : {"/keys/batch_allocate", "/clear", "/rank/0/initialize", "/rank/abc/initialize"}) {
      const Snapshot before = snapshot(state_);
      const ServiceAnswer a = service_.handle(method, target, "{}");
      expect_json(a, 405, R"({"detail":"Method Not Allowed"})");
      EXPECT_EQ(a.allow, "POST");
      EXPECT_EQ(Service::route(method, target).route, Route::method_not_allowed);
      EXPECT_EQ(snapshot(state_), before) << method << " " << target;
    }
  }
}

TEST_F(ServiceTest, TrailingSlashRedirects) {
  init(0, 1);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"POST", "/clear/", "/clear"},
      {"GET", "/keys/batch_allocate/", "/keys/batch_allocate"},
      {"POST", "/keys/confirm_write//", "/keys/confirm_write"},
      {"POST", "/rank/3/initialize/", "/rank/3/initialize"},
      {"POST", "/rank/abc/initialize/", "/rank/abc/initialize"},
      {"POST", "/keys/batch_exists/?a=1&b=2", "/keys/batch_exists?a=1&b=2"},
      {"POST", "/keys/get_locations/?", "/keys/get_locations"},
  };
  for (const auto& [method, target, location] : cases) {
    const Snapshot before = snapshot(state_);
    const ServiceAnswer a = service_.handle(method, target, "{}");
    EXPECT_EQ(a.status, 307) << target;
    EXPECT_EQ(a.body, "");
    EXPECT_EQ(a.content_type, "");
    EXPECT_EQ(a.location, location);
    EXPECT_EQ(Service::route(method, target).route, Route::redirect);
    EXPECT_EQ(snapshot(state_), before) << target;
  }
  EXPECT_EQ(post("/unknown/", "{}").status, 404);
  EXPECT_EQ(post("/rank//initialize/", "{}").status, 404);
}

TEST_F(ServiceTest, QueryStringAndPercentEncodingAreRouted) {
  expect_json(post("/rank/3/initialize?verbose=1", R"({"num_pages":2})"), 200,
              R"({"message":"Rank 3 initialized with 2 pages"})");
  expect_json(post("/keys/batch%5Fallocate?x", R"({"rank":3,"keys":[["k",""]]})"), 200,
              R"({"rank":3,"results":[["k",0]]})");
  expect_json(post("/rank/%34/initialize", R"({"num_pages":2})"), 200, R"({"message":"Rank 4 initialized with 2 pages"})");
  EXPECT_EQ(post("/keys/batch_exists%", "{}").status, 404);
}

TEST(RouteTest, RouteOf) {
  EXPECT_EQ(Service::route("POST", "/rank/3/initialize").route, Route::initialize);
  EXPECT_EQ(Service::route("POST", "/rank/x/initialize").route, Route::initialize);
  EXPECT_EQ(Service::route("POST", "/keys/batch_allocate").route, Route::batch_allocate);
  EXPECT_EQ(Service::route("POST", "/keys/confirm_write?q=1").route, Route::confirm_write);
  EXPECT_EQ(Service::route("POST", "/keys/batch_exists").route, Route::batch_exists);
  EXPECT_EQ(Service::route("POST", "/keys/get_locations").route, Route::get_locations);
  EXPECT_EQ(Service::route("POST", "/clear").route, Route::clear);
  EXPECT_EQ(Service::route("POST", "/clear/").route, Route::redirect);
  EXPECT_EQ(Service::route("GET", "/clear/").route, Route::redirect);
  EXPECT_EQ(Service::route("GET", "/clear").route, Route::method_not_allowed);
  EXPECT_EQ(Service::route("POST", "/nope").route, Route::not_found);
  EXPECT_EQ(Service::route("GET", "/healthz").route, Route::not_found);
  EXPECT_EQ(Service::route("POST", "/keys/delete").route, Route::delete_keys);
  EXPECT_EQ(Service::route("GET", "/keys/delete").route, Route::method_not_allowed);
  EXPECT_EQ(Service::route("GET", "/stats").route, Route::stats);
  EXPECT_EQ(Service::route("POST", "/stats").route, Route::method_not_allowed);
  EXPECT_EQ(Service::route("GET", "/stats/").route, Route::redirect);
}

TEST(RouteTest, RoutedTargetKeepsWhatTheHandlerNeeds) {
  const RoutedTarget encoded = Service::route("POST", "/rank/%34%32/initialize?x=1");
  EXPECT_EQ(encoded.route, Route::initialize);
  EXPECT_EQ(encoded.raw, "/rank/%34%32/initialize");
  EXPECT_EQ(encoded.path(), "/rank/42/initialize");
  EXPECT_EQ(encoded.rank_segment(), "42");
  EXPECT_EQ(encoded.query, "x=1");
  const RoutedTarget other_method = Service::route("GET", "/keys/batch_exists");
  EXPECT_EQ(other_method.route, Route::method_not_allowed);
  EXPECT_EQ(other_method.endpoint, Route::batch_exists);
  // A target reused for another request forgets the first.
  RoutedTarget reused = Service::route("POST", "/rank/%37/initialize");
  Service::route("POST", "/clear", reused);
  EXPECT_EQ(reused.route, Route::clear);
  EXPECT_EQ(reused.path(), "/clear");
  EXPECT_EQ(reused.rank_segment(), "");
}

// The table's own consistency: what every reader of it assumes.
TEST(RouteTest, TableRows) {
  std::set<std::string_view> names, prefixes;
  std::set<Operation> operations;
  for (const RouteInfo& row : kRoutes) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    if (!row.is_endpoint()) {
      EXPECT_TRUE(row.method.empty()) << row.name;
      EXPECT_EQ(row.operation, Operation::raw) << row.name;
      continue;
    }
    EXPECT_FALSE(row.method.empty()) << row.name;
    EXPECT_NE(row.operation, Operation::raw) << row.name;
    EXPECT_TRUE(operations.insert(row.operation).second) << row.name;
    EXPECT_EQ(route_of(row.operation), &row) << row.name;
    if (!row.failure_prefix.empty()) {
      EXPECT_TRUE(prefixes.insert(row.failure_prefix).second) << row.name;
      EXPECT_NE(row.failure_code, errc::server_error) << row.name;
    }
    if (row.missing_rank != MissingRank::plain) {
      EXPECT_FALSE(row.failure_prefix.empty()) << row.name;
    }
  }
  EXPECT_EQ(route_of(Operation::raw), nullptr);
}

TEST(RouteTest, NamesAndCount) {
  EXPECT_EQ(to_string(Route::initialize), "/rank/{rank}/initialize");
  EXPECT_EQ(to_string(Route::batch_allocate), "/keys/batch_allocate");
  EXPECT_EQ(to_string(Route::confirm_write), "/keys/confirm_write");
  EXPECT_EQ(to_string(Route::batch_exists), "/keys/batch_exists");
  EXPECT_EQ(to_string(Route::get_locations), "/keys/get_locations");
  EXPECT_EQ(to_string(Route::clear), "/clear");
  EXPECT_EQ(to_string(Route::delete_keys), "/keys/delete");
  EXPECT_EQ(to_string(Route::stats), "/stats");
  EXPECT_EQ(to_string(Route::drop_rank), "/rank/{rank}/drop");
  EXPECT_EQ(to_string(Route::namespaces), "/namespaces");
  EXPECT_EQ(to_string(Route::drop_namespace), "/namespaces/{name}/drop");
  EXPECT_EQ(to_string(Route::key_status), "/keys/status");
  EXPECT_EQ(to_string(Route::redirect), "redirect");
  EXPECT_EQ(to_string(Route::method_not_allowed), "method_not_allowed");
  EXPECT_EQ(to_string(Route::not_found), "not_found");
  EXPECT_EQ(kRouteCount, 15u);
}

// ---- Robustness ----

// Valid requests with random bytes changed, dropped or inserted: every answer is a JSON answer of
// the protocol's statuses, and every refusal leaves the state as it was.
TEST_F(ServiceTest, MutatedRequestsNeverCorruptTheState) {
  init(0, 64);
  init(1, 64);
  write(0, "w0");
  write(1, "w0");
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["pending",""]]})");
  const std::vector<std::pair<std::string, std::string>> seeds{
      {"/keys/batch_allocate", R"({"rank": 0, "keys": [["a", ""], ["b", "p"]]})"},
      {"/keys/confirm_write", R"({"rank":0,"confirmations":[["pending",1]],"pages_to_release":[2,3]})"},
      {"/keys/batch_exists", R"({"keys":["w0","x"]})"},
      {"/keys/get_locations", R"({"rank":1,"keys":["w0","x"]})"},
      {"/rank/2/initialize", R"({"num_pages":8,"role":"worker"})"},
  };
  const char noise[] = "{}[],:\"\\ 0123456789-.eEtrufalsn\x01\xC3\xA9\xFF";
  std::uint64_t seed = 7;
  const auto next = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(seed >> 33);
  };
  for (int round = 0; round < 3000; ++round) {
    const auto& [target, original] = seeds[next() % seeds.size()];
    std::string body = original;
    for (std::uint32_t edits = 1 + next() % 3; edits > 0 && !body.empty(); --edits) {
      const std::size_t at = next() % body.size();
      switch (next() % 3) {
        case 0: body[at] = noise[next() % (sizeof noise - 1)]; break;
        case 1: body.erase(at, 1); break;
        default: body.insert(at, 1, noise[next() % (sizeof noise - 1)]);
      }
    }
    const Snapshot before = snapshot(state_);
    const ServiceAnswer a = post(target, body);
    ASSERT_TRUE(a.status == 200 || a.status == 204 || a.status == 400 || a.status == 409 || a.status == 500)
        << a.status << " for " << target << " " << body;
    if (a.status >= 400) {
      EXPECT_EQ(a.content_type, "application/json");
      EXPECT_THAT(a.body, StartsWith(R"({"detail":")"));
      EXPECT_EQ(snapshot(state_), before) << target << " " << body << " -> " << a.body;
    }
    // The answer is always valid JSON for the client's own decoders to read.
    if (a.status >= 400) {
      EXPECT_NE(protocol::classify_error(a.status, a.content_type, a.body).detail, "") << a.body;
    }
  }
}

// ---- Extensions: POST /keys/delete, GET /stats ----

TEST_F(ServiceTest, DeleteRemovesKeysFromEveryLookupAndFreesTheirPages) {
  init(0, 2);
  init(1, 2);
  write(0, "a");
  write(1, "a");
  write(0, "b");  // incomplete: two ranks, confirmed on one
  expect_json(post("/keys/delete", R"({"keys":["a","zz","a","b"]})"), 200, R"({"deleted":[true,false,false,true]})");
  expect_json(post("/keys/batch_exists", R"({"keys":["a","b"]})"), 200, R"({"exists":[false,false]})");
  expect_json(post("/keys/get_locations", R"({"rank":1,"keys":["a"]})"), 200, R"({"locations":[null]})");
  EXPECT_EQ(state_.key_count(), 0u);
  for (Rank rank : {0, 1}) EXPECT_EQ(state_.rank_stats(rank)->free, 2) << rank;
  expect_json(post("/keys/delete", R"({"keys":[]})"), 200, R"({"deleted":[]})");
}

TEST_F(ServiceTest, DeleteRefusesWhatBatchExistsRefusesAndChangesNothing) {
  init(0, 2);
  write(0, "a");
  expect_refused_detail("/keys/delete", R"({"keys":5})", 400, "Invalid keys format");
  expect_refused_detail("/keys/delete", R"({"keys":["a",7]})", 400, "keys[1]: expected a string");
  expect_refused_detail("/keys/delete", "[1]", 400, "body: expected a JSON object");
}

TEST_F(ServiceTest, StatsNameEveryFigure) {
  init(0, 4);
  write(0, "a");
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["b",""]]})");
  post("/keys/delete", R"({"keys":["a"]})");
  const ServiceAnswer a = service_.handle("GET", "/stats", "");
  expect_json(a, 200,
              R"({"ranks":[{"rank":0,"num_pages":4,"free":3,"allocated":1,"mapped":0,"orphaned":0,"draining":0,)"
              R"("kept_on_release":0}],"keys_complete":0,"keys_incomplete":0,"keys_leased":0,"key_records":1,)"
              R"("evicted_keys":0,"deleted_keys":1,"reclaimed_keys":0,"reclaimed_allocated_pages":0,)"
              R"("reclaimed_orphaned_pages":0})");
  // What the client reads back is what the state says.
  auto decoded = protocol::decode_stats_response(a.body);
  ASSERT_TRUE(decoded) << decoded.error().message;
  const StateStats expected = state_.stats();
  ASSERT_EQ(decoded.value().ranks.size(), 1u);
  EXPECT_EQ(decoded.value().ranks[0].second.free, expected.ranks[0].second.free);
  EXPECT_EQ(decoded.value().ranks[0].second.allocated, expected.ranks[0].second.allocated);
  EXPECT_EQ(decoded.value().deleted_keys, expected.deleted_keys);
  EXPECT_EQ(decoded.value().key_records, expected.key_records);
}

// ---- Deliberate deviations: confirm_write ----

TEST_F(ServiceTest, SamePageForTwoKeysInOneCall) {
  init(0, 4);
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""],["b",""]]})");
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0],["b",0]]})", 409,
                        "Confirmation failed: page 0 of key b is mapped to key a on rank 0");
}

TEST_F(ServiceTest, StaleConfirmation) {
  init(0, 4);
  // Page 2 was never allocated: it is free.
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",2]]})", 409,
                        "Confirmation failed: page 2 of key k is not allocated on rank 0");
  // Allocated before a clear, confirmed after the rank came back.
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})");
  post("/clear", "");
  init(0, 4);
  expect_refused_detail("/keys/confirm_write", R"({"rank":0,"confirmations":[["k",0]]})", 409,
                        "Confirmation failed: page 0 of key k is not allocated on rank 0");
}

TEST_F(ServiceTest, ConfirmAPageAnotherKeyMaps) {
  init(0, 4);
  const Page page = write(0, "a");
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["b",""]]})");
  expect_refused_detail("/keys/confirm_write",
                        R"({"rank":0,"confirmations":[["b",)" + std::to_string(page) + "]]}", 409,
                        "Confirmation failed: page " + std::to_string(page) + " of key b is mapped to key a on rank 0");
}

TEST_F(ServiceTest, ReleaseOfAMappedPageIsKept) {
  init(0, 4);
  const Page mapped = write(0, "a");  // page 0
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["b",""]]})");  // page 1, allocated
  const ServiceAnswer a = post("/keys/confirm_write", R"({"rank":0,"pages_to_release":[0,1]})");
  expect_no_content(a);
  EXPECT_EQ(state_.page_state(0, mapped), PageState::mapped);
  EXPECT_EQ(state_.page_state(0, 1), PageState::free);
  EXPECT_EQ(state_.rank_stats(0)->kept_on_release, 1u);
}

TEST_F(ServiceTest, ReconfirmOrphansThePreviousPage) {
  // Kept for compatibility: the same key twice in one call, the last page wins.
  init(0, 4);
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})");
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})");  // incomplete: a second page
  expect_no_content(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["a",0],["a",1]]})"));
  EXPECT_EQ(state_.page_state(0, 0), PageState::orphaned);
  expect_json(post("/keys/get_locations", R"({"rank":0,"keys":["a"]})"), 200, R"({"locations":[1]})");
}

// --max-key-bytes (StateOptions::max_key_bytes, 1024 by default): a longer key is a 400 naming its
// field and index on every route that takes keys, nothing applied; a key of the limit passes.
TEST_F(ServiceTest, KeysLongerThanTheLimitAreRefusedOnEveryRoute) {
  init(0, 4);
  const std::string fits(1024, 'k');
  const std::string over(1025, 'k');
  const std::string tail = ": a key of 1025 bytes, above the limit of 1024 (--max-key-bytes)";
  post("/keys/batch_allocate", R"({"rank":0,"keys":[["a",""]]})");  // page 0, for the confirm below
  expect_refused_detail("/keys/batch_allocate", R"({"rank":0,"keys":[["b",""],[")" + over + R"(",""]]})", 400,
                        "keys[1][0]" + tail);
  expect_refused_detail("/keys/batch_allocate", R"({"rank":0,"keys":[["b",")" + over + R"("]]})", 400,
                        "keys[0][1]" + tail);
  expect_refused_detail("/keys/confirm_write",
                        R"({"rank":0,"confirmations":[["a",0],[")" + over + R"(",1]],"pages_to_release":[2]})", 400,
                        "confirmations[1][0]" + tail);
  expect_refused_detail("/keys/confirm_write",
                        R"({"rank":0,"confirmations":[["a",0]],"pages_to_release":[2,[")" + over + R"(",3]]})", 400,
                        "pages_to_release[1][0]" + tail);
  EXPECT_EQ(state_.page_state(0, 0), PageState::allocated);
  expect_refused_detail("/keys/batch_exists", R"({"keys":["a",")" + over + R"("]})", 400, "keys[1]" + tail);
  expect_refused_detail("/keys/get_locations", R"({"rank":0,"keys":[")" + over + R"("]})", 400, "keys[0]" + tail);
  const Page page = write(0, "gone");
  expect_refused_detail("/keys/delete", R"({"keys":["gone",")" + over + R"("]})", 400, "keys[1]" + tail);
  EXPECT_EQ(state_.page_state(0, page), PageState::mapped);  // not deleted
  // A key of the limit is a key like any other.
  EXPECT_EQ(write(0, fits), 2);
  expect_json(post("/keys/batch_exists", R"({"keys":[")" + fits + R"("]})"), 200, R"({"exists":[true]})");
}

TEST(ServiceLimitTest, TheKeyLimitComesFromTheStateOptionsAndZeroMeansNone) {
  StateOptions options;
  options.max_key_bytes = 3;
  MetadataState small(options);
  Service service(small);
  const ServiceAnswer refused = service.handle("POST", "/keys/batch_exists", R"({"keys":["abc","abcd"]})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.body,
            protocol::encode_detail("keys[1]: a key of 4 bytes, above the limit of 3 (--max-key-bytes)"));
  options.max_key_bytes = 0;
  MetadataState unlimited(options);
  Service open(unlimited);
  const std::string huge(100000, 'k');
  EXPECT_EQ(open.handle("POST", "/keys/batch_exists", R"({"keys":[")" + huge + R"("]})").status, 200);
}

// Keyed releases through the Service: a [key, page] entry frees the page only while it is allocated
// for that key; a bare release of a page the TTL reclaimed and allocated again is 409, nothing applied.
TEST(ServiceReleaseTest, KeyedReleasesAndRefusedBareOnesAfterAReclaim) {
  auto now = std::make_shared<std::chrono::milliseconds>(0);
  StateOptions options;
  options.allocation_ttl = std::chrono::milliseconds(100);
  options.clock = [now] { return *now; };
  MetadataState state(options);
  Service service(state);
  const auto post = [&](std::string_view target, std::string_view body) { return service.handle("POST", target, body); };
  ASSERT_EQ(post("/rank/0/initialize", R"({"num_pages":1})").status, 200);
  ASSERT_EQ(post("/keys/batch_allocate", R"({"rank":0,"keys":[["k1",""]]})").body,
            R"({"rank":0,"results":[["k1",0]]})");
  *now = std::chrono::milliseconds(100);  // k1's page reclaimed
  ASSERT_EQ(post("/keys/batch_allocate", R"({"rank":0,"keys":[["k3",""]]})").body,
            R"({"rank":0,"results":[["k3",0]]})");
  const ServiceAnswer bare = post("/keys/confirm_write", R"({"rank":0,"confirmations":[],"pages_to_release":[0]})");
  EXPECT_EQ(bare.status, 409);
  EXPECT_THAT(bare.body, ::testing::HasSubstr(
                             R"("Confirmation failed: pages_to_release[0]: page 0 was reclaimed by the allocation TTL)"));
  EXPECT_EQ(state.page_state(0, 0), PageState::allocated);
  const ServiceAnswer late = post("/keys/confirm_write", R"({"rank":0,"pages_to_release":[["k1",0]]})");
  EXPECT_EQ(late.status, 204) << late.body;
  EXPECT_EQ(state.page_state(0, 0), PageState::allocated);
  const ServiceAnswer own = post("/keys/confirm_write", R"({"rank":0,"pages_to_release":[["k3",0]]})");
  EXPECT_EQ(own.status, 204) << own.body;
  EXPECT_EQ(state.page_state(0, 0), PageState::free);
}

}  // namespace
}  // namespace hf3fs_meta
