// Namespaces over the real server (docs/protocol.md, "Namespaces"), in raw HTTP with
// X-Hf3fs-Namespace: what one namespace does is invisible in another, two "instances" of different
// tensor-parallel sizes complete their keys side by side, the three routes of their own, the echo,
// and a bad header. Requests without the header answer as before: the other contract suites.
#include <string>
#include <vector>

#include "contract/contract_support.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::Optional;

constexpr const char* kHeader = "X-Hf3fs-Namespace";
constexpr const char* kEcho = "x-hf3fs-namespace";  // RawResponse lowercases names

class NamespaceContractTest : public ContractTest {
 protected:
  // An empty `ns`: no header (the header with an empty value is refused).
  RawResponse post_in(std::string_view ns, std::string_view target, std::string_view body) {
    if (ns.empty()) return post(target, body);
    return post(target, body, {{kHeader, std::string(ns)}});
  }
  RawResponse get_in(std::string_view ns, std::string_view target) {
    return testing::raw_request(server_.host(), server_.port(), "GET", target, {}, {{kHeader, std::string(ns)}});
  }
  void init_in(std::string_view ns, Rank rank, int pages) {
    const auto r = post_in(ns, "/rank/" + std::to_string(rank) + "/initialize", R"({"num_pages":)" + std::to_string(pages) + "}");
    ASSERT_EQ(r.status, 200) << ns << " " << r.body;
  }
  // Allocates `key` on `rank` in `ns` and confirms it: the page.
  Page write_in(std::string_view ns, Rank rank, const std::string& key) {
    const auto allocated =
        post_in(ns, "/keys/batch_allocate", R"({"rank":)" + std::to_string(rank) + R"(,"keys":[[")" + key + R"(",""]]})");
    EXPECT_EQ(allocated.status, 200) << allocated.body;
    const std::string head = R"({"rank":)" + std::to_string(rank) + R"(,"results":[[")" + key + R"(",)";
    if (!allocated.body.starts_with(head)) {
      ADD_FAILURE() << allocated.body;
      return kNoPage;
    }
    const Page page = std::stoll(allocated.body.substr(head.size()));
    const auto confirmed = post_in(ns, "/keys/confirm_write",
                                   R"({"rank":)" + std::to_string(rank) + R"(,"confirmations":[[")" + key + R"(",)" +
                                       std::to_string(page) + "]]}");
    EXPECT_EQ(confirmed.status, 204) << confirmed.body;
    return page;
  }
  std::string stats_in(std::string_view ns) {
    const auto r = get_in(ns, "/stats");
    EXPECT_EQ(r.status, 200);
    return r.body;
  }
  std::string stats_default() {
    const auto r = get("/stats");
    EXPECT_EQ(r.status, 200);
    return r.body;
  }
};

TEST_F(NamespaceContractTest, TheSameKeyOnTheSameRankHasIndependentPages) {
  init_in("a", 0, 4);
  init_in("b", 0, 8);
  init_in("default", 0, 2);  // `default` names the default namespace
  EXPECT_EQ(write_in("a", 0, "x"), 0);
  EXPECT_EQ(write_in("a", 0, "k"), 1);
  EXPECT_EQ(write_in("b", 0, "k"), 0);  // b's own pool
  EXPECT_EQ(write_in("", 0, "k"), 0);   // no header: the default namespace
  EXPECT_EQ(post_in("a", "/keys/get_locations", R"({"rank":0,"keys":["k","x"]})").body, R"({"locations":[1,0]})");
  EXPECT_EQ(post_in("b", "/keys/get_locations", R"({"rank":0,"keys":["k","x"]})").body, R"({"locations":[0,null]})");
  EXPECT_EQ(post("/keys/get_locations", R"({"rank":0,"keys":["k","x"]})").body, R"({"locations":[0,null]})");
  EXPECT_EQ(post_in("default", "/keys/get_locations", R"({"rank":0,"keys":["k"]})").body, R"({"locations":[0]})");
  // Each namespace's rank has the size it was made with.
  EXPECT_THAT(stats_in("a"), ::testing::HasSubstr(R"("rank":0,"num_pages":4,"free":2,"allocated":0,"mapped":2)"));
  EXPECT_THAT(stats_in("b"), ::testing::HasSubstr(R"("rank":0,"num_pages":8,"free":7,"allocated":0,"mapped":1)"));
  EXPECT_THAT(stats_default(), ::testing::HasSubstr(R"("rank":0,"num_pages":2,"free":1,"allocated":0,"mapped":1)"));
}

