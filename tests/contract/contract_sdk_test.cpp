// Every endpoint and every error class the reference server can produce, through the SDK.
#include "contract/contract_support.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

class ContractSdkTest : public ContractTest {};

// ---- Endpoints ----

TEST_F(ContractSdkTest, InitializeAnswersWithTheServersMessage) {
  auto client = make_client();
  EXPECT_THAT(client->initialize(3, 1024), HasValue(std::string("Rank 3 initialized with 1024 pages")));
  // Idempotent: the rank keeps its 1024 pages, the reply names the count asked for.
  EXPECT_THAT(client->initialize(3, 5), HasValue(std::string("Rank 3 initialized with 5 pages")));
  EXPECT_EQ(pages(3), (RankPages{1024, 0, 0, 0, 0}));
  EXPECT_THAT(client->initialize(4, 0, Role::scheduler),
              HasValue(std::string("Scheduler role does not require initialization")));
  EXPECT_EQ(snapshot().ranks.count(4), 0u);
  EXPECT_THAT(client->ensure_initialized(-2, 8), HasValue(std::string("Rank -2 initialized with 8 pages")));
  EXPECT_EQ(pages(-2).free, 8);
}

TEST_F(ContractSdkTest, AllocateConfirmExistsLocationsLifecycle) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  ASSERT_THAT(client->ensure_initialized(1, 8), IsOk());

  auto a0 = client->allocate(0, {"k1", "k2", "k3"});
  ASSERT_TRUE(a0) << describe(a0.error());
  EXPECT_THAT(a0.value(), ElementsAre(0, 1, 2));
  // Prefix keys travel as the second element of each pair; the answer still names the key.
  auto a1 = client->allocate(1, std::vector<BlockKey>{{"k1", "p"}, {"k2", ""}});
  ASSERT_TRUE(a1) << describe(a1.error());
  EXPECT_THAT(a1.value(), ElementsAre(0, 1));
  EXPECT_EQ(pages(0), (RankPages{5, 3, 0, 0, 0}));

  // k1 on both ranks (complete: two ranks existed at its first confirmation), k2 on rank 0 only,
  // k3's page released.
  ASSERT_THAT(client->confirm_write(0, {{"k1", 0}, {"k2", 1}}, {2}), IsOk());
  ASSERT_THAT(client->confirm_write(1, {{"k1", 0}}, {1}), IsOk());
  EXPECT_EQ(pages(0), (RankPages{6, 0, 2, 0, 0}));
  EXPECT_EQ(pages(1), (RankPages{8 - 1, 0, 1, 0, 0}));

  EXPECT_THAT(client->batch_exists({"k1", "k2", "k3", "never"}), HasValue(ElementsAre(true, false, false, false)));
  EXPECT_THAT(client->get_locations(0, {"k1", "k2", "never"}),
              HasValue(ElementsAre(Optional(Page{0}), std::nullopt, std::nullopt)));
  EXPECT_THAT(client->get_locations(1, {"k1"}), HasValue(ElementsAre(Optional(Page{0}))));

  // A complete key gets its own page back (the page taken for it, 3, goes to the back of the pool,
  // behind the released 2).
  EXPECT_THAT(client->allocate(0, {"k1", "k4"}),
              HasValue(ElementsAre(0, 4)));
  // Empty batches are answered as such.
  EXPECT_THAT(client->allocate(0, {}), HasValue(::testing::IsEmpty()));
  EXPECT_THAT(client->batch_exists({}), HasValue(::testing::IsEmpty()));
  EXPECT_THAT(client->confirm_write(0, {}, {}), IsOk());
}

// The SDK names the key of a page it releases (the server advertises keyed releases), so a late
// release cannot free a page that went to another key since: vLLM's bare release would have.
TEST_F(ContractSdkTest, ALateReleaseThroughTheSdkLeavesAnotherKeysPage) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 1), IsOk());
  ASSERT_THAT(client->allocate(0, {"k1"}), HasValue(ElementsAre(0)));
  // Page 0 goes back to the pool behind the SDK's back and is allocated for k3.
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[],"pages_to_release":[0]})").status, 204);
  const auto k3 = post("/keys/batch_allocate", R"({"rank":0,"keys":[["k3",""]]})");
  ASSERT_EQ(k3.status, 200);
  ASSERT_THAT(k3.body, HasSubstr(R"(["k3",0])"));
  // k1's writer gives its page up late: sent as ["k1",0], it frees nothing.
  ASSERT_THAT(client->confirm_write(0, {}, {0}), IsOk());
  EXPECT_EQ(pages(0), (RankPages{0, 1, 0, 0, 0}));
  // k3's own confirmation still takes the page.
  ASSERT_EQ(post("/keys/confirm_write", R"({"rank":0,"confirmations":[["k3",0]]})").status, 204);
  EXPECT_EQ(pages(0), (RankPages{0, 0, 1, 0, 0}));
}

