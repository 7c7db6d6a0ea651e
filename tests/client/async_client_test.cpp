// The calls that do not block (src/client/async_client.hpp), over a scripted transport run on an
// io_context: the same retry loop as the blocking calls, with its backoffs on the transport's timer
// (the fake clock advanced by the wait), its answers on the io_context's thread, and a restore of a
// forgotten rank on the client's own thread. Nothing really sleeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "client/async_client.hpp"
#include "hf3fs_meta/routes.hpp"
#include "support/fakes.hpp"
#include "support/scripted_client.hpp"

namespace hf3fs_meta::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace hf3fs_meta::testing;
using namespace std::chrono_literals;

// A ScriptedTransport's answers, each given on the io_context's thread after async_post returned;
// a wait advances the fake clock by its delay, as FakeSleeper does.
class ScriptedAsyncTransport final : public AsyncTransport {
 public:
  ScriptedAsyncTransport(boost::asio::io_context& io, std::shared_ptr<ScriptedTransport> script,
                         std::shared_ptr<FakeClock> clock)
      : io_(io), script_(std::move(script)), clock_(std::move(clock)) {}

  void async_post(const HttpRequest& request, const AttemptTimeouts& timeouts, Done done) override {
    threads.push_back(std::this_thread::get_id());
    boost::asio::post(io_, [this, &request, timeouts, done = std::move(done)] { done(script_->post(request, timeouts)); });
  }
  void after(std::chrono::nanoseconds delay, std::function<void()> fn) override {
    boost::asio::post(io_, [this, delay, fn = std::move(fn)] {
      waits.push_back(delay);
      clock_->advance(delay);
      fn();
    });
  }
  boost::asio::io_context& io_context() override { return io_; }

  std::vector<std::thread::id> threads;  // of each async_post
  std::vector<std::chrono::nanoseconds> waits;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<ScriptedTransport> script_;
  std::shared_ptr<FakeClock> clock_;
};

class AsyncClientTest : public ScriptedClientTest {
 protected:
  std::unique_ptr<AsyncClient> make_async(ClientOptions options = {}) {
    options.transport = transport;  // the restores' (blocking), drawing on the same script
    options.clock = clock;
    options.sleeper = sleeper;
    options.observer = observer;
    return std::make_unique<AsyncClient>(std::move(options));
  }
  // Runs the io_context until no work is left (a restore on the client's thread keeps it running).
  void run() {
    io.restart();
    io.run();
  }

  // allocate(3, {"k"}) through `client`, run to its answer.
  std::optional<Result<std::vector<Page>>> allocate_k(AsyncClient& client) {
    std::optional<Result<std::vector<Page>>> got;
    client.allocate(async, 3, keys_k, {}, [&](Result<std::vector<Page>> r) { got.emplace(std::move(r)); });
    run();
    return got;
  }

  boost::asio::io_context io;
  ScriptedAsyncTransport async{io, transport, clock};
  const std::vector<BlockKey> keys_k{"k"};
};

TransportResult ok_allocate() { return http_answer(200, R"({"rank":3,"results":[["k",7]]})"); }
TransportResult ok_init() { return http_answer(200, R"({"message":"Rank 3 initialized with 64 pages"})"); }

TEST_F(AsyncClientTest, AnAnswerComesOnTheTransportsThreadAfterTheCallReturned) {
  auto client = make_async();
  transport->then(ok_allocate());
  const std::vector<BlockKey> keys{"k"};
  std::optional<Result<std::vector<Page>>> got;
  client->allocate(async, 3, keys, {}, [&](Result<std::vector<Page>> r) { got.emplace(std::move(r)); });
  EXPECT_FALSE(got);  // nothing answered inline
  run();
  ASSERT_TRUE(got);
  ASSERT_TRUE(*got) << got->error().message();
  EXPECT_THAT(got->value(), ElementsAre(7));
  ASSERT_EQ(transport->posted().size(), 1u);
  EXPECT_FALSE(transport->posted()[0].request_id.empty());  // stamped as a blocking call is
  EXPECT_EQ(observer->trace(), (std::vector<std::string>{"attempt 1", "success 1"}));
}

