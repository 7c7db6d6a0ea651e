// Namespaces on the wire (docs/protocol.md, "Namespaces"): the three routes' codec (the
// server's answers and the client's checks of them) and Service's handlers, with every refusal and
// the state left unchanged by it, and every other route acting in the namespace it is handed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "hf3fs_meta/in_process_transport.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/service.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kBadPathName =
    R"({"detail":"the namespace in the path must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"})";

// ---- Codec ----

TEST(NamespaceCodec, NamespacesAnswerRoundTrips) {
  const std::vector<NamespaceSummary> all = {{"a", {0, 1}, 16, 5}, {"default", {}, 0, 0}, {"m-1.x_y", {-3}, 2, 1}};
  const std::string body = protocol::encode_namespaces_response(all);
  EXPECT_EQ(body,
            R"({"namespaces":[{"name":"a","ranks":[0,1],"pages":16,"keys":5},)"
            R"({"name":"default","ranks":[],"pages":0,"keys":0},{"name":"m-1.x_y","ranks":[-3],"pages":2,"keys":1}]})");
  auto decoded = protocol::decode_namespaces_response(body);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded.value(), all);
  EXPECT_EQ(protocol::encode_namespaces_response({}), R"({"namespaces":[]})");
  // With spaces and members in another order, as another server may render it.
  auto spaced = protocol::decode_namespaces_response(R"({"namespaces": [{"keys": 1, "pages": 2, "ranks": [3], "name": "b"}]})");
  ASSERT_TRUE(spaced) << spaced.error().message;
  EXPECT_EQ(spaced.value(), (std::vector<NamespaceSummary>{{"b", {3}, 2, 1}}));
}

TEST(NamespaceCodec, NamespacesAnswerRefusals) {
  const auto refused = [](std::string_view body) {
    auto decoded = protocol::decode_namespaces_response(body);
    return decoded ? std::string("accepted") : decoded.error().message;
  };
  EXPECT_THAT(refused("nope"), HasSubstr("answer: not JSON"));
  EXPECT_EQ(refused("[]"), "answer: expected a JSON object");
  EXPECT_EQ(refused("{}"), "namespaces: expected a list");
  EXPECT_EQ(refused(R"({"namespaces":[1]})"), "namespaces[0]: expected an object");
  EXPECT_EQ(refused(R"({"namespaces":[{"ranks":[],"pages":0,"keys":0}]})"), "namespaces[0].name: expected a namespace name");
  EXPECT_EQ(refused(R"({"namespaces":[{"name":"a b","ranks":[],"pages":0,"keys":0}]})"),
            "namespaces[0].name: expected a namespace name");
  EXPECT_EQ(refused(R"({"namespaces":[{"name":"a","ranks":{},"pages":0,"keys":0}]})"), "namespaces[0].ranks: expected a list");
  EXPECT_EQ(refused(R"({"namespaces":[{"name":"a","ranks":[0,"1"],"pages":0,"keys":0}]})"),
            "namespaces[0].ranks[1]: expected an integer");
  EXPECT_EQ(refused(R"({"namespaces":[{"name":"a","ranks":[],"pages":-1,"keys":0}]})"),
            "namespaces[0].pages: expected a count");
  EXPECT_EQ(refused(R"({"namespaces":[{"name":"a","ranks":[],"pages":0}]})"), "namespaces[0].keys: expected a count");
}