TEST_F(ContractSdkTest, AllocateGivesNoPageWhenThePoolIsShortAndTakesNothing) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 2), IsOk());
  EXPECT_THAT(client->allocate(0, {"a", "b", "c"}),
              HasValue(ElementsAre(kNoPage, kNoPage, kNoPage)));
  EXPECT_EQ(pages(0), (RankPages{2, 0, 0, 0, 0}));
  EXPECT_THAT(client->allocate(0, {"a", "b"}),
              HasValue(ElementsAre(0, 1)));
}

TEST_F(ContractSdkTest, KeysWithCharactersThatNeedEscapingRoundTrip) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 4), IsOk());
  const std::vector<std::string> keys{"quote\"back\\slash", "tab\tnew\nline", "caf\xC3\xA9 \xE2\x82\xAC",
                                      "9e107d9d372bb6826bd81d3542a419d6"};
  auto a = client->allocate(0, blocks(keys));
  ASSERT_TRUE(a) << describe(a.error());
  EXPECT_THAT(a.value(), ElementsAre(0, 1, 2, 3));
  std::vector<Confirmation> confirmations;
  for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i], a.value()[i]});
  ASSERT_THAT(client->confirm_write(0, confirmations), IsOk());
  EXPECT_THAT(client->batch_exists(keys), HasValue(ElementsAre(true, true, true, true)));
  EXPECT_THAT(client->get_locations(0, keys), HasValue(ElementsAre(Optional(Page{0}), Optional(Page{1}),
                                                                   Optional(Page{2}), Optional(Page{3}))));
}

TEST_F(ContractSdkTest, ClearForgetsRanksAndKeys) {
  auto client = make_client();
  ASSERT_THAT(client->initialize(0, 4), IsOk());  // not registered: nothing restores it
  ASSERT_THAT(client->allocate(0, {"k"}), IsOk());
  ASSERT_THAT(client->confirm_write(0, {{"k", 0}}), IsOk());
  ASSERT_THAT(client->batch_exists({"k"}), HasValue(ElementsAre(true)));

  ASSERT_THAT(client->clear(), IsOk());
  EXPECT_EQ(snapshot(), (StateSnapshot{{}, 0}));
  EXPECT_THAT(client->batch_exists({"k"}), HasValue(ElementsAre(false)));
  auto again = client->allocate(0, {"k"});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, errc::rank_not_initialized);
}

// The extensions: POST /keys/delete, and GET /stats (the one GET the SDK sends).
TEST_F(ContractSdkTest, DeleteKeysAndStats) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 4), IsOk());
  ASSERT_THAT(client->ensure_initialized(1, 2), IsOk());
  ASSERT_THAT(client->allocate(0, {"a", "b"}), IsOk());
  ASSERT_THAT(client->allocate(1, {"a"}), IsOk());
  ASSERT_THAT(client->confirm_write(0, {{"a", 0}, {"b", 1}}), IsOk());
  ASSERT_THAT(client->confirm_write(1, {{"a", 0}}), IsOk());

  auto before = client->stats();
  ASSERT_TRUE(before) << describe(before.error());
  ASSERT_EQ(before.value().ranks.size(), 2u);
  EXPECT_EQ(before.value().ranks[0].first, 0);
  EXPECT_EQ(before.value().ranks[0].second.num_pages, 4);
  EXPECT_EQ(before.value().ranks[0].second.free, 2);
  EXPECT_EQ(before.value().ranks[0].second.mapped, 2);
  EXPECT_EQ(before.value().ranks[1].first, 1);
  EXPECT_EQ(before.value().ranks[1].second.mapped, 1);
  EXPECT_EQ(before.value().keys_complete, 1u);    // a, on both ranks
  EXPECT_EQ(before.value().keys_incomplete, 1u);  // b, on rank 0 only
  EXPECT_EQ(before.value().deleted_keys, 0u);

  // A key that is complete, one that is not, one never seen, and a repeat in the same call.
  EXPECT_THAT(client->delete_keys({"a", "b", "never", "a"}), HasValue(ElementsAre(true, true, false, false)));
  EXPECT_THAT(client->batch_exists({"a", "b"}), HasValue(ElementsAre(false, false)));
  EXPECT_EQ(pages(0), (RankPages{4, 0, 0, 0, 0}));
  EXPECT_EQ(pages(1), (RankPages{2, 0, 0, 0, 0}));
  auto after = client->stats();
  ASSERT_TRUE(after) << describe(after.error());
  EXPECT_EQ(after.value().deleted_keys, 2u);
  EXPECT_EQ(after.value().keys_complete + after.value().keys_incomplete, 0u);
  ASSERT_EQ(after.value().ranks.size(), 2u);  // the ranks stay; only the keys went
  for (const auto& [rank, r] : after.value().ranks) EXPECT_EQ(r.free, r.num_pages) << "rank " << rank;

  auto refused = client->delete_keys({"ok", ""});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_EQ(refused.error().operation, Operation::delete_keys);
}