TEST_F(AsyncClientTest, RepeatsAfterItsBackoffOnTheTransportsTimerWithOneRequestId) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(100ms);
  auto client = make_async(options);
  transport->then(detail_answer(503, "x"));
  transport->then(detail_answer(503, "x"));
  transport->then(http_answer(200, R"({"exists":[true]})"));
  const std::vector<std::string> keys{"k"};
  std::optional<Result<std::vector<bool>>> got;
  client->batch_exists(async, keys, {}, [&](Result<std::vector<bool>> r) { got.emplace(std::move(r)); });
  run();
  ASSERT_TRUE(got && *got) << (got ? got->error().message() : "no answer");
  EXPECT_THAT(async.waits, ElementsAre(100ms, 100ms));
  EXPECT_TRUE(sleeper->sleeps().empty());  // nothing blocked
  const auto& posted = transport->posted();
  ASSERT_EQ(posted.size(), 3u);
  EXPECT_EQ(posted[1].request_id, posted[0].request_id);
  EXPECT_EQ(posted[2].request_id, posted[0].request_id);
}

TEST_F(AsyncClientTest, TheDeadlineEndsTheCallAndSaysSo) {
  ClientOptions options;
  options.backoff_policy = std::make_shared<FixedBackoff>(400ms);
  auto client = make_async(options);
  transport->otherwise([](const HttpRequest&, const AttemptTimeouts&) { return detail_answer(503, "x"); });
  std::optional<Result<void>> got;
  client->clear(async, CallOptions{1000ms}, [&](Result<void> r) { got.emplace(std::move(r)); });
  run();
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, errc::unavailable);
  EXPECT_THAT(got->error().stop_reason, HasSubstr("deadline of 1 s"));
  EXPECT_LE(clock->elapsed(), 1000ms);
}

TEST_F(AsyncClientTest, AForgottenRankIsRestoredOffTheTransportsThreadThenTheCallRepeats) {
  auto client = make_async();
  transport->then(ok_init());
  transport->then(detail_answer(500, "Allocation failed: Rank 3 not initialized"));
  transport->then(ok_init());  // the restore: a blocking call, on the client's thread
  transport->then(ok_allocate());
  std::optional<Result<std::string>> initialized;
  client->ensure_initialized(async, 3, 64, Role::worker, {}, [&](Result<std::string> r) { initialized.emplace(std::move(r)); });
  run();
  ASSERT_TRUE(initialized && *initialized);
  const auto got = allocate_k(*client);
  ASSERT_TRUE(got && *got) << (got ? got->error().message() : "no answer");
  EXPECT_THAT(got->value(), ElementsAre(7));
  const auto& posted = transport->posted();
  ASSERT_EQ(posted.size(), 4u);
  EXPECT_EQ(posted[2].path, request_path(Route::initialize, 3));
  EXPECT_NE(posted[2].request_id, posted[1].request_id);  // the restore is a call of its own
  EXPECT_EQ(posted[3].request_id, posted[1].request_id);
  EXPECT_EQ(async.threads.size(), 3u);  // the restore did not go through the async transport
  EXPECT_THAT(observer->trace(), ::testing::Contains("reinitialize 3"));
}

TEST_F(AsyncClientTest, RefusedInputAnswersAtOnceAndSendsNothing) {
  auto client = make_async();
  const std::vector<BlockKey> twice{"k", "k"};
  std::optional<Result<std::vector<Page>>> got;
  client->allocate(async, 3, twice, {}, [&](Result<std::vector<Page>> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(got);  // before the call returned: nothing was started
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, errc::invalid_argument);
  EXPECT_TRUE(transport->posted().empty());
  EXPECT_TRUE(async.threads.empty());
}

TEST_F(AsyncClientTest, BothKindsOfCallShareOneState) {
  auto client = make_async();
  // Registered by the blocking call, restored for the async one.
  transport->then(ok_init());
  ASSERT_TRUE(client->client().ensure_initialized(3, 64));
  transport->then(detail_answer(500, "Allocation failed: Rank 3 not initialized"));
  transport->then(ok_init());
  transport->then(ok_allocate());
  const auto got = allocate_k(*client);
  ASSERT_TRUE(got && *got) << (got ? got->error().message() : "no answer");
  EXPECT_THAT(got->value(), ElementsAre(7));
  EXPECT_THAT(observer->trace(), ::testing::Contains("reinitialize 3"));
}

}  // namespace
}  // namespace hf3fs_meta::internal
