// Request ids and the pages of their answers, at the router (no sockets), over a state whose clock
// the test moves: a repeated id never hands out a page that was taken back since its first answer
// (reclaimed by --allocation-ttl-ms, evicted, deleted, its rank dropped), it gets 409 instead. And
// MetadataState::holds, the check behind it, on its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/protocol.hpp"
#include "durable/store.hpp"
#include "hf3fs_meta/state.hpp"
#include "metrics.hpp"
#include "router.hpp"
#include "server_options.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::server {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kTtl = 100ms;

struct Answer {
  int status = 0;
  std::string body;
};

class RouterDedupTest : public ::testing::Test {
 protected:
  RouterDedupTest() : state_(state_options()), router_(options_, state_, metrics_) {}

  StateOptions state_options() {
    StateOptions o;
    o.eviction = Eviction::lru;
    o.allocation_ttl = kTtl;
    o.clock = [this] { return now_; };
    return o;
  }
  static ServerOptions server_options() {
    ServerOptions o;
    o.dedup_ttl = std::chrono::hours(1);  // no answer leaves its window here: only pages go
    return o;
  }

  // `ns`: the request's X-Hf3fs-Namespace (empty: none), which Router::admit reads.
  Answer send(std::string target, std::string body, std::string id = {}, std::string_view ns = {}) {
    Request request;
    request.method = "POST";
    request.target = std::move(target);
    request.body = std::move(body);
    request.request_id = std::move(id);
    request.ns = ns;
    request.ns_headers = ns.empty() ? 0 : 1;
    exchange_.reset();
    const auto next = router_.step(request, exchange_);
    EXPECT_EQ(next, Router::Next::reply);
    return Answer{exchange_.reply.status, exchange_.reply.body};
  }
  static std::string allocate_body(int rank, const std::vector<std::string>& keys) {
    std::string body = R"({"rank":)" + std::to_string(rank) + R"(,"keys":[)";
    for (std::size_t i = 0; i < keys.size(); ++i) body += (i ? ",[\"" : "[\"") + keys[i] + "\",\"\"]";
    return body + "]}";
  }
  Answer allocate(int rank, const std::vector<std::string>& keys, std::string id = {}, std::string_view ns = {}) {
    return send("/keys/batch_allocate", allocate_body(rank, keys), std::move(id), ns);
  }
  Answer confirm(int rank, const std::string& key, Page page) {
    return send("/keys/confirm_write", R"({"rank":)" + std::to_string(rank) + R"(,"confirmations":[[")" + key +
                                           "\"," + std::to_string(page) + "]]}");
  }
  void initialize(int rank, int pages) {
    ASSERT_EQ(send("/rank/" + std::to_string(rank) + "/initialize", R"({"num_pages":)" + std::to_string(pages) + "}")
                  .status,
              200);
  }
  static std::vector<Page> pages_of(const Answer& answer, const std::vector<std::string>& keys) {
    std::vector<BlockKey> sent(keys.begin(), keys.end());
    auto pages = protocol::decode_allocate_response(answer.body, sent);
    EXPECT_TRUE(pages.has_value()) << answer.body;
    return pages ? pages.value() : std::vector<Page>{};
  }

  std::chrono::milliseconds now_{1000};
  ServerOptions options_ = server_options();  // the router keeps a reference
  Metrics metrics_{1};
  MetadataState state_;
  Router router_;
  Exchange exchange_;
};

