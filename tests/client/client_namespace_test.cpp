// ClientOptions::namespace_name (docs/protocol.md, "Namespaces"): the header on every kind
// of request, none without the option, a bad name refused before anything is sent, an answer
// without the echo refused as the shared space of a server without namespaces, and restores made
// in the namespace the rank was registered in.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::detail_answer;
using testing::http_answer;

constexpr std::string_view kIgnored =
    "the server ignored X-Hf3fs-Namespace (vLLM's server has no namespaces): its answers come from the shared "
    "space";

std::optional<std::string> header_of(const HttpRequest& request, std::string_view name) {
  std::optional<std::string> found;
  for (const auto& h : request.headers) {
    if (h.name == name) {
      if (found) return "given twice";
      found = h.value;
    }
  }
  return found;
}

// A server with namespaces in a test: its ranks are kept per (namespace, rank); it echoes the
// header (unless `echo` is false: vLLM's server); forget() loses every rank of every namespace, as a
// restart of a server without a data dir does. Records every request.
class NamespaceServer final : public Transport {
 public:
  bool echo = true;

  TransportResult post(const HttpRequest& request, const AttemptTimeouts&) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
    const std::optional<std::string> ns = header_of(request, kNamespaceHeader);
    HttpResponse r = respond(request, ns.value_or(""));
    if (ns && echo) r.headers.push_back({std::string(kNamespaceHeader), *ns});
    return r;
  }

  void forget() {
    std::lock_guard lock(mutex_);
    ranks_.clear();
  }
  std::vector<HttpRequest> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::optional<std::int64_t> pages_of(const std::string& ns, Rank rank) {
    std::lock_guard lock(mutex_);
    auto it = ranks_.find({ns, rank});
    if (it == ranks_.end()) return std::nullopt;
    return it->second;
  }

 private:
  static std::optional<Rank> rank_in(std::string_view path, std::string_view tail) {
    if (!path.starts_with("/rank/") || !path.ends_with(tail)) return std::nullopt;
    return std::stoll(std::string(path.substr(6, path.size() - 6 - tail.size())));
  }

  HttpResponse respond(const HttpRequest& request, const std::string& ns) {
    if (auto rank = rank_in(request.path, "/initialize")) {
      auto init = protocol::decode_initialize_request(request.body);
      if (!init) return detail_answer(400, "Invalid initialization parameters");
      ranks_[{ns, *rank}] = init.value().num_pages;
      return http_answer(200, R"({"message":"Rank )" + std::to_string(*rank) + " initialized with " +
                                  std::to_string(init.value().num_pages) + R"( pages"})");
    }
    if (auto rank = rank_in(request.path, "/drop")) {
      const bool had = ranks_.erase({ns, *rank}) > 0;
      return http_answer(200, protocol::encode_drop_response(*rank, DropOutcome{had, 0, 0, 0}));
    }
    if (request.path == path_of(Route::batch_allocate)) {
      auto sent = protocol::decode_allocate_request(request.body);
      if (!sent) return detail_answer(400, "Invalid request format");
      const Rank rank = sent.value().rank;
      if (!ranks_.contains({ns, rank})) {
        return detail_answer(500, "Allocation failed: Rank " + std::to_string(rank) + " not initialized");
      }
      std::vector<Page> pages(sent.value().keys.size(), 0);
      return http_answer(200, protocol::encode_allocate_response(rank, sent.value().keys, pages));
    }
    if (request.path == path_of(Route::batch_exists) || request.path == path_of(Route::delete_keys)) {
      return http_answer(200, request.path == path_of(Route::batch_exists)
                                  ? protocol::encode_batch_exists_response({false})
                                  : protocol::encode_delete_keys_response({false}));
    }
    if (request.path == path_of(Route::get_locations)) {
      const std::vector<std::optional<Page>> none{std::nullopt};
      return http_answer(200, protocol::encode_get_locations_response(none));
    }
    if (request.path == path_of(Route::stats)) return http_answer(200, protocol::encode_stats_response({}));
    if (request.path == path_of(Route::clear)) return http_answer(200, R"({"message":"cleared"})");
    if (request.path == path_of(Route::confirm_write)) return testing::no_content();
    return http_answer(200, R"({"raw":true})");
  }

  std::mutex mutex_;
  std::vector<HttpRequest> requests_;
  std::map<std::pair<std::string, Rank>, std::int64_t> ranks_;
};

