// Records written by concurrent threads (and snapshots taken meanwhile) replay in apply order: the
// recovered state equals the final one, pool order included.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "durable/data_dir.hpp"
#include "durable/store.hpp"
#include "support/durable_support.hpp"

namespace hf3fs_meta::durable {
namespace {

TEST(DurableConcurrency, RecordsFromManyThreadsReplayInApplyOrder) {
  for (const bool snapshots : {false, true}) {
    testing::TempDir dir;
    StateImage expected;
    {
      MetadataState state;
      auto store = Store::open(Store::Options{dir.path(), FsyncMode::everysec, 0, 100}, state);
      ASSERT_TRUE(store.has_value()) << store.error().message;
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          // Shared ranks and, for half the threads, shared keys: their records interleave.
          testing::Workload work(100 + t, t % 2 ? std::string("k") : std::string("t").append(std::to_string(t)).append("-"));
          for (int i = 0; i < 1500; ++i) {
            work.step(state);
            if (i % 16 == 0) (void)store.value()->journal().write_through(state.seq());
          }
        });
      }
      if (snapshots) {
        for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.value()->snapshot().has_value());
      }
      for (auto& t : threads) t.join();
      ASSERT_TRUE(store.value()->journal().write_through(state.seq()).has_value());
      expected = state.export_image();
      ASSERT_GT(expected.seq, 1000u);
    }
    MetadataState state;
    auto recovered = recover(dir.path(), state);
    ASSERT_TRUE(recovered.has_value()) << recovered.error().message;
    EXPECT_EQ(state.export_image(), expected) << (snapshots ? "with snapshots" : "journal only");
  }
}

}  // namespace
}  // namespace hf3fs_meta::durable