// The path: the TTL reclaims K1's page, K2 is allocated it and confirms it; K1's allocate
// repeated under its id must not answer "K1 -> 0" (its writer would write over K2's bytes).
TEST_F(RouterDedupTest, ARepeatAfterTheTtlReclaimedItsPageIs409) {
  initialize(0, 1);
  const auto first = allocate(0, {"K1"}, "r1");
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(pages_of(first, {"K1"}), std::vector<Page>{0});
  now_ += kTtl - 1ms;
  EXPECT_EQ(allocate(0, {"K1"}, "r1").body, first.body);  // still K1's
  now_ += 1ms;
  // Reclaimed by this very call (the check processes what expired first), not yet anyone's.
  const auto after_reclaim = allocate(0, {"K1"}, "r1");
  EXPECT_EQ(after_reclaim.status, 409);
  EXPECT_THAT(after_reclaim.body, HasSubstr("X-Request-Id r1: the pages of its answer were taken back since"));
  EXPECT_THAT(after_reclaim.body, HasSubstr("on rank 0"));
  EXPECT_EQ(state_.page_state(0, 0), PageState::free);  // nothing applied again
  ASSERT_EQ(pages_of(allocate(0, {"K2"}), {"K2"}), std::vector<Page>{0});
  ASSERT_EQ(confirm(0, "K2", 0).status, 204);
  EXPECT_EQ(allocate(0, {"K1"}, "r1").status, 409);
  EXPECT_EQ(state_.page_owner(0, 0), "K2");
}

// One page of several taken back is enough for the whole answer to be refused.
TEST_F(RouterDedupTest, OnePageTakenBackOfSeveralRefusesTheWholeAnswer) {
  initialize(0, 3);
  const auto first = allocate(0, {"a", "b"}, "r1");
  ASSERT_EQ(pages_of(first, {"a", "b"}), (std::vector<Page>{0, 1}));
  ASSERT_EQ(confirm(0, "a", 0).status, 204);
  EXPECT_EQ(allocate(0, {"a", "b"}, "r1").body, first.body);  // "a" mapped, "b" allocated: both theirs
  ASSERT_EQ(send("/keys/delete", R"({"keys":["a"]})").status, 200);
  EXPECT_EQ(allocate(0, {"a", "b"}, "r1").status, 409);
}

// Request ids per namespace. Router::admit sets Exchange::ns; these tests set it
// themselves. The namespaces' pages are set up on the state directly, so that what is checked is the
// router's part: which entry answers, and in which namespace its pages are checked.

// The same id and body in two namespaces are two requests: the second is applied, not answered from
// the first's entry.
TEST_F(RouterDedupTest, TheSameIdAndBodyInTwoNamespacesAreBothApplied) {
  initialize(0, 4);
  ASSERT_TRUE(state_.initialize(NamespaceRef{"m1"}, 0, 4).has_value());
  const auto first = allocate(0, {"K"}, "r1");
  ASSERT_EQ(first.status, 200) << first.body;
  const auto second = allocate(0, {"K"}, "r1", "m1");
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(router_.dedup().stats().hits, 0u);     // neither answered from a kept answer
  // Applied in m1 (Service acts in Exchange::ns): "K" holds page 0 of each namespace's rank 0.
  const std::vector<BlockKey> k{"K"};
  const std::vector<Page> page0{0};
  EXPECT_EQ(second.body, first.body);
  EXPECT_TRUE(state_.holds(NamespaceRef{"m1"}, 0, page0, k));
  EXPECT_TRUE(state_.holds(NamespaceRef{}, 0, page0, k));
  EXPECT_EQ(router_.dedup().stats().entries, 2u);  // each kept under its own namespace
  EXPECT_EQ(allocate(0, {"K"}, "r1").body, first.body);
  EXPECT_EQ(router_.dedup().stats().hits, 1u);
}