TEST(NamespaceCodec, DropAnswerRoundTripsAndMustNameTheNamespaceSent) {
  const NamespaceDropOutcome outcome{true, 2, 16, 5};
  const std::string body = protocol::encode_drop_namespace_response("m1", outcome);
  EXPECT_EQ(body, R"({"namespace":"m1","dropped":true,"ranks":2,"pages":16,"keys_removed":5})");
  auto decoded = protocol::decode_drop_namespace_response(body, "m1");
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded.value(), outcome);
  EXPECT_EQ(protocol::encode_drop_namespace_response("zz", {}),
            R"({"namespace":"zz","dropped":false,"ranks":0,"pages":0,"keys_removed":0})");

  const auto refused = [](std::string_view answer, std::string_view sent) {
    auto d = protocol::decode_drop_namespace_response(answer, sent);
    return d ? std::string("accepted") : d.error().message;
  };
  EXPECT_EQ(refused(body, "m2"), "namespace: the answer names 'm1', not the namespace sent");
  EXPECT_EQ(refused(R"({"dropped":true,"ranks":0,"pages":0,"keys_removed":0})", "m1"), "namespace: expected a string");
  EXPECT_EQ(refused(R"({"namespace":"m1","dropped":1,"ranks":0,"pages":0,"keys_removed":0})", "m1"),
            "dropped: expected true or false");
  EXPECT_EQ(refused(R"({"namespace":"m1","dropped":true,"pages":0,"keys_removed":0})", "m1"), "ranks: expected a count");
  EXPECT_EQ(refused(R"({"namespace":"m1","dropped":true,"ranks":0,"pages":-2,"keys_removed":0})", "m1"),
            "pages: expected a count");
  EXPECT_EQ(refused(R"({"namespace":"m1","dropped":true,"ranks":0,"pages":0})", "m1"), "keys_removed: expected a count");
  EXPECT_EQ(refused("[]", "m1"), "answer: expected a JSON object");
}

TEST(NamespaceCodec, KeyStatusAnswerRoundTrips) {
  const std::vector<std::optional<KeyInfo>> status = {KeyInfo{3, {{0, 7}, {1, 2}}, false}, std::nullopt,
                                                      KeyInfo{1, {{5, 0}}, true}};
  const std::string body = protocol::encode_key_status_response(3, status);
  EXPECT_EQ(body, R"({"ranks_initialized":3,"status":[{"ranks":[0,1],"tp_world_size":3,"complete":false},null,)"
                  R"({"ranks":[5],"tp_world_size":1,"complete":true}]})");
  auto decoded = protocol::decode_key_status_response(body, 3);
  ASSERT_TRUE(decoded) << decoded.error().message;
  const KeyStatusAnswer expected{3, {KeyStatus{{0, 1}, 3, false}, std::nullopt, KeyStatus{{5}, 1, true}}};
  EXPECT_EQ(decoded.value(), expected);
  EXPECT_EQ(protocol::encode_key_status_response(0, {}), R"({"ranks_initialized":0,"status":[]})");
  EXPECT_EQ(protocol::encode_key_status_request(std::vector<std::string>{"a", "b"}), R"({"keys":["a","b"]})");
}

TEST(NamespaceCodec, KeyStatusAnswerRefusals) {
  const auto refused = [](std::string_view body, std::size_t expected) {
    auto d = protocol::decode_key_status_response(body, expected);
    return d ? std::string("accepted") : d.error().message;
  };
  EXPECT_EQ(refused(R"({"status":[]})", 0), "ranks_initialized: expected a count");
  EXPECT_EQ(refused(R"({"ranks_initialized":0})", 0), "status: expected a list");
  EXPECT_EQ(refused(R"({"ranks_initialized":0,"status":[null]})", 2),
            "status: expected 2 entries (one per key sent), got 1");
  EXPECT_EQ(refused(R"({"ranks_initialized":0,"status":[7]})", 1), "status[0]: expected an object or null");
  EXPECT_EQ(refused(R"({"ranks_initialized":0,"status":[{"tp_world_size":1,"complete":true}]})", 1),
            "status[0].ranks: expected a list");
  EXPECT_EQ(refused(R"({"ranks_initialized":0,"status":[{"ranks":[0],"complete":true}]})", 1),
            "status[0].tp_world_size: expected a count");
  EXPECT_EQ(refused(R"({"ranks_initialized":0,"status":[{"ranks":[0],"tp_world_size":1}]})", 1),
            "status[0].complete: expected true or false");
  EXPECT_THAT(refused("{", 0), HasSubstr("answer: not JSON"));
}

TEST(NamespaceCodec, RequestPathOfANameRoute) {
  EXPECT_EQ(request_path(Route::drop_namespace, std::string_view("m1")), "/namespaces/m1/drop");
  EXPECT_EQ(request_path(Route::namespaces, std::string_view("m1")), "/namespaces");
  EXPECT_EQ(request_path(Route::drop_rank, 3), "/rank/3/drop");
}

// ---- Routing ----

