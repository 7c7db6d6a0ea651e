// One Client shared by many threads (labelled `concurrency`: also runs under ThreadSanitizer).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>
#include <set>
#include <thread>
#include <vector>

#include "client/http_peer.hpp"
#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/in_process_transport.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta {
namespace {

using namespace std::chrono_literals;
using namespace hf3fs_meta::testing;

// Appends rather than `"t" + std::to_string(...)`, which trips g++ 12's -Wrestrict false positive.
std::string key_of(int thread, int call) {
  std::string key = "t";
  key.append(std::to_string(thread)).append("k").append(std::to_string(call));
  return key;
}

// Threads of one client share its current endpoint while the leader moves among three
// members under them (each move a failover: the old leader answers "not the leader", naming the new
// one or not). Every call succeeds, the calls follow the leader rather than each finding it alone,
// and the endpoint ends at the last leader.
TEST(ClientConcurrencyTest, ThreadsShareTheEndpointWhileTheLeaderMoves) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 150;
  constexpr int kMoveEvery = 40;  // successes between failovers
  const std::vector<std::string> members = {"http://127.0.0.1:18001", "http://127.0.0.1:18002",
                                            "http://127.0.0.1:18003"};
  std::atomic<int> leader{0};
  std::atomic<int> successes{0};
  std::atomic<int> moves{0};
  std::atomic<int> answers{0};
  std::atomic<bool> moving{true};
  auto transport = std::make_shared<ScriptedTransport>();
  transport->otherwise([&](const HttpRequest& r, const AttemptTimeouts&) -> TransportResult {
    const int now = leader.load();
    if (r.endpoint != members[static_cast<std::size_t>(now)]) {
      // Half the members know the leader.
      return not_leader_answer(answers.fetch_add(1) % 2 == 0 ? members[static_cast<std::size_t>(now)] : "");
    }
    if ((successes.fetch_add(1) + 1) % kMoveEvery == 0 && moving.load()) {
      int expected = now;
      if (leader.compare_exchange_strong(expected, (now + 1) % 3)) moves.fetch_add(1);
    }
    return http_answer(200, R"({"exists":[true]})");
  });
  auto clock = std::make_shared<FakeClock>();
  ClientOptions options;
  options.endpoints = members;
  options.transport = transport;
  options.clock = clock;
  options.sleeper = std::make_shared<FakeSleeper>(clock);
  options.backoff_policy = std::make_shared<ExponentialBackoffPolicy>(1ms, 2ms);
  Client client(options);

  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        if (!client.batch_exists({"k"})) failed.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(moves.load(), 20);
  // A move costs each thread a few answers at most, not a search per call: the endpoint is shared.
  const auto posted = transport->posted().size();
  EXPECT_LE(posted, static_cast<std::size_t>(kThreads * kCalls + moves.load() * kThreads * 4));
  // Once the leader stays, the endpoint settles on it: a call finds it, and the call after goes there
  // at once.
  moving = false;
  ASSERT_TRUE(client.batch_exists({"k"}));
  const auto settled = transport->posted().size();
  EXPECT_LE(settled, posted + 3);
  ASSERT_TRUE(client.batch_exists({"k"}));
  EXPECT_EQ(transport->endpoints().back(), members[static_cast<std::size_t>(leader.load())]);
  EXPECT_EQ(transport->posted().size(), settled + 1);
}

// 16 threads meet "not initialized" together: one initialize goes out, every call then succeeds.
TEST(ClientConcurrencyTest, SixteenThreadsOneInitialize) {
  constexpr int kThreads = 16;
  auto transport = std::make_shared<ScriptedTransport>();
  auto clock = std::make_shared<FakeClock>();
  auto observer = std::make_shared<RecordingObserver>();
  std::atomic<bool> initialized{false};
  std::latch all_failed(kThreads);
  transport->otherwise([&](const HttpRequest& r, const AttemptTimeouts&) -> TransportResult {
    if (r.path == "/rank/3/initialize") {
      // The others find this restore in flight (and wait for it) or done (and repeat their call):
      // either way none sends another, as each noted the restores' count before its first attempt.
      initialized = true;
      return http_answer(200, R"({"message":"Rank 3 initialized with 64 pages"})");
    }
    if (!initialized) {
      all_failed.arrive_and_wait();  // every thread's first attempt fails before any restore
      return detail_answer(500, "Allocation failed: Rank 3 not initialized");
    }
    return http_answer(200, R"({"rank":3,"results":[["k",1]]})");
  });
  ClientOptions options;
  options.transport = transport;
  options.clock = clock;
  options.sleeper = std::make_shared<FakeSleeper>(clock);
  options.observer = observer;
  Client client(options);
  client.register_rank(3, 64);

  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto r = client.allocate(3, {"k"});
      if (r) {
        ok.fetch_add(1);
      } else {
        ADD_FAILURE() << r.error().message();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads);
  EXPECT_EQ(transport->count("/rank/3/initialize"), 1u);
  EXPECT_EQ(transport->count(path_of(Route::batch_allocate)), 2u * kThreads);
  int reinitializations = 0, successes = 0;
  for (const auto& e : observer->events()) {
    if (e.kind == ObservedEvent::Kind::reinitialize) ++reinitializations;
    if (e.kind == ObservedEvent::Kind::success && e.operation == Operation::allocate) {
      ++successes;
      EXPECT_EQ(e.attempt, 2);
      EXPECT_TRUE(e.reinitialized);
    }
  }
  EXPECT_EQ(reinitializations, 1);
  EXPECT_EQ(successes, kThreads);
}