TEST_F(NamespaceContractTest, NoCallCrossesIntoAnotherNamespace) {
  init_in("a", 0, 4);
  init_in("a", 1, 4);
  init_in("b", 0, 4);
  init_in("b", 1, 4);
  for (const char* ns : {"a", "b"}) {
    for (Rank rank : {0, 1}) write_in(ns, rank, "k");
    write_in(ns, 0, "half");
  }
  const std::string b_before = stats_in("b");
  const auto b_view = [&] {
    return post_in("b", "/keys/batch_exists", R"({"keys":["k","half"]})").body + " " +
           post_in("b", "/keys/get_locations", R"({"rank":1,"keys":["k"]})").body + " " + stats_in("b");
  };
  const std::string b_seen = b_view();
  EXPECT_EQ(b_seen, R"({"exists":[true,false]} {"locations":[0]} )" + b_before);
  // Reads in a see only a's keys.
  EXPECT_EQ(post_in("a", "/keys/batch_exists", R"({"keys":["k","half","zz"]})").body, R"({"exists":[true,false,false]})");
  // delete_keys, drop_rank, /clear in a: b unchanged after each.
  EXPECT_EQ(post_in("a", "/keys/delete", R"({"keys":["k"]})").body, R"({"deleted":[true]})");
  EXPECT_EQ(b_view(), b_seen);
  EXPECT_EQ(post_in("a", "/rank/1/drop", "").body, R"({"rank":1,"dropped":true,"pages":4,"mappings":0,"keys_removed":0})");
  EXPECT_EQ(b_view(), b_seen);
  EXPECT_EQ(post_in("a", "/clear", "").status, 204);
  EXPECT_EQ(b_view(), b_seen);
  EXPECT_EQ(post_in("a", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})").body,
            R"({"detail":"Allocation failed: Rank 0 not initialized"})");
  // And the default namespace saw none of it.
  EXPECT_EQ(post("/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  EXPECT_EQ(stats_default(), R"({"ranks":[],"keys_complete":0,"keys_incomplete":0,"keys_leased":0,"key_records":0,)"
                             R"("evicted_keys":0,"deleted_keys":0,"reclaimed_keys":0,"reclaimed_allocated_pages":0,)"
                             R"("reclaimed_orphaned_pages":0})");
  // /clear in the default namespace leaves b alone.
  EXPECT_EQ(post("/clear", "").status, 204);
  EXPECT_EQ(b_view(), b_seen);
}

// A TP=2 instance in namespace a (ranks 0-1) and a TP=4 one in b (ranks 0-3) write the same keys:
// each key completes in its namespace at its own tp_world_size.
TEST_F(NamespaceContractTest, ATp2AndATp4InstanceBothCompleteTheirKeys) {
  for (Rank rank = 0; rank < 2; ++rank) init_in("a", rank, 16);
  for (Rank rank = 0; rank < 4; ++rank) init_in("b", rank, 16);
  const std::vector<std::string> keys = {"blk-0", "blk-1", "blk-2"};
  for (const auto& key : keys) {
    for (Rank rank = 0; rank < 2; ++rank) write_in("a", rank, key);
    for (Rank rank = 0; rank < 2; ++rank) write_in("b", rank, key);  // b: half way
  }
  const std::string body = R"({"keys":["blk-0","blk-1","blk-2"]})";
  EXPECT_EQ(post_in("a", "/keys/batch_exists", body).body, R"({"exists":[true,true,true]})");
  EXPECT_EQ(post_in("b", "/keys/batch_exists", body).body, R"({"exists":[false,false,false]})");
  EXPECT_EQ(post_in("b", "/keys/status", R"({"keys":["blk-0"]})").body,
            R"({"ranks_initialized":4,"status":[{"ranks":[0,1],"tp_world_size":4,"complete":false}]})");
  for (const auto& key : keys) {
    for (Rank rank = 2; rank < 4; ++rank) write_in("b", rank, key);
  }
  EXPECT_EQ(post_in("b", "/keys/batch_exists", body).body, R"({"exists":[true,true,true]})");
  EXPECT_EQ(post_in("a", "/keys/status", R"({"keys":["blk-2"]})").body,
            R"({"ranks_initialized":2,"status":[{"ranks":[0,1],"tp_world_size":2,"complete":true}]})");
  EXPECT_EQ(post_in("b", "/keys/status", R"({"keys":["blk-2"]})").body,
            R"({"ranks_initialized":4,"status":[{"ranks":[0,1,2,3],"tp_world_size":4,"complete":true}]})");
  for (Rank rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(post_in("b", "/keys/get_locations", R"({"rank":)" + std::to_string(rank) + R"(,"keys":["blk-2"]})").body,
              R"({"locations":[2]})");
  }
}

TEST_F(NamespaceContractTest, NamespacesDropAndKeyStatusOverHttp) {
  init_in("m1", 0, 8);
  init_in("m1", 1, 8);
  write_in("m1", 0, "k");
  write_in("m1", 1, "k");
  init_in("", 0, 2);
  const auto listed = get("/namespaces");
  EXPECT_EQ(listed.status, 200);
  EXPECT_THAT(listed.header("content-type"), Optional(std::string("application/json")));
  EXPECT_EQ(listed.body, R"({"namespaces":[{"name":"default","ranks":[0],"pages":2,"keys":0},)"
                         R"({"name":"m1","ranks":[0,1],"pages":16,"keys":1}]})");
  EXPECT_EQ(post_in("m1", "/keys/status", R"({"keys":["k","nope"]})").body,
            R"({"ranks_initialized":2,"status":[{"ranks":[0,1],"tp_world_size":2,"complete":true},null]})");
  EXPECT_EQ(post_in("m1", "/keys/status", R"({"keys":5})").body, R"({"detail":"Invalid keys format"})");
  // The default namespace cannot be dropped; a bad name in the path is 400 and is not echoed.
  const auto refused = post("/namespaces/default/drop", "");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.body, R"({"detail":"the default namespace cannot be dropped: POST /clear in it empties it"})");
  const auto bad = post("/namespaces/a%0Ab/drop", "");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body,
            R"({"detail":"the namespace in the path must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"})");
  EXPECT_EQ(get("/namespaces").body, listed.body);
  EXPECT_EQ(post("/namespaces/m1/drop", "").body,
            R"({"namespace":"m1","dropped":true,"ranks":2,"pages":16,"keys_removed":1})");
  EXPECT_EQ(post("/namespaces/m1/drop", "").body,
            R"({"namespace":"m1","dropped":false,"ranks":0,"pages":0,"keys_removed":0})");
  EXPECT_EQ(get("/namespaces").body, R"({"namespaces":[{"name":"default","ranks":[0],"pages":2,"keys":0}]})");
  EXPECT_EQ(post_in("m1", "/keys/batch_exists", R"({"keys":["k"]})").body, R"({"exists":[false]})");
  // Their methods and trailing slashes route as every endpoint's do.
  EXPECT_EQ(post("/namespaces", "").status, 405);
  EXPECT_EQ(get("/namespaces/").status, 307);
}