TEST(NamespaceRoute, TheThreeRoutesAndTheNameParameter) {
  EXPECT_EQ(Service::route("GET", "/namespaces").route, Route::namespaces);
  EXPECT_EQ(Service::route("POST", "/namespaces").route, Route::method_not_allowed);
  EXPECT_EQ(Service::route("GET", "/namespaces/").route, Route::redirect);
  EXPECT_EQ(Service::route("POST", "/keys/status").route, Route::key_status);
  EXPECT_EQ(Service::route("GET", "/keys/status").route, Route::method_not_allowed);
  const RoutedTarget drop = Service::route("POST", "/namespaces/m1/drop?x=1");
  EXPECT_EQ(drop.route, Route::drop_namespace);
  EXPECT_EQ(drop.name_segment(), "m1");
  EXPECT_EQ(Service::route("POST", "/namespaces/m%31/drop").name_segment(), "m1");  // percent-decoded
  EXPECT_EQ(Service::route("GET", "/namespaces/m1/drop").route, Route::method_not_allowed);
  EXPECT_EQ(Service::route("POST", "/namespaces/m1/drop/").route, Route::redirect);
  EXPECT_EQ(Service::route("POST", "/namespaces//drop").route, Route::not_found);
  EXPECT_EQ(Service::route("POST", "/namespaces/a/b/drop").route, Route::not_found);
  // {rank} routes keep their segment.
  EXPECT_EQ(Service::route("POST", "/rank/12/drop").rank_segment(), "12");
}

// ---- Service ----

class NamespaceService : public ::testing::Test {
 protected:
  ServiceAnswer post(std::string_view target, std::string_view body, std::string_view ns = {}) {
    return service_.handle("POST", target, body, ns);
  }
  ServiceAnswer get(std::string_view target, std::string_view ns = {}) { return service_.handle("GET", target, "", ns); }
  void expect_json(const ServiceAnswer& a, int status, std::string_view body) {
    EXPECT_EQ(a.status, status) << a.body;
    EXPECT_EQ(a.content_type, "application/json");
    EXPECT_EQ(a.body, body);
  }
  void init(std::string_view ns, Rank rank, std::int64_t pages) {
    ASSERT_EQ(post(request_path(Route::initialize, rank), R"({"num_pages":)" + std::to_string(pages) + "}", ns).status,
              200);
  }
  // Allocates and confirms `key` on `rank` in `ns`: its page.
  Page write(std::string_view ns, Rank rank, const std::string& key) {
    const std::vector<BlockKey> keys{{key, ""}};
    const ServiceAnswer a = post(path_of(Route::batch_allocate), protocol::encode_allocate_request(rank, keys), ns);
    EXPECT_EQ(a.status, 200) << a.body;
    auto decoded = protocol::decode_allocate_response(a.body, keys);
    if (!decoded) {
      ADD_FAILURE() << a.body;
      return kNoPage;
    }
    const Page page = decoded.value()[0];
    const std::vector<Confirmation> confirmations{{key, page}};
    EXPECT_EQ(post(path_of(Route::confirm_write), protocol::encode_confirm_write_request(rank, confirmations, {}), ns)
                  .status,
              204);
    return page;
  }
  std::vector<NamespaceSummary> listed() {
    const ServiceAnswer a = get("/namespaces");
    EXPECT_EQ(a.status, 200) << a.body;
    auto decoded = protocol::decode_namespaces_response(a.body);
    EXPECT_TRUE(decoded) << a.body;
    return decoded ? decoded.value() : std::vector<NamespaceSummary>{};
  }

  MetadataState state_;
  Service service_{state_};
};