// 8 threads share one Client over libcurl: every call answered, at most one connection per thread.
// A call waiting for another thread's re-initialization gives up at its own deadline.
TEST(ClientConcurrencyTest, AWaiterOnAnotherThreadsReinitializeHonoursItsDeadline) {
  auto transport = std::make_shared<ScriptedTransport>();
  std::latch initialize_started(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> not_initialized_answers{0};
  transport->otherwise([&](const HttpRequest& r, const AttemptTimeouts&) -> TransportResult {
    if (r.path == "/rank/3/initialize") {
      initialize_started.count_down();
      released.wait_for(5s);  // bounded: without the rule, the waiter below would wait this long
      return http_answer(200, R"({"message":"Rank 3 initialized with 64 pages"})");
    }
    ++not_initialized_answers;
    return detail_answer(500, "Allocation failed: Rank 3 not initialized");
  });
  ClientOptions options;
  options.transport = transport;
  Client client(options);
  client.register_rank(3, 64);

  std::thread restorer([&] { (void)client.allocate(3, {"a"}); });
  initialize_started.wait();
  const auto start = std::chrono::steady_clock::now();
  auto waiter = client.allocate(3, {"b"}, CallOptions{50ms});
  const auto waited = std::chrono::steady_clock::now() - start;
  release.set_value();
  restorer.join();
  ASSERT_FALSE(waiter);
  EXPECT_THAT(waiter.error().stop_reason, ::testing::HasSubstr("until this call's deadline"));
  EXPECT_LT(waited, 5s);  // not until the restore finished (it never would without the release)
}

TEST(ClientConcurrencyTest, EightThreadsShareOneCurlClient) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 40;
  HttpPeer peer(HttpPeer::Mode::answer, [](const PeerRequest& r) {
    PeerResponse out;
    // Echo the key so that a reply delivered to the wrong caller would be caught.
    const auto start = r.body.find("[\"") + 2;
    const auto key = r.body.substr(start, r.body.find('"', start) - start);
    out.body = R"({"rank":0,"results":[[")" + key + "\",5]]}";
    return out;
  });
  ClientOptions options;
  options.base_url = peer.url();
  Client client(options);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string key = key_of(t, i);
        auto r = client.allocate(0, {key});
        if (r && r.value().size() == 1 && r.value()[0] == 5) {
          ok.fetch_add(1);
        } else {
          ADD_FAILURE() << (r ? "wrong answer" : r.error().message());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kCalls);
  EXPECT_GE(peer.accepts(), 1);
  EXPECT_LE(peer.accepts(), kThreads);
  const auto seen = peer.requests();
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kCalls));
  std::set<std::string> ids;
  for (const auto& r : seen) ids.insert(r.header("x-request-id").value_or(""));
  EXPECT_EQ(ids.size(), seen.size());  // one id per call, across threads
}

// The in-process transport shared by threads, through the real Service and state.
TEST(ClientConcurrencyTest, InProcessTransportSharedByThreads) {
  auto state = std::make_shared<MetadataState>();
  ClientOptions options;
  options.transport = make_in_process_transport(state);
  Client client(options);
  ASSERT_TRUE(client.ensure_initialized(0, 4096));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string key = key_of(t, i);
        auto a = client.allocate(0, {key});
        if (!a || a.value()[0] < 0) {
          ADD_FAILURE() << (a ? "no page" : a.error().message());
          continue;
        }
        auto c = client.confirm_write(0, {{key, a.value()[0]}});
        auto e = client.batch_exists({key});
        if (c && e && e.value()[0]) ok.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 400);
  EXPECT_EQ(state->key_count(), 400u);
}

}  // namespace
}  // namespace hf3fs_meta