// Each namespace's repeat is answered from its own entry, its pages checked in its own namespace;
// the header's "default" is the default namespace; after a drop of the namespace its repeat is 409,
// as after /clear, and never applied afresh.
TEST_F(RouterDedupTest, EachRepeatIsAnsweredFromItsOwnNamespaceAndIs409AfterADrop) {
  using K = std::vector<BlockKey>;
  ASSERT_TRUE(state_.initialize(NamespaceRef{}, 0, 4).has_value());
  ASSERT_EQ(state_.allocate(NamespaceRef{}, 0, K{"X", "K"}).value(), (std::vector<Page>{0, 1}));
  ASSERT_TRUE(state_.initialize(NamespaceRef{"m1"}, 0, 4).has_value());
  ASSERT_EQ(state_.allocate(NamespaceRef{"m1"}, 0, K{"K"}).value(), std::vector<Page>{0});
  const std::string body = allocate_body(0, {"K"});
  const auto hash = DedupCache::body_hash(body);
  const int route = static_cast<int>(Route::batch_allocate);
  router_.dedup().restore("", route, "r1", hash, body.size(), KeptAnswer{200, {1}, 0});
  router_.dedup().restore("m1", route, "r1", hash, body.size(), KeptAnswer{200, {0}, 0});
  const auto in_default = allocate(0, {"K"}, "r1");
  ASSERT_EQ(in_default.status, 200) << in_default.body;
  EXPECT_EQ(pages_of(in_default, {"K"}), std::vector<Page>{1});
  EXPECT_EQ(allocate(0, {"K"}, "r1", "default").body, in_default.body);
  const auto m1 = allocate(0, {"K"}, "r1", "m1");
  ASSERT_EQ(m1.status, 200) << m1.body;
  EXPECT_EQ(pages_of(m1, {"K"}), std::vector<Page>{0});
  EXPECT_EQ(router_.dedup().stats().hits, 3u);

  ASSERT_TRUE(state_.drop_namespace("m1").value().dropped);
  const auto after_drop = allocate(0, {"K"}, "r1", "m1");
  EXPECT_EQ(after_drop.status, 409);
  EXPECT_THAT(after_drop.body, HasSubstr("X-Request-Id r1: the pages of its answer were taken back since"));
  EXPECT_TRUE(state_.namespaces().size() == 1) << "the repeat created nothing";
  EXPECT_EQ(allocate(0, {"K"}, "r1").body, in_default.body);  // the default's entry and pages are untouched
  EXPECT_EQ(router_.dedup().stats().hits, 5u);
}

// A restored answer (what recovery found: DedupEntry.tag.ns) answers its own namespace's repeat only.
TEST_F(RouterDedupTest, ARestoredAnswerAnswersOnlyItsOwnNamespace) {
  using K = std::vector<BlockKey>;
  ASSERT_TRUE(state_.initialize(NamespaceRef{"m2"}, 0, 4).has_value());
  ASSERT_EQ(state_.allocate(NamespaceRef{"m2"}, 0, K{"a", "K"}).value(), (std::vector<Page>{0, 1}));
  const std::string body = allocate_body(0, {"K"});
  const durable::DedupEntry recovered{
      7, durable::DedupTag{Route::batch_allocate, "r9", DedupCache::body_hash(body), body.size(), "m2"}, 200, {1}, 0};
  router_.dedup().restore(recovered, 0);
  const auto repeat = allocate(0, {"K"}, "r9", "m2");
  ASSERT_EQ(repeat.status, 200) << repeat.body;
  EXPECT_EQ(pages_of(repeat, {"K"}), std::vector<Page>{1});
  EXPECT_EQ(router_.dedup().stats().hits, 1u);
  // In the default namespace the id is new: applied there (no rank 0 there: the state's own 500).
  const auto in_default = allocate(0, {"K"}, "r9");
  EXPECT_EQ(in_default.status, 500) << in_default.body;
  EXPECT_EQ(router_.dedup().stats().hits, 1u);
}