TEST_F(NamespaceContractTest, AnAnswerEchoesTheNamespaceOnlyWhenTheRequestNamedOne) {
  const auto named = post_in("m1", "/rank/0/initialize", R"({"num_pages":2})");
  EXPECT_EQ(named.status, 200);
  EXPECT_THAT(named.header(kEcho), Optional(std::string("m1")));
  EXPECT_EQ(named.header_count(kEcho), 1u);
  const auto refused = post_in("m1", "/keys/batch_allocate", R"({"rank":7,"keys":[]})");
  EXPECT_EQ(refused.status, 500);
  EXPECT_THAT(refused.header(kEcho), Optional(std::string("m1")));
  EXPECT_THAT(post_in("default", "/clear", "").header(kEcho), Optional(std::string("default")));
  EXPECT_THAT(get_in("m1", "/namespaces").header(kEcho), Optional(std::string("m1")));
  // Without the header: no echo, on any route.
  EXPECT_FALSE(post("/rank/0/initialize", R"({"num_pages":2})").header(kEcho));
  EXPECT_FALSE(get("/namespaces").header(kEcho));
  EXPECT_FALSE(get("/stats").header(kEcho));
  EXPECT_FALSE(post("/nope", "").header(kEcho));
}

// /_faults forget_state models a restart of a memory-only server: every namespace goes.
TEST_F(NamespaceContractTest, ForgetStateForgetsEveryNamespace) {
  init_in("a", 0, 2);
  init_in("", 0, 2);
  forget_state();
  EXPECT_EQ(get("/namespaces").body, R"({"namespaces":[{"name":"default","ranks":[],"pages":0,"keys":0}]})");
  EXPECT_EQ(post_in("a", "/keys/batch_allocate", R"({"rank":0,"keys":[["k",""]]})").body,
            R"({"detail":"Allocation failed: Rank 0 not initialized"})");
}

TEST_F(NamespaceContractTest, ABadOrRepeatedHeaderIs400AndChangesNothing) {
  init_in("a", 0, 2);
  const std::string before = get("/namespaces").body;
  const std::string invalid =
      R"({"detail":"X-Hf3fs-Namespace must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"})";
  for (const std::string& bad : {std::string("a b"), std::string(65, 'a'), std::string("*"), std::string("\xC3\xA9")}) {
    const auto r = post_in(bad, "/rank/1/initialize", R"({"num_pages":2})");
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.body, invalid);
    EXPECT_FALSE(r.header(kEcho)) << "a bad value is never echoed";
  }
  const auto twice = post("/rank/1/initialize", R"({"num_pages":2})", {{kHeader, "a"}, {kHeader, "a"}});
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(twice.body, R"({"detail":"X-Hf3fs-Namespace was given more than once"})");
  EXPECT_EQ(get("/namespaces").body, before);
}

}  // namespace
}  // namespace hf3fs_meta::contract