class ClientNamespaceTest : public ::testing::Test {
 protected:
  Client make_client(std::string ns, std::shared_ptr<Transport> over = nullptr) {
    ClientOptions options;
    options.transport = over ? std::move(over) : server;
    options.clock = clock;
    options.sleeper = sleeper;
    options.namespace_name = std::move(ns);
    return Client(std::move(options));
  }

  // One call of each kind; each must succeed (the server echoes).
  static void call_everything(Client& client) {
    ASSERT_TRUE(client.initialize(0, 8));
    ASSERT_TRUE(client.ensure_initialized(1, 8));
    ASSERT_TRUE(client.allocate(0, {"k"}));
    ASSERT_TRUE(client.confirm_write(0, {{"k", 0}}));
    ASSERT_TRUE(client.batch_exists({"k"}));
    ASSERT_TRUE(client.get_locations(0, {"k"}));
    ASSERT_TRUE(client.delete_keys({"k"}));
    ASSERT_TRUE(client.stats());
    ASSERT_TRUE(client.drop_rank(1));
    ASSERT_TRUE(client.clear());
    ASSERT_TRUE(client.raw("/anything", "{}"));
  }

  std::shared_ptr<NamespaceServer> server = std::make_shared<NamespaceServer>();
  std::shared_ptr<testing::FakeClock> clock = std::make_shared<testing::FakeClock>();
  std::shared_ptr<testing::FakeSleeper> sleeper = std::make_shared<testing::FakeSleeper>(clock);
};

TEST_F(ClientNamespaceTest, EveryCallCarriesTheNamespaceOnce) {
  Client client = make_client("team-a.v1_2");
  call_everything(client);
  const auto requests = server->requests();
  ASSERT_EQ(requests.size(), 11u);
  for (const auto& r : requests) {
    EXPECT_EQ(header_of(r, kNamespaceHeader), "team-a.v1_2") << r.path;
  }
  EXPECT_EQ(requests.back().path, "/anything");  // raw() too
}

TEST_F(ClientNamespaceTest, WithoutTheOptionNoHeaderIsSent) {
  Client client = make_client("");
  call_everything(client);
  const auto requests = server->requests();
  ASSERT_EQ(requests.size(), 11u);
  for (const auto& r : requests) {
    EXPECT_EQ(header_of(r, kNamespaceHeader), std::nullopt) << r.path;
    // Exactly the headers of a client without namespaces.
    ASSERT_EQ(r.headers.size(), 1u) << r.path;
    EXPECT_EQ(r.headers[0].name, "X-Request-Id");
  }
}

TEST_F(ClientNamespaceTest, TheRestoreOfAForgottenRankCarriesTheNamespace) {
  Client client = make_client("m1");
  ASSERT_TRUE(client.ensure_initialized(3, 64));
  server->forget();
  auto pages = client.allocate(3, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  const auto requests = server->requests();
  // ensure_initialized, the allocate the server refused, the restore, the allocate again.
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[2].path, "/rank/3/initialize");
  for (const auto& r : requests) EXPECT_EQ(header_of(r, kNamespaceHeader), "m1") << r.path;
  EXPECT_EQ(server->pages_of("m1", 3), 64);
  EXPECT_EQ(server->pages_of("", 3), std::nullopt);
}