// The router tags a journaled change with its request's namespace: the journal keeps the answer with
// it, and a restart (the shutdown's snapshot) gives it back to that namespace.
TEST(RouterDedupDurable, AJournaledAnswerKeepsItsNamespaceThroughARestart) {
  hf3fs_meta::testing::TempDir dir;
  const durable::Store::Options store_options{dir.path(), durable::FsyncMode::no, 0, std::size_t{1} << 20};
  ServerOptions options;
  const std::string body = R"({"rank":0,"keys":[["K",""]]})";
  {
    MetadataState state;
    auto store = std::move(durable::Store::open(store_options, state)).value();
    ASSERT_TRUE(state.initialize(NamespaceRef{}, 0, 4).has_value());
    ASSERT_TRUE(state.initialize(NamespaceRef{"m1"}, 0, 4).has_value());
    Metrics metrics{1};
    Router router(options, state, metrics, store.get());
    for (const std::string_view ns : {std::string_view{}, std::string_view{"m1"}}) {
      Request request;
      request.method = "POST";
      request.target = "/keys/batch_allocate";
      request.body = body;
      request.request_id = "r1";
      request.ns = ns;
      request.ns_headers = ns.empty() ? 0 : 1;
      Exchange exchange;
      ASSERT_EQ(router.step(request, exchange), Router::Next::reply);
      ASSERT_EQ(exchange.reply.status, 200) << exchange.reply.body;
    }
    ASSERT_TRUE(store->shutdown().has_value());
  }
  MetadataState state;
  auto store = std::move(durable::Store::open(store_options, state)).value();
  std::vector<std::string> namespaces;
  for (const auto& e : store->recovered().dedup) {
    EXPECT_EQ(e.tag.id, "r1");
    namespaces.push_back(e.tag.ns);
  }
  std::sort(namespaces.begin(), namespaces.end());
  EXPECT_EQ(namespaces, (std::vector<std::string>{"", "m1"}));
}

TEST(StateHolds, APageIsHeldWhileAllocatedForOrMappedToItsKey) {
  MetadataState state;
  ASSERT_TRUE(state.initialize(0, 4).has_value());
  const std::vector<BlockKey> keys{"a", "b", "c"};
  ASSERT_EQ(state.allocate(0, keys).value(), (std::vector<Page>{0, 1, 2}));
  const std::vector<Confirmation> a0{{"a", 0}};
  ASSERT_TRUE(state.confirm_write(0, a0, {}).has_value());
  using P = std::vector<Page>;
  using K = std::vector<BlockKey>;
  EXPECT_TRUE(state.holds(0, P{0, 1, kNoPage}, K{"a", "b", "zz"}));  // mapped, allocated, no page
  EXPECT_TRUE(state.holds(0, P{}, K{}));
  EXPECT_FALSE(state.holds(0, P{1}, K{"c"}));   // allocated for another key
  EXPECT_FALSE(state.holds(0, P{0}, K{"b"}));   // mapped to another key
  EXPECT_FALSE(state.holds(0, P{3}, K{"a"}));   // free
  EXPECT_FALSE(state.holds(0, P{4}, K{"a"}));   // beyond the rank
  EXPECT_FALSE(state.holds(0, P{-2}, K{"a"}));
  EXPECT_FALSE(state.holds(7, P{0}, K{"a"}));   // no such rank
  EXPECT_TRUE(state.holds(7, P{kNoPage}, K{"a"}));
  EXPECT_FALSE(state.holds(0, P{0, 1}, K{"a"}));  // not one page per key
  const std::vector<Confirmation> a2{{"a", 2}};
  ASSERT_FALSE(state.confirm_write(0, a2, {}).has_value());  // "c"'s page: refused, nothing changes
  EXPECT_TRUE(state.holds(0, P{0, 2}, K{"a", "c"}));
  const std::vector<Confirmation> b1{{"b", 1}};
  ASSERT_TRUE(state.confirm_write(0, b1, {}).has_value());
  EXPECT_TRUE(state.holds(0, P{1}, K{"b"}));
  state.drop_rank(0);
  EXPECT_FALSE(state.holds(0, P{1}, K{"b"}));
}

