// SDK workers against a durable server (--data-dir) that is killed with SIGKILL at random moments
// and started again: every confirm that got its 204 is still there (same page), the page counts add
// up, the data dir verifies as sound (no page both free and mapped), and an allocate repeated with
// its request id after a restart gets the same pages.
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "contract/contract_support.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::HasSubstr;

struct DataDir {
  testing::TempDir dir;
};

class ContractDurableTest : protected DataDir, public ContractTest {
 protected:
  ContractDurableTest() : ContractTest({"--threads", "2", "--data-dir", dir.str() + "/data"}) {}
};

struct Confirmed {
  Rank rank;
  std::string key;
  Page page;
};

TEST_F(ContractDurableTest, EveryAcknowledgedConfirmSurvivesRepeatedSigkill) {
  // One rank, so that every key is complete once confirmed (tp_world_size 1) and can be looked up.
  constexpr int kWorkers = 4;
  constexpr Rank kRank = 0;
  constexpr std::int64_t kPages = 1 << 16;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<Confirmed> confirmed;
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      ClientOptions o = fast_options(server_, 50);
      auto client = std::make_unique<Client>(std::move(o));
      const Rank rank = kRank;
      while (!client->ensure_initialized(rank, kPages) && !stop) {
      }
      for (int i = 0; !stop && i < 100000; ++i) {
        std::vector<BlockKey> keys;
        for (int j = 0; j < 4; ++j) {
          keys.push_back(BlockKey{
              std::string("w").append(std::to_string(w)).append("-").append(std::to_string(i)).append("-").append(std::to_string(j)),
              ""});
        }
        auto pages = client->allocate(rank, keys);
        if (!pages) continue;
        std::vector<Confirmation> cs;
        for (std::size_t j = 0; j < keys.size(); ++j) {
          if (pages.value()[j] != kNoPage) cs.push_back(Confirmation{keys[j].key, pages.value()[j]});
        }
        if (cs.empty() || !client->confirm_write(rank, cs)) continue;
        std::lock_guard lock(mutex);
        for (const auto& c : cs) confirmed.push_back(Confirmed{rank, c.key, c.page});
      }
    });
  }
  std::mt19937 rng(20261201);
  for (int round = 0; round < 4; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(100, 400)(rng)));
    const std::string id = "probe-" + std::to_string(round);
    const std::string body = R"({"rank":0,"keys":[["probe)" + std::to_string(round) + R"(",""]]})";
    const auto first = post("/keys/batch_allocate", body, {{"X-Request-Id", id}});
    ASSERT_EQ(first.status, 200) << first.body;
    server_.restart();  // SIGKILL, then the same data dir and port
    const auto repeated = post("/keys/batch_allocate", body, {{"X-Request-Id", id}});
    EXPECT_EQ(repeated.body, first.body) << "round " << round;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  for (auto& t : workers) t.join();

  ASSERT_GT(confirmed.size(), 100u) << "the workers got little done; the test proves nothing";
  auto client = make_client();
  for (const auto& c : confirmed) {
    auto where = client->get_locations(c.rank, std::vector<std::string>{c.key});
    ASSERT_TRUE(where.has_value()) << c.key;
    EXPECT_EQ(where.value().front(), std::optional<Page>(c.page)) << c.key;
  }
  const auto state = snapshot();
  ASSERT_TRUE(state.ranks.contains(kRank));
  EXPECT_EQ(state.ranks.at(kRank).total(), kPages) << state;
  EXPECT_GE(state.ranks.at(kRank).mapped, static_cast<std::int64_t>(confirmed.size())) << state;
  EXPECT_GE(state.keys, static_cast<std::int64_t>(confirmed.size()));
  ASSERT_EQ(server_.terminate(), 0);
  // Recovery checks every page: free exactly when in the pool, mapped by a key that exists.
  const auto verified = ServerProcess::run_to_exit({"--verify-data-dir", dir.str() + "/data"});
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_THAT(verified.output, HasSubstr("sound"));
}

}  // namespace
}  // namespace hf3fs_meta::contract