TEST_F(ContractSdkTest, RawPostsABodyAsItIs) {
  auto client = make_client();
  auto r = client->raw("/rank/7/initialize", R"({"num_pages": 3})");
  ASSERT_TRUE(r) << describe(r.error());
  EXPECT_EQ(r.value().status, 200);
  EXPECT_EQ(r.value().content_type, "application/json");
  EXPECT_EQ(r.value().body, R"({"message":"Rank 7 initialized with 3 pages"})");
  auto c = client->raw("/clear", "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c.value().status, 204);
  EXPECT_EQ(c.value().body, "");
}

// ---- Error classes ----

TEST_F(ContractSdkTest, InvalidArgumentIsRefusedBeforeSending) {
  auto observer = std::make_shared<testing::RecordingObserver>();
  auto client = make_client(4, observer);
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  observer->reset();
  const auto before = metrics_body();

  auto dup = client->allocate(0, {"a", "b", "a"});
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, errc::invalid_argument);
  EXPECT_THAT(dup.error().detail, HasSubstr("keys[2]"));
  EXPECT_FALSE(dup.error().sent);
  EXPECT_TRUE(dup.error().request_id.empty());

  auto empty = client->get_locations(0, {"a", ""});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, errc::invalid_argument);
  EXPECT_THAT(empty.error().detail, HasSubstr("keys[1]"));

  auto negative = client->confirm_write(0, {{"a", -1}});
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.error().code, errc::invalid_argument);

  auto shared_page = client->confirm_write(0, {{"a", 1}, {"b", 1}});
  ASSERT_FALSE(shared_page);
  EXPECT_EQ(shared_page.error().code, errc::invalid_argument);

  auto no_pages = client->initialize(1, 0);
  ASSERT_FALSE(no_pages);
  EXPECT_EQ(no_pages.error().code, errc::invalid_argument);

  // Nothing reached the server, and the observer saw nothing.
  EXPECT_EQ(parse_snapshot(metrics_body()), parse_snapshot(before));
  EXPECT_EQ(requests("/keys/batch_allocate"), 0);
  EXPECT_EQ(requests("/keys/get_locations"), 0);
  EXPECT_EQ(requests("/keys/confirm_write"), 0);
  EXPECT_EQ(requests("/rank/{rank}/initialize"), 1);  // ensure_initialized's
  EXPECT_TRUE(observer->events().empty());
}

TEST_F(ContractSdkTest, InvalidRequestNamesTheField) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 8), IsOk());
  ASSERT_THAT(client->allocate(0, {"a"}), IsOk());
  const auto before = snapshot();

  auto out_of_range = client->confirm_write(0, {{"a", 0}, {"b", 8}});
  ASSERT_FALSE(out_of_range);
  EXPECT_EQ(out_of_range.error().code, errc::invalid_request);
  EXPECT_EQ(out_of_range.error().status, 400);
  EXPECT_EQ(out_of_range.error().detail, "confirmations[1]: page 8 is outside 0..7 on rank 0");
  EXPECT_EQ(out_of_range.error().attempts, 1);

  auto release = client->confirm_write(0, {}, {3, 99});
  ASSERT_FALSE(release);
  EXPECT_EQ(release.error().code, errc::invalid_request);
  EXPECT_EQ(release.error().detail, "pages_to_release[1]: page 99 is outside 0..7 on rank 0");

  // Refused as a whole: the first confirmation was not applied.
  EXPECT_EQ(snapshot(), before);
}