// Random allocates with ids, their repeats, confirms, deletions, drops, clears, lookups and the
// clock moving past the TTL, with eviction on. The model remembers, per page, the key a fresh answer
// or a confirm last gave it to; a repeat answered 200 must name only pages held now (allocated or
// mapped) by that same key.
TEST_F(RouterDedupTest, RandomizedRepeatsNeverAnswerAPageHeldByAnotherKey) {
  constexpr int kRanks = 2;
  constexpr int kPages = 6;
  for (int r = 0; r < kRanks; ++r) initialize(r, kPages);
  struct Sent {
    int rank;
    std::vector<std::string> keys;
    std::string id;
  };
  std::vector<Sent> sent;  // ids whose first answer was kept (200)
  std::map<std::pair<int, Page>, std::string> holder;
  std::vector<std::pair<int, std::pair<std::string, Page>>> handed;  // what confirms pick from
  int repeats_answered = 0;
  int repeats_refused = 0;
  std::mt19937 rng(20261201);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int step = 0; step < 20000; ++step) {
    const int op = pick(100);
    const int rank = pick(kRanks);
    if (op < 30) {
      std::vector<std::string> keys;
      for (int n = 1 + pick(3); static_cast<int>(keys.size()) < n;) {
        std::string key = "k" + std::to_string(pick(12));
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(std::move(key));
      }
      const std::string id = "id-" + std::to_string(step);
      const auto answer = allocate(rank, keys, id);
      if (answer.status != 200) continue;
      const auto pages = pages_of(answer, keys);
      for (std::size_t i = 0; i < pages.size(); ++i) {
        if (pages[i] == kNoPage) continue;
        holder[{rank, pages[i]}] = keys[i];
        handed.push_back({rank, {keys[i], pages[i]}});
      }
      sent.push_back(Sent{rank, keys, id});
    } else if (op < 60 && !sent.empty()) {
      const Sent& s = sent[static_cast<std::size_t>(pick(static_cast<int>(sent.size())))];
      const auto answer = allocate(s.rank, s.keys, s.id);
      if (answer.status == 409) {
        ++repeats_refused;
        EXPECT_THAT(answer.body, StartsWith(R"({"detail":"X-Request-Id )" + s.id + ": the pages"));
        continue;
      }
      ASSERT_EQ(answer.status, 200) << answer.body;
      ++repeats_answered;
      const auto pages = pages_of(answer, s.keys);
      for (std::size_t i = 0; i < pages.size(); ++i) {
        if (pages[i] == kNoPage) continue;
        const auto page_state = state_.page_state(s.rank, pages[i]);
        ASSERT_TRUE(page_state == PageState::allocated || page_state == PageState::mapped)
            << "step " << step << ": " << s.id << " answered page " << pages[i] << " of rank " << s.rank;
        ASSERT_EQ(holder[std::make_pair(s.rank, pages[i])], s.keys[i])
            << "step " << step << ": " << s.id << " answered page " << pages[i] << " of rank " << s.rank;
      }
    } else if (op < 80 && !handed.empty()) {
      const auto& [r, kp] = handed[static_cast<std::size_t>(pick(static_cast<int>(handed.size())))];
      if (confirm(r, kp.first, kp.second).status == 204) holder[{r, kp.second}] = kp.first;
    } else if (op < 88) {
      now_ += std::chrono::milliseconds(pick(60));
    } else if (op < 93) {
      send("/keys/batch_exists", R"({"keys":["k)" + std::to_string(pick(12)) + R"("]})");
    } else if (op < 97) {
      send("/keys/delete", R"({"keys":["k)" + std::to_string(pick(12)) + R"("]})");
    } else if (op < 99) {
      ASSERT_EQ(send("/rank/" + std::to_string(rank) + "/drop", "").status, 200);
      std::erase_if(holder, [&](const auto& e) { return e.first.first == rank; });
      initialize(rank, kPages);
    } else {
      ASSERT_EQ(send("/clear", "").status, 204);  // forgets no id: their repeats must be refused
      holder.clear();
      for (int r = 0; r < kRanks; ++r) initialize(r, kPages);
    }
  }
  // Both outcomes were reached: the test saw repeats of live answers and of taken-back ones.
  EXPECT_GT(repeats_answered, 100);
  EXPECT_GT(repeats_refused, 100);
}

}  // namespace
}  // namespace hf3fs_meta::server
