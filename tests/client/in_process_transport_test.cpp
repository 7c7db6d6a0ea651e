// Client over the in-process transport: the server's own Service and state, no sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/in_process_transport.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::HasSubstr;

class InProcessTest : public ::testing::Test {
 protected:
  InProcessTest() {
    ClientOptions options;
    options.transport = make_in_process_transport(state);
    options.observer = observer;
    client = std::make_unique<Client>(std::move(options));
  }
  std::shared_ptr<MetadataState> state = std::make_shared<MetadataState>();
  std::shared_ptr<testing::RecordingObserver> observer = std::make_shared<testing::RecordingObserver>();
  std::unique_ptr<Client> client;
};

TEST_F(InProcessTest, WorkerLifecycle) {
  auto init = client->ensure_initialized(3, 4);
  ASSERT_TRUE(init) << init.error().message();
  EXPECT_EQ(init.value(), "Rank 3 initialized with 4 pages");
  auto a = client->allocate(3, std::vector<BlockKey>{{"a", ""}, {"b", "a"}});
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(a.value(), (std::vector<Page>{0, 1}));
  ASSERT_TRUE(client->confirm_write(3, {{"a", 0}, {"b", 1}}));
  auto e = client->batch_exists({"a", "b", "c", "a"});
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e.value(), (std::vector<bool>{true, true, false, true}));
  auto l = client->get_locations(3, {"b", "c"});
  ASSERT_TRUE(l) << l.error().message();
  EXPECT_EQ(l.value(), (std::vector<std::optional<Page>>{1, std::nullopt}));
  // The pool is short: every key gets no page.
  auto short_pool = client->allocate(3, {"c", "d", "e"});
  ASSERT_TRUE(short_pool);
  EXPECT_EQ(short_pool.value(), (std::vector<Page>{-1, -1, -1}));
}

TEST_F(InProcessTest, DeleteKeysAndStats) {
  ASSERT_TRUE(client->ensure_initialized(0, 4));
  ASSERT_TRUE(client->allocate(0, {"a", "b"}));
  ASSERT_TRUE(client->confirm_write(0, {{"a", 0}}));
  auto deleted = client->delete_keys({"a", "zz"});
  ASSERT_TRUE(deleted) << deleted.error().message();
  EXPECT_EQ(deleted.value(), (std::vector<bool>{true, false}));
  auto stats = client->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  ASSERT_EQ(stats.value().ranks.size(), 1u);
  const RankStats& r = stats.value().ranks[0].second;
  EXPECT_EQ(stats.value().ranks[0].first, 0);
  EXPECT_EQ(r.num_pages, 4);
  EXPECT_EQ(r.free, 3);
  EXPECT_EQ(r.allocated, 1);
  EXPECT_EQ(r.mapped, 0);
  EXPECT_EQ(stats.value().deleted_keys, 1u);
  EXPECT_EQ(stats.value().keys_complete, 0u);
  // An empty key is refused before anything is sent, as for the other key lists.
  auto refused = client->delete_keys({""});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::invalid_argument);
  EXPECT_EQ(refused.error().operation, Operation::delete_keys);
}

TEST_F(InProcessTest, ClearedServerIsRestoredForARegisteredRank) {
  ASSERT_TRUE(client->ensure_initialized(3, 8));
  ASSERT_TRUE(client->clear());
  EXPECT_EQ(state->rank_count(), 0u);
  observer->reset();
  auto a = client->allocate(3, {"k"});
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(a.value()[0], 0);
  EXPECT_EQ(state->rank_count(), 1u);
  EXPECT_EQ(observer->events().back().attempt, 2);
  EXPECT_TRUE(observer->events().back().reinitialized);
}

TEST_F(InProcessTest, StaleConfirmAfterRestoreIsRefused) {
  ASSERT_TRUE(client->ensure_initialized(3, 8));
  auto a = client->allocate(3, {"k"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(client->clear());
  auto c = client->confirm_write(3, {{"k", a.value()[0]}}, {});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::rank_not_initialized);
  EXPECT_TRUE(c.error().reinitialized);
  EXPECT_EQ(state->rank_count(), 1u);  // restored, not confirmed
  // Confirming the page now, though it was never allocated in the new state: stale.
  c = client->confirm_write(3, {{"k", a.value()[0]}}, {});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::stale_allocation);
  EXPECT_EQ(c.error().status, 409);
}

TEST_F(InProcessTest, ServerRefusalsAreClassified) {
  auto unregistered = client->allocate(9, {"k"});
  ASSERT_FALSE(unregistered);
  EXPECT_EQ(unregistered.error().code, errc::rank_not_initialized);
  EXPECT_EQ(unregistered.error().rank, 9);
  EXPECT_THAT(unregistered.error().message(), HasSubstr("ensure_initialized"));

  auto big = client->initialize(1, std::int64_t{1} << 40);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, errc::invalid_initialization);

  auto path = client->raw("/rank/abc/initialize", R"({"num_pages":1})");
  ASSERT_FALSE(path);
  EXPECT_EQ(path.error().code, errc::validation_error);
  EXPECT_EQ(path.error().status, 422);

  auto missing = client->raw("/nope", "{}");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::unexpected_status);
  EXPECT_EQ(missing.error().status, 404);

  auto format = client->raw("/keys/batch_exists", R"({"keys":5})");
  ASSERT_FALSE(format);
  EXPECT_EQ(format.error().code, errc::invalid_request);
  EXPECT_EQ(format.error().detail, "Invalid keys format");

  auto ok = client->raw("/keys/batch_exists", R"({"keys":["x"]})");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok.value().status, 200);
  EXPECT_EQ(ok.value().body, R"({"exists":[false]})");
}

TEST_F(InProcessTest, AnswersCarryNoDedupHeader) {
  // The in-process transport never claims deduplication.
  auto transport = make_in_process_transport(state);
  HttpRequest request{"/clear", "", {}};
  auto r = transport->post(request, AttemptTimeouts{});
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value().status, 204);
  EXPECT_FALSE(r.value().header("X-Request-Id-Dedup"));
}

}  // namespace
}  // namespace hf3fs_meta