TEST_F(NamespaceService, EveryRouteActsInTheNamespaceItIsHanded) {
  init("", 0, 4);
  init("a", 0, 4);
  write("", 0, "x");  // page 0 in the default namespace
  write("", 0, "y");  // page 1
  EXPECT_EQ(write("a", 0, "y"), 0);  // the same key on the same rank: a's own pages
  expect_json(post("/keys/batch_exists", R"({"keys":["x","y"]})", "a"), 200, R"({"exists":[false,true]})");
  expect_json(post("/keys/get_locations", R"({"rank":0,"keys":["y"]})", "a"), 200, R"({"locations":[0]})");
  expect_json(post("/keys/get_locations", R"({"rank":0,"keys":["y"]})"), 200, R"({"locations":[1]})");
  expect_json(post("/keys/delete", R"({"keys":["x"]})", "a"), 200, R"({"deleted":[false]})");
  EXPECT_TRUE(state_.key_info("x").has_value());
  // /stats and /clear: the caller's namespace.
  auto stats = protocol::decode_stats_response(get("/stats", "a").body);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats.value().keys_complete, 1u);
  EXPECT_EQ(stats.value().ranks.at(0).second.mapped, 1);
  EXPECT_EQ(post("/clear", "", "a").status, 204);
  EXPECT_EQ(state_.ranks_initialized(NamespaceRef{"a"}), 0u);
  EXPECT_EQ(state_.key_count(), 2u);  // the default's two
  // A rank of one namespace is not initialized in another; drop_rank does not cross.
  expect_json(post("/keys/batch_allocate", R"({"rank":0,"keys":[["z",""]]})", "a"), 500,
              R"({"detail":"Allocation failed: Rank 0 not initialized"})");
  expect_json(post("/rank/0/drop", "", "a"), 200, R"({"rank":0,"dropped":false,"pages":0,"mappings":0,"keys_removed":0})");
  EXPECT_TRUE(state_.rank_stats(0).has_value());
}

TEST_F(NamespaceService, NamespacesListsEveryOneByName) {
  expect_json(get("/namespaces"), 200, R"({"namespaces":[{"name":"default","ranks":[],"pages":0,"keys":0}]})");
  init("m1", 1, 8);
  init("m1", 0, 8);
  write("m1", 0, "k");
  init("", 3, 2);
  expect_json(get("/namespaces", "m1"), 200,
              R"({"namespaces":[{"name":"default","ranks":[3],"pages":2,"keys":0},)"
              R"({"name":"m1","ranks":[0,1],"pages":16,"keys":1}]})");
  EXPECT_EQ(listed(), state_.namespaces());
  // A scheduler's initialize and a read in a namespace that does not exist create none.
  EXPECT_EQ(post("/rank/0/initialize", R"({"role":"scheduler"})", "ghost").status, 200);
  expect_json(post("/keys/batch_exists", R"({"keys":["k"]})", "ghost"), 200, R"({"exists":[false]})");
  EXPECT_EQ(listed().size(), 2u);
}

TEST_F(NamespaceService, DropRemovesANamespaceAndEverythingInIt) {
  init("m1", 0, 8);
  init("m1", 1, 8);
  write("m1", 0, "k");
  write("m1", 1, "k");
  init("", 0, 4);
  write("", 0, "k");
  expect_json(post("/namespaces/m1/drop", ""), 200,
              R"({"namespace":"m1","dropped":true,"ranks":2,"pages":16,"keys_removed":1})");
  EXPECT_EQ(state_.namespaces().size(), 1u);
  EXPECT_TRUE(state_.key_info("k").has_value());
  // Again: nothing there, as drop_rank answers for a rank that does not exist.
  expect_json(post("/namespaces/m1/drop", ""), 200,
              R"({"namespace":"m1","dropped":false,"ranks":0,"pages":0,"keys_removed":0})");
  // Created again by a worker's initialize: empty.
  init("m1", 0, 2);
  expect_json(post("/keys/batch_exists", R"({"keys":["k"]})", "m1"), 200, R"({"exists":[false]})");
}

TEST_F(NamespaceService, DropRefusesTheDefaultAndABadNameAndChangesNothing) {
  init("", 0, 4);
  write("", 0, "k");
  init("m1", 0, 4);
  const auto before = state_.namespaces();
  expect_json(post("/namespaces/default/drop", ""), 400,
              R"({"detail":"the default namespace cannot be dropped: POST /clear in it empties it"})");
  const std::string too_long = "/namespaces/" + std::string(kMaxNamespaceBytes + 1, 'a') + "/drop";
  for (const std::string_view target : {std::string_view("/namespaces/a%20b/drop"), std::string_view("/namespaces/m%0A1/drop"),
                                        std::string_view("/namespaces/%C3%A9/drop"), std::string_view(too_long),
                                        std::string_view("/namespaces/*/drop")}) {
    expect_json(post(target, ""), 400, kBadPathName);
  }
  // A '/' percent-encoded is a '/' once decoded (Starlette routes the decoded path): no route.
  expect_json(post("/namespaces/m1%2F/drop", ""), 404, R"({"detail":"Not Found"})");
  EXPECT_EQ(state_.namespaces(), before);
  // The longest name is a name.
  const std::string longest(kMaxNamespaceBytes, 'a');
  expect_json(post("/namespaces/" + longest + "/drop", ""), 200,
              R"({"namespace":")" + longest + R"(","dropped":false,"ranks":0,"pages":0,"keys_removed":0})");
}