TEST_F(ClientNamespaceTest, ABadNameRefusesEveryCallBeforeAnythingIsSent) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"a b", "has byte 0x20 at offset 1"},
      {"m1\r\nX-Injected: yes", "has byte 0x0D at offset 2"},
      {"caf\xc3\xa9", "has byte 0xC3 at offset 3"},
      {"a/b", "has byte 0x2F at offset 1"},
      {std::string(65, 'n'), "is 65 bytes"},
  };
  for (const auto& [name, why] : bad) {
    Client client = make_client(name);
    const auto refused = [&, why = why](const Error& e, Operation op) {
      EXPECT_EQ(e.code, errc::invalid_argument);
      EXPECT_EQ(e.operation, op);
      EXPECT_THAT(e.detail, StartsWith("ClientOptions::namespace_name " + why + ": a namespace name is 1 to 64"));
      EXPECT_FALSE(e.sent);
    };
    refused(client.initialize(0, 8).error(), Operation::initialize);
    refused(client.ensure_initialized(0, 8).error(), Operation::initialize);
    refused(client.allocate(0, {"k"}).error(), Operation::allocate);
    refused(client.confirm_write(0, {{"k", 0}}).error(), Operation::confirm_write);
    refused(client.batch_exists({"k"}).error(), Operation::batch_exists);
    refused(client.get_locations(0, {"k"}).error(), Operation::get_locations);
    refused(client.delete_keys({"k"}).error(), Operation::delete_keys);
    refused(client.stats().error(), Operation::stats);
    refused(client.clear().error(), Operation::clear);
    refused(client.drop_rank(0).error(), Operation::drop_rank);
    refused(client.raw("/x", "{}").error(), Operation::raw);
    // Never echoed: the message says where the bad byte is, not what it is.
    EXPECT_THAT(client.stats().error().message(), ::testing::Not(HasSubstr("Injected")));
  }
  EXPECT_TRUE(server->requests().empty());
}

TEST_F(ClientNamespaceTest, ABadTokenIsNamedBeforeTheNamespace) {
  ClientOptions options;
  options.transport = server;
  options.auth_token = "t\n";
  options.namespace_name = "ok";
  Client client(std::move(options));
  EXPECT_THAT(client.stats().error().detail, StartsWith("ClientOptions::auth_token: "));
  EXPECT_TRUE(server->requests().empty());
}

TEST_F(ClientNamespaceTest, AnAnswerWithoutTheEchoIsAProtocolErrorForEveryKindOfCall) {
  server->echo = false;  // vLLM's server: the header is ignored
  Client client = make_client("m1");
  const auto ignored = [](const Error& e) {
    EXPECT_EQ(e.code, errc::protocol_error);
    EXPECT_EQ(e.detail, kIgnored);
    EXPECT_TRUE(e.sent);
    EXPECT_EQ(e.status.value_or(0) / 100, 2);
    EXPECT_EQ(e.attempts, 1);  // not repeated: every attempt would reach the same server
  };
  ignored(client.initialize(0, 8).error());
  ignored(client.batch_exists({"k"}).error());
  ignored(client.get_locations(0, {"k"}).error());
  ignored(client.delete_keys({"k"}).error());
  ignored(client.stats().error());
  ignored(client.clear().error());
  ignored(client.drop_rank(0).error());
  ignored(client.raw("/x", "{}").error());
  ignored(client.confirm_write(0, {{"k", 0}}).error());
}

TEST_F(ClientNamespaceTest, AnotherNamespaceInTheEchoIsAProtocolError) {
  auto other = std::make_shared<testing::ScriptedTransport>();
  other->then(http_answer(200, R"({"exists":[true]})", "application/json", {{std::string(kNamespaceHeader), "m2"}}));
  Client client = make_client("m1", other);
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().detail, kIgnored);
}

TEST_F(ClientNamespaceTest, ARankNotInitializedWithoutTheEchoIsNotRestoredInTheSharedSpace) {
  Client client = make_client("m1");
  ASSERT_TRUE(client.ensure_initialized(3, 64));
  server->forget();
  server->echo = false;
  auto r = client.allocate(3, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().detail, kIgnored);
  EXPECT_EQ(r.error().status, 500);
  EXPECT_EQ(server->requests().size(), 2u);  // no restore went out
  EXPECT_EQ(server->pages_of("", 3), std::nullopt);
}