TEST_F(ContractSdkTest, InvalidInitializationAboveTheServersMaximum) {
  ServerProcess small({"--threads", "1", "--max-pages", "100"});
  Client client(fast_options(small));
  auto r = client.initialize(0, 101);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::invalid_initialization);
  EXPECT_EQ(r.error().status, 400);
  EXPECT_EQ(r.error().detail, "Invalid initialization parameters: num_pages 101 is above the maximum 100");
  EXPECT_THAT(client.initialize(0, 100), IsOk());
}

// Ten 40-byte initialize requests must not take the server's memory: ranks and the pages of all
// ranks together are bounded (--max-ranks, --max-total-pages), refused with the 400 wording plus why.
TEST_F(ContractSdkTest, RanksAndTotalPagesAreBounded) {
  ServerProcess small({"--threads", "1", "--max-pages", "100", "--max-ranks", "2", "--max-total-pages", "150"});
  Client client(fast_options(small));
  ASSERT_THAT(client.initialize(0, 100), IsOk());
  auto pages = client.initialize(1, 51);
  ASSERT_FALSE(pages);
  EXPECT_EQ(pages.error().code, errc::invalid_initialization);
  EXPECT_EQ(pages.error().status, 400);
  EXPECT_EQ(pages.error().detail,
            "Invalid initialization parameters: num_pages 51 would exceed the server's limit of pages");
  ASSERT_THAT(client.initialize(1, 50), IsOk());
  auto ranks = client.initialize(2, 1);
  ASSERT_FALSE(ranks);
  EXPECT_EQ(ranks.error().code, errc::invalid_initialization);
  EXPECT_EQ(ranks.error().detail, "Invalid initialization parameters: rank 2 does not fit: the server has reached its limit of ranks");
  EXPECT_THAT(client.initialize(0, 100), IsOk());  // an existing rank is still idempotent
  const auto metrics = testing::raw_request("127.0.0.1", small.port(), "GET", "/metrics");
  EXPECT_EQ(metric_series(metrics.body, "hf3fs_meta_ranks")["namespace=\"default\""], "2");
}

TEST_F(ContractSdkTest, RankNotInitializedOnEveryRankedCall) {
  auto observer = std::make_shared<testing::RecordingObserver>();
  auto client = make_client(4, observer);

  auto allocate = client->allocate(3, {"k"});
  ASSERT_FALSE(allocate);
  EXPECT_EQ(allocate.error().code, errc::rank_not_initialized);
  EXPECT_EQ(allocate.error().status, 500);
  EXPECT_EQ(allocate.error().detail, "Allocation failed: Rank 3 not initialized");
  EXPECT_EQ(allocate.error().cause, "Rank 3 not initialized");
  EXPECT_THAT(allocate.error().rank, Optional(Rank{3}));
  EXPECT_FALSE(allocate.error().reinitialized);
  EXPECT_EQ(allocate.error().attempts, 1);  // not registered: not restored, not repeated
  EXPECT_THAT(allocate.error().stop_reason, HasSubstr("not registered"));

  auto locations = client->get_locations(4, {"k"});
  ASSERT_FALSE(locations);
  EXPECT_EQ(locations.error().code, errc::rank_not_initialized);
  EXPECT_EQ(locations.error().detail, "Failed to get key locations: Rank 4 not initialized");
  EXPECT_THAT(locations.error().rank, Optional(Rank{4}));

  auto confirm = client->confirm_write(9, {{"k", 0}});
  ASSERT_FALSE(confirm);
  EXPECT_EQ(confirm.error().code, errc::rank_not_initialized);
  EXPECT_EQ(confirm.error().detail, "Confirmation failed: 9");
  EXPECT_THAT(confirm.error().rank, Optional(Rank{9}));
  // The reference server applies nothing for a rank it does not know.
  EXPECT_EQ(snapshot(), (StateSnapshot{{}, 0}));

  for (const auto& e : observer->events()) EXPECT_NE(e.kind, testing::ObservedEvent::Kind::reinitialize);
}