TEST_F(NamespaceService, KeyStatusSaysWhereEachKeyIsInTheCallersNamespace) {
  init("a", 0, 4);
  init("a", 1, 4);
  init("a", 2, 4);
  write("a", 0, "k");
  write("a", 1, "k");
  for (Rank rank : {0, 1, 2}) write("a", rank, "full");
  expect_json(post("/keys/status", R"({"keys":["k","nope","full"]})", "a"), 200,
              R"({"ranks_initialized":3,"status":[{"ranks":[0,1],"tp_world_size":3,"complete":false},null,)"
              R"({"ranks":[0,1,2],"tp_world_size":3,"complete":true}]})");
  // Not in the default namespace, nor in one that does not exist.
  expect_json(post("/keys/status", R"({"keys":["k"]})"), 200, R"({"ranks_initialized":0,"status":[null]})");
  expect_json(post("/keys/status", R"({"keys":["k"]})", "ghost"), 200, R"({"ranks_initialized":0,"status":[null]})");
  EXPECT_EQ(state_.namespaces().size(), 2u);
  // What the client decodes is the state's.
  const ServiceAnswer a = post("/keys/status", R"({"keys":["k"]})", "a");
  auto decoded = protocol::decode_key_status_response(a.body, 1);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded.value().status[0]->ranks, (std::vector<Rank>{0, 1}));
  EXPECT_EQ(state_.key_info(NamespaceRef{"a"}, "k")->tp_world_size, decoded.value().status[0]->tp_world_size);
}

TEST_F(NamespaceService, KeyStatusRefusesWhatDeleteRefuses) {
  init("a", 0, 2);
  write("a", 0, "k");
  for (const char* body : {R"({"keys":5})", R"({"keys":["a",7]})", "[1]", "{", R"({"keys":[["a"]]})"}) {
    const ServiceAnswer expected = post("/keys/delete", body, "ghost");  // refused: nothing deleted anywhere
    ASSERT_EQ(expected.status, 400) << body;
    expect_json(post("/keys/status", body, "a"), 400, expected.body);
  }
  expect_json(post("/keys/status", R"({"keys":5})", "a"), 400, R"({"detail":"Invalid keys format"})");
  expect_json(post("/keys/status", R"({"keys":["a",7]})", "a"), 400, R"({"detail":"keys[1]: expected a string"})");
  const std::string over(1025, 'k');
  expect_json(post("/keys/status", R"({"keys":["k",")" + over + R"("]})", "a"), 400,
              R"x({"detail":"keys[1]: a key of 1025 bytes, above the limit of 1024 (--max-key-bytes)"})x");
  EXPECT_TRUE(state_.key_info(NamespaceRef{"a"}, "k").has_value());
}

// A read: no lease taken, no recency moved (an LRU eviction takes the key key_status looked at last).
TEST(NamespaceServiceLifecycle, KeyStatusMovesNoRecency) {
  StateOptions options;
  options.eviction = Eviction::lru;
  MetadataState state(options);
  Service service(state);
  ASSERT_EQ(service.handle("POST", "/rank/0/initialize", R"({"num_pages":2})", "a").status, 200);
  for (const char* key : {"old", "new"}) {
    const std::vector<BlockKey> keys{{key, ""}};
    const auto pages = state.allocate(NamespaceRef{"a"}, 0, keys);
    ASSERT_TRUE(pages);
    const std::vector<Confirmation> confirmations{{key, pages.value()[0]}};
    ASSERT_TRUE(state.confirm_write(NamespaceRef{"a"}, 0, confirmations, {}));
  }
  ASSERT_EQ(service.handle("POST", "/keys/status", R"({"keys":["old"]})", "a").status, 200);
  const std::vector<BlockKey> third{{"third", ""}};
  ASSERT_TRUE(state.allocate(NamespaceRef{"a"}, 0, third));
  EXPECT_FALSE(state.key_info(NamespaceRef{"a"}, "old").has_value());  // evicted: the status moved nothing
  EXPECT_TRUE(state.key_info(NamespaceRef{"a"}, "new").has_value());
}