TEST_F(ClientNamespaceTest, WithoutANamespaceNoEchoIsNeeded) {
  server->echo = false;
  Client client = make_client("");
  call_everything(client);
}

// docs/protocol.md, "Namespaces": the registry of ranks to restore is per connection and a connection has one
// namespace, so it is keyed by (namespace, rank).
TEST_F(ClientNamespaceTest, TwoNamespacesEachRestoreTheirOwnRankZero) {
  Client a = make_client("a");
  Client b = make_client("b");
  ASSERT_TRUE(a.ensure_initialized(0, 16));
  ASSERT_TRUE(b.ensure_initialized(0, 48));
  server->forget();
  ASSERT_TRUE(b.allocate(0, {"kb"}));
  ASSERT_TRUE(a.allocate(0, {"ka"}));
  EXPECT_EQ(server->pages_of("a", 0), 16);
  EXPECT_EQ(server->pages_of("b", 0), 48);
  EXPECT_EQ(server->pages_of("", 0), std::nullopt);
  std::vector<std::pair<std::string, std::string>> restores;
  const auto requests = server->requests();
  for (std::size_t i = 2; i < requests.size(); ++i) {
    if (requests[i].path == "/rank/0/initialize") {
      restores.emplace_back(header_of(requests[i], kNamespaceHeader).value_or(""), requests[i].body);
    }
  }
  EXPECT_EQ(restores, (std::vector<std::pair<std::string, std::string>>{
                          {"b", R"({"num_pages":48,"role":"worker"})"},
                          {"a", R"({"num_pages":16,"role":"worker"})"},
                      }));
}

// ---- GET /namespaces, POST /namespaces/{name}/drop, POST /keys/status ----

class ClientNamespaceCallsTest : public ::testing::Test {
 protected:
  ClientNamespaceCallsTest() {
    ClientOptions options;
    options.transport = transport;
    options.clock = clock;
    options.sleeper = sleeper;
    client = std::make_unique<Client>(std::move(options));
  }
  std::shared_ptr<testing::ScriptedTransport> transport = std::make_shared<testing::ScriptedTransport>();
  std::shared_ptr<testing::FakeClock> clock = std::make_shared<testing::FakeClock>();
  std::shared_ptr<testing::FakeSleeper> sleeper = std::make_shared<testing::FakeSleeper>(clock);
  std::unique_ptr<Client> client;
};

TEST_F(ClientNamespaceCallsTest, NamespacesIsAGetAndDecodesEveryEntry) {
  HttpRequest sent;
  transport->then([&](const HttpRequest& r, const AttemptTimeouts&) -> TransportResult {
    sent = r;
    return http_answer(200, R"({"namespaces":[{"name":"default","ranks":[0,1],"pages":16,"keys":5},)"
                            R"({"name":"m1","ranks":[],"pages":0,"keys":0}]})");
  });
  auto r = client->namespaces();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(sent.method, "GET");
  EXPECT_EQ(sent.path, "/namespaces");
  EXPECT_EQ(sent.body, "");
  EXPECT_EQ(r.value(), (std::vector<NamespaceSummary>{{"default", {0, 1}, 16, 5}, {"m1", {}, 0, 0}}));
}

TEST_F(ClientNamespaceCallsTest, NamespacesIsRepeatedAfterAnAmbiguousFailure) {
  transport->then(testing::transport_failure(errc::timeout, true));
  transport->then(http_answer(200, R"({"namespaces":[]})"));
  auto r = client->namespaces();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r.value().empty());
  EXPECT_EQ(transport->posted().size(), 2u);
}

TEST_F(ClientNamespaceCallsTest, DropNamespacePostsToTheNamesPathAndChecksTheAnswerNamesIt) {
  transport->then(http_answer(200, R"({"namespace":"m1","dropped":true,"ranks":2,"pages":16,"keys_removed":5})"));
  auto r = client->drop_namespace("m1");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r.value(), (NamespaceDropOutcome{true, 2, 16, 5}));
  EXPECT_EQ(transport->posted()[0].path, "/namespaces/m1/drop");

  transport->then(http_answer(200, R"({"namespace":"m2","dropped":false,"ranks":0,"pages":0,"keys_removed":0})"));
  auto other = client->drop_namespace("m1");
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, errc::protocol_error);
  EXPECT_EQ(other.error().operation, Operation::drop_namespace);
}