TEST_F(ContractSdkTest, StaleAllocationForAFreePageAndForAnotherKeysPage) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 4), IsOk());
  ASSERT_THAT(client->allocate(0, {"a", "b"}), IsOk());
  ASSERT_THAT(client->confirm_write(0, {{"a", 0}}), IsOk());
  const auto before = snapshot();

  auto free_page = client->confirm_write(0, {{"b", 1}, {"c", 3}});
  ASSERT_FALSE(free_page);
  EXPECT_EQ(free_page.error().code, errc::stale_allocation);
  EXPECT_EQ(free_page.error().status, 409);
  EXPECT_EQ(free_page.error().detail, "Confirmation failed: page 3 of key c is not allocated on rank 0");
  EXPECT_THAT(free_page.error().rank, Optional(Rank{0}));
  EXPECT_EQ(free_page.error().attempts, 1);

  auto taken = client->confirm_write(0, {{"b", 0}});
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, errc::stale_allocation);
  EXPECT_EQ(taken.error().detail, "Confirmation failed: page 0 of key b is mapped to key a on rank 0");

  EXPECT_EQ(snapshot(), before);
  EXPECT_THAT(client->get_locations(0, {"a", "b"}), HasValue(ElementsAre(Optional(Page{0}), std::nullopt)));
}

TEST_F(ContractSdkTest, ValidationErrorForAPathRankThatIsNotAnInteger) {
  auto client = make_client();
  auto r = client->raw("/rank/abc/initialize", R"({"num_pages":4})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::validation_error);
  EXPECT_EQ(r.error().status, 422);
  EXPECT_THAT(r.error().detail, HasSubstr("Input should be a valid integer"));
  EXPECT_EQ(snapshot().ranks.size(), 0u);
}

TEST_F(ContractSdkTest, ServerErrorForA500WithoutAKnownDetail) {
  auto client = make_client();
  add_fault(R"({"path":"/keys/batch_exists","status":500,"times":1})");
  // raw is never repeated, so the injected 500 comes back as it is.
  auto r = client->raw("/keys/batch_exists", R"({"keys":[]})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::server_error);
  EXPECT_EQ(r.error().status, 500);
  EXPECT_EQ(r.error().detail, "injected fault");
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_EQ(requests("/keys/batch_exists", 500), 1);
}

// vLLM's other 500s, injected with its own wording: each SDK call classifies them by the detail's
// operation prefix, and does not repeat them.
TEST_F(ContractSdkTest, OperationFailuresCarryVllmsDetailsAndAreNotRepeated) {
  auto client = make_client();
  ASSERT_THAT(client->ensure_initialized(0, 4), IsOk());
  add_fault(R"j({"path":"/keys/batch_allocate","status":500,"detail":"Allocation failed: too many values to unpack (expected 2)"})j");
  add_fault(R"({"path":"/keys/confirm_write","status":500,"detail":"Confirmation failed: 'int' object is not iterable"})");
  add_fault(R"({"path":"/keys/batch_exists","status":500,"detail":"Key existence check failed: unhashable type: 'list'"})");
  add_fault(R"({"path":"/keys/get_locations","status":500,"detail":"Failed to get key locations: boom"})");

  auto a = client->allocate(0, {"k"});
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, errc::allocation_failed);
  EXPECT_EQ(a.error().cause, "too many values to unpack (expected 2)");
  EXPECT_EQ(a.error().attempts, 1);

  auto c = client->confirm_write(0, {{"k", 0}});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::confirmation_failed);
  EXPECT_EQ(c.error().attempts, 1);

  auto e = client->batch_exists({"k"});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::existence_check_failed);
  EXPECT_EQ(e.error().attempts, 1);

  auto l = client->get_locations(0, {"k"});
  ASSERT_FALSE(l);
  EXPECT_EQ(l.error().code, errc::location_lookup_failed);
  EXPECT_EQ(l.error().cause, "boom");
  EXPECT_EQ(l.error().attempts, 1);
  // Nothing was applied by any of them.
  EXPECT_EQ(pages(0), (RankPages{4, 0, 0, 0, 0}));
}

// vLLM's KeyError wording for confirm_write on a rank it forgot: the bare rank.
TEST_F(ContractSdkTest, BareRankConfirmationFailureIsRankNotInitialized) {
  auto client = make_client();
  add_fault(R"({"path":"/keys/confirm_write","status":500,"detail":"Confirmation failed: 9"})");
  auto r = client->confirm_write(9, {}, {3});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::rank_not_initialized);
  EXPECT_EQ(r.error().rank, 9);
  EXPECT_FALSE(r.error().reinitialized);  // rank 9 is not registered
}

TEST_F(ContractSdkTest, ProtocolErrorForAMalformedSuccess) {
  auto client = make_client();
  add_fault(R"({"path":"/keys/batch_exists","status":200,"body":"{\"exists\":[true,true]}"})");
  auto r = client->batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_EQ(r.error().status, 200);
  EXPECT_EQ(r.error().attempts, 1);
}