// ---- The in-process transport: the header as the server takes it, and the echo ----

// The echo's value (nullopt: none). HttpResponse::header is the client library's, not linked here.
std::optional<std::string> echoed(const HttpResponse& r) {
  std::optional<std::string> found;
  for (const HttpHeader& h : r.headers) {
    if (h.name == kNamespaceHeader) found = h.value;
  }
  return found;
}

class NamespaceInProcess : public ::testing::Test {
 protected:
  HttpResponse send(std::string path, std::string body, std::vector<HttpHeader> headers, std::string method = "POST") {
    HttpRequest request{std::move(path), std::move(body), std::move(headers), std::move(method)};
    auto response = transport_->post(request, {});
    EXPECT_TRUE(response);
    return response ? std::move(response).value() : HttpResponse{};
  }

  std::shared_ptr<MetadataState> state_ = std::make_shared<MetadataState>();
  std::shared_ptr<Transport> transport_ = make_in_process_transport(state_);
};

TEST_F(NamespaceInProcess, TheHeaderSelectsTheNamespaceAndIsEchoed) {
  const HttpResponse made = send("/rank/0/initialize", R"({"num_pages":4})", {{"x-hf3fs-namespace", "m1"}});
  EXPECT_EQ(made.status, 200) << made.body;
  EXPECT_EQ(echoed(made), "m1");
  EXPECT_TRUE(state_->rank_stats(NamespaceRef{"m1"}, 0).has_value());
  EXPECT_FALSE(state_->rank_stats(0).has_value());
  // Every answer to a request that named one echoes it, a refusal's too.
  const HttpResponse refused = send("/keys/batch_allocate", R"({"rank":9,"keys":[]})", {{"X-Hf3fs-Namespace", "m1"}});
  EXPECT_EQ(refused.status, 500);
  EXPECT_EQ(echoed(refused).value_or("none"), "m1");
  const HttpResponse listed = send("/namespaces", "", {{"X-Hf3fs-Namespace", "default"}}, "GET");
  EXPECT_EQ(listed.status, 200);
  EXPECT_EQ(echoed(listed).value_or("none"), "default");
  // Without it: the default namespace, and no echo (every byte as before).
  const HttpResponse plain = send("/rank/0/initialize", R"({"num_pages":2})", {});
  EXPECT_EQ(plain.status, 200);
  EXPECT_FALSE(echoed(plain).has_value());
  EXPECT_EQ(state_->rank_stats(0)->num_pages, 2);
  EXPECT_EQ(state_->rank_stats(NamespaceRef{"m1"}, 0)->num_pages, 4);
}

TEST_F(NamespaceInProcess, ABadOrRepeatedHeaderIs400AndChangesNothing) {
  const std::string invalid = R"({"detail":"X-Hf3fs-Namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"})";
  for (const std::string& bad : {std::string(""), std::string("a b"), std::string("m\n1"), std::string(65, 'a'),
                                std::string("\xC3\xA9")}) {
    const HttpResponse r = send("/rank/0/initialize", R"({"num_pages":4})", {{"X-Hf3fs-Namespace", bad}});
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_EQ(r.body, invalid) << bad;
    EXPECT_FALSE(echoed(r).has_value()) << "a bad value is never echoed";
  }
  const HttpResponse twice =
      send("/rank/0/initialize", R"({"num_pages":4})", {{"X-Hf3fs-Namespace", "a"}, {"x-hf3fs-namespace", "a"}});
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(twice.body, R"({"detail":"X-Hf3fs-Namespace was given more than once"})");
  EXPECT_EQ(state_->rank_count(), 0u);
  EXPECT_EQ(state_->namespaces().size(), 1u);
}

}  // namespace
}  // namespace hf3fs_meta