TEST_F(ClientNamespaceCallsTest, DropNamespaceIsNotRepeatedAfterAnAmbiguousFailure) {
  transport->then(testing::transport_failure(errc::timeout, true));
  auto r = client->drop_namespace("m1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_EQ(transport->posted().size(), 1u);
}

TEST_F(ClientNamespaceCallsTest, DropNamespaceRefusesABadNameBeforeSending) {
  for (const std::string& bad : {std::string(), std::string("a/b"), std::string("../x"), std::string(65, 'n'),
                                std::string("m1\r\nX: y")}) {
    auto r = client->drop_namespace(bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::invalid_argument);
    EXPECT_EQ(r.error().operation, Operation::drop_namespace);
    EXPECT_THAT(r.error().detail, StartsWith("name "));
    EXPECT_THAT(r.error().detail, HasSubstr("a namespace name is 1 to 64 characters"));
  }
  EXPECT_TRUE(transport->posted().empty());
}

TEST_F(ClientNamespaceCallsTest, KeyStatusPostsTheKeysAndDecodesOneEntryPerKey) {
  transport->then(http_answer(
      200, R"({"ranks_initialized":3,"status":[{"ranks":[0,1],"tp_world_size":3,"complete":false},null]})"));
  auto r = client->key_status({"k1", "k2"});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(transport->posted()[0].path, "/keys/status");
  EXPECT_EQ(transport->posted()[0].body, R"({"keys":["k1","k2"]})");
  EXPECT_EQ(r.value().ranks_initialized, 3u);
  ASSERT_EQ(r.value().status.size(), 2u);
  EXPECT_EQ(r.value().status[0], (KeyStatus{{0, 1}, 3, false}));
  EXPECT_EQ(r.value().status[1], std::nullopt);

  transport->then(http_answer(200, R"({"ranks_initialized":3,"status":[null]})"));
  auto short_answer = client->key_status({"k1", "k2"});
  ASSERT_FALSE(short_answer);
  EXPECT_EQ(short_answer.error().code, errc::protocol_error);
}

TEST_F(ClientNamespaceCallsTest, KeyStatusRefusesWhatBatchExistsRefuses) {
  auto r = client->key_status({"k", ""});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_argument);
  EXPECT_EQ(r.error().operation, Operation::key_status);
  EXPECT_THAT(r.error().detail, HasSubstr("keys[1]"));
  EXPECT_TRUE(transport->posted().empty());
}

TEST_F(ClientNamespaceTest, TheNewCallsCarryTheNamespaceToo) {
  auto scripted = std::make_shared<testing::ScriptedTransport>();
  std::vector<std::optional<std::string>> seen;
  scripted->otherwise([&](const HttpRequest& r, const AttemptTimeouts&) -> TransportResult {
    seen.push_back(header_of(r, kNamespaceHeader));
    std::string body = R"({"ranks_initialized":0,"status":[null]})";
    if (r.path == "/namespaces") body = R"({"namespaces":[]})";
    if (r.path == "/namespaces/m2/drop") {
      body = R"({"namespace":"m2","dropped":false,"ranks":0,"pages":0,"keys_removed":0})";
    }
    return http_answer(200, body, "application/json", {{std::string(kNamespaceHeader), "m1"}});
  });
  Client client = make_client("m1", scripted);
  ASSERT_TRUE(client.namespaces());
  ASSERT_TRUE(client.drop_namespace("m2"));
  ASSERT_TRUE(client.key_status({"k"}));
  EXPECT_EQ(seen, (std::vector<std::optional<std::string>>{"m1", "m1", "m1"}));
}

}  // namespace
}  // namespace hf3fs_meta