TEST_F(ContractSdkTest, UnavailableAfterTheAttemptsRunOut) {
  auto observer = std::make_shared<testing::RecordingObserver>();
  auto client = make_client(2, observer);
  ASSERT_THAT(client->ensure_initialized(0, 4), IsOk());
  add_fault(R"({"path":"/keys/batch_allocate","status":503,"times":2})");
  observer->reset();
  auto r = client->allocate(0, {"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().status, 503);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("retry policy exhausted after 2 attempts"));
  EXPECT_THAT(observer->trace(), ElementsAre("attempt 1", "retry 1", "attempt 2", "give_up 2"));
  // A 503 applies nothing.
  EXPECT_EQ(pages(0), (RankPages{4, 0, 0, 0, 0}));
  EXPECT_EQ(requests("/keys/batch_allocate", 503), 2);
}

TEST_F(ContractSdkTest, UnavailableFromAGatewayStatusIsNotRepeatedForAnUnsafeCall) {
  auto client = make_client();
  add_fault(R"({"path":"/clear","status":502,"times":1})");
  auto r = client->clear();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unavailable);
  EXPECT_EQ(r.error().status, 502);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("not safe to repeat clear"));
}

TEST_F(ContractSdkTest, UnexpectedStatusForAnUnknownPathAndARedirect) {
  auto client = make_client();
  auto missing = client->raw("/keys/nothing_here", "{}");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::unexpected_status);
  EXPECT_EQ(missing.error().status, 404);
  EXPECT_EQ(missing.error().detail, "Not Found");

  auto redirect = client->raw("/clear/", "");
  ASSERT_FALSE(redirect);
  EXPECT_EQ(redirect.error().code, errc::unexpected_status);
  EXPECT_EQ(redirect.error().status, 307);
  EXPECT_EQ(requests("/clear"), 0);  // the redirect is not followed
}

TEST_F(ContractSdkTest, AuthTokenOpensAServerThatAsksForOne) {
  testing::TempFile token_file("sdk-token\n");
  ServerProcess guarded({"--threads", "1", "--auth-token-file", token_file.path()});
  auto options = fast_options(guarded, 1);
  options.auth_token = "sdk-token";
  Client client(options);
  EXPECT_THAT(client.initialize(0, 8), IsOk());
  EXPECT_THAT(client.batch_exists({"k"}), IsOk());
  EXPECT_THAT(client.clear(), IsOk());

  for (const std::string token : {"", "other-token"}) {
    SCOPED_TRACE("token '" + token + "'");
    options.auth_token = token;
    Client refused(options);
    auto r = refused.batch_exists({"k"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::unexpected_status);
    EXPECT_EQ(r.error().status, 401);
    EXPECT_EQ(r.error().detail, token.empty() ? "Not authenticated" : "Invalid authentication credentials");
  }
  EXPECT_EQ(guarded.terminate(), 0);
}

TEST_F(ContractSdkTest, UnexpectedStatusForABodyOverTheLimit) {
  ServerProcess small({"--threads", "1", "--max-body-bytes", "256"});
  Client client(fast_options(small));
  auto r = client.batch_exists(std::vector<std::string>(64, "a-key-of-some-length"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::unexpected_status);
  EXPECT_EQ(r.error().status, 413);
}

// Refused connections are repeated until the call's deadline, past the attempt count (3).
TEST_F(ContractSdkTest, ConnectionFailedWhenNothingListens) {
  auto client = make_client(3);
  ASSERT_THAT(client->batch_exists({"k"}), IsOk());
  server_.kill();
  auto r = client->batch_exists({"k"}, CallOptions{std::chrono::milliseconds(300)});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_FALSE(r.error().status.has_value());
  EXPECT_FALSE(r.error().sent);
  EXPECT_GT(r.error().attempts, 3);
  EXPECT_THAT(r.error().stop_reason, HasSubstr("deadline of 0.3 s"));
}

TEST_F(ContractSdkTest, TimeoutWhenTheAnswerComesTooLate) {
  auto o = fast_options(server_, 1);
  o.request_timeout = std::chrono::milliseconds(200);
  Client client(std::move(o));
  add_fault(R"({"path":"/keys/batch_exists","delay_ms":1000,"times":1})");
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_TRUE(r.error().sent);
  EXPECT_FALSE(r.error().status.has_value());
  EXPECT_EQ(r.error().attempts, 1);
}

}  // namespace
}  // namespace hf3fs_meta::contract
