// A vLLM-like soak against the real server: 4 ranks of 1,000 pages; writer threads save many more
// distinct keys than fit (allocate on every rank, then confirm on every rank, as vLLM's workers do);
// reader threads, at most one lookup per ten saves, do batch_exists, get_locations on every rank,
// "read" for a while, and check that the key still has the same pages when the read ends.
// With --eviction lru (lease 500 ms): >= 99% of saves after the pool fills succeed, and no reader
// ever sees its pages handed to another key within its lease. Without: saves fail once full, as vLLM.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "contract/contract_support.hpp"

namespace hf3fs_meta::contract {
namespace {

constexpr int kRanks = 4;
constexpr int kPages = 1000;
#if defined(HF3FS_META_CONTRACT_ASAN) || defined(HF3FS_META_CONTRACT_TSAN)
constexpr int kKeys = 20000;  // sanitized builds are several times slower, the server as well
#else
constexpr int kKeys = 100000;
#endif
constexpr int kBatch = 16;  // keys per allocate (vLLM: up to 128)
constexpr int kWriters = 4;
constexpr int kReaders = 2;
constexpr auto kLease = std::chrono::milliseconds(500);
// A reader judges only reads that ended well inside the lease: a loaded machine may stall a reader
// for longer, and such a read proves nothing either way (counted, not judged).
constexpr auto kJudged = std::chrono::milliseconds(400);
// How many judged reads make the readers' part. How many they get through while the writers save a
// given number of keys depends on how the machine shares its cores between them: with readers, the
// writers go on past kKeys (up to 5 times as many) until the readers have judged that many.
constexpr std::int64_t kMinJudged = 100;

std::string key_name(int i) { return "soak-" + std::to_string(i); }

struct Totals {
  std::atomic<int> next{0};              // the next key to save
  int end = kKeys;                       // no key from here on is saved...
  int end_at_most = kKeys;               // ...once min_judged reads were judged; none from here on at all
  std::int64_t min_judged = 0;
  std::atomic<std::int64_t> saved{0};    // keys saved on every rank
  std::atomic<std::int64_t> after_full_attempts{0};
  std::atomic<std::int64_t> after_full_saved{0};
  int late_from = 0;  // batches from this key on are the run's second half
  std::atomic<std::int64_t> late_attempts{0};
  std::atomic<std::int64_t> late_saved{0};
  std::atomic<std::int64_t> lookups{0};
  std::atomic<std::int64_t> reads_judged{0};
  std::atomic<std::int64_t> reads_late{0};
  std::atomic<std::int64_t> violations{0};
  std::atomic<std::int64_t> errors{0};
  std::mutex recent_mutex;
  std::vector<std::string> recent;  // keys saved lately, for the readers
};

// One writer: batches of fresh keys, allocated on every rank, then confirmed on every rank. A batch
// that gets no pages on some rank gives back what it took and counts as failed saves.
void writer(Client& client, Totals& t) {
  for (;;) {
    const int first = t.next.fetch_add(kBatch);
    if (first >= t.end_at_most || (first >= t.end && t.reads_judged.load() >= t.min_judged)) return;
    std::vector<BlockKey> keys;
    for (int i = first; i < std::min(first + kBatch, t.end_at_most); ++i) keys.push_back(BlockKey{key_name(i), ""});
    const bool full = t.saved.load() > kPages - kBatch;  // no room for another batch
    std::vector<std::vector<Page>> pages(kRanks);
    bool ok = true;
    for (Rank r = 0; r < kRanks && ok; ++r) {
      auto a = client.allocate(r, keys);
      if (!a) {
        ++t.errors;
        ADD_FAILURE() << describe(a.error());
        return;
      }
      for (const Page page : a.value()) {
        if (page == kNoPage) {
          ok = false;
        } else {
          pages[r].push_back(page);
        }
      }
    }
    if (!ok) {
      for (Rank r = 0; r < kRanks; ++r) {
        if (!pages[r].empty() && !client.confirm_write(r, {}, pages[r])) ++t.errors;
      }
    } else {
      for (Rank r = 0; r < kRanks; ++r) {
        std::vector<Confirmation> confirmations;
        for (std::size_t i = 0; i < keys.size(); ++i) confirmations.push_back({keys[i].key, pages[r][i]});
        auto c = client.confirm_write(r, confirmations, {});
        if (!c) {
          ++t.errors;
          ADD_FAILURE() << describe(c.error());
          return;
        }
      }
      t.saved += static_cast<std::int64_t>(keys.size());
      std::lock_guard lock(t.recent_mutex);
      for (const BlockKey& k : keys) t.recent.push_back(k.key);
      if (t.recent.size() > 4 * kPages) t.recent.erase(t.recent.begin(), t.recent.begin() + kPages);
    }
    if (full) {
      t.after_full_attempts += static_cast<std::int64_t>(keys.size());
      if (ok) t.after_full_saved += static_cast<std::int64_t>(keys.size());
    }
    if (first >= t.late_from) {
      t.late_attempts += static_cast<std::int64_t>(keys.size());
      if (ok) t.late_saved += static_cast<std::int64_t>(keys.size());
    }
  }
}

// One reader: exists, locations on every rank, a read of a few milliseconds, then the same pages.
void reader(Client& client, Totals& t, unsigned seed, const std::atomic<bool>& stop) {
  std::mt19937 rng(seed);
  while (!stop.load()) {
    if ((t.lookups.load() + 1) * 10 > t.saved.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    ++t.lookups;
    std::string key;
    {
      std::lock_guard lock(t.recent_mutex);
      if (t.recent.empty()) continue;
      key = t.recent[std::uniform_int_distribution<std::size_t>(0, t.recent.size() - 1)(rng)];
    }
    const auto start = std::chrono::steady_clock::now();
    auto exists = client.batch_exists({key});
    if (!exists) {
      ++t.errors;
      continue;
    }
    if (!exists.value()[0]) continue;  // evicted before this reader came: nothing promised
    std::vector<Page> pages;
    for (Rank r = 0; r < kRanks; ++r) {
      auto l = client.get_locations(r, {key});
      if (!l) {
        ++t.errors;
        break;
      }
      pages.push_back(l.value()[0].value_or(kNoPage));
    }
    if (pages.size() != kRanks) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(1, 20)(rng)));
    // The read ends: the key must still have the same page on every rank. Checked through
    // get_locations, which would renew the lease; only the answer matters here.
    std::vector<Page> after;
    for (Rank r = 0; r < kRanks; ++r) {
      auto l = client.get_locations(r, {key});
      if (!l) {
        ++t.errors;
        break;
      }
      after.push_back(l.value()[0].value_or(kNoPage));
    }
    if (after.size() != kRanks) continue;
    if (std::chrono::steady_clock::now() - start > kJudged) {
      ++t.reads_late;
      continue;
    }
    ++t.reads_judged;
    if (after != pages || std::count(pages.begin(), pages.end(), kNoPage) > 0) {
      ++t.violations;
      ADD_FAILURE() << "key " << key << " changed pages within its lease";
    }
  }
}

void run_soak(const ServerProcess& server, bool with_readers, int keys, Totals& t) {
  t.next = kKeys - keys;
  t.late_from = kKeys - keys / 2;
  if (with_readers) {
    t.end_at_most = 5 * kKeys;
    t.min_judged = kMinJudged;
  }
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kWriters + kReaders; ++i) clients.push_back(std::make_unique<Client>(fast_options(server)));
  for (Rank r = 0; r < kRanks; ++r) EXPECT_TRUE(clients[0]->ensure_initialized(r, kPages));
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  if (with_readers) {
    for (int i = 0; i < kReaders; ++i) {
      readers.emplace_back(reader, std::ref(*clients[kWriters + i]), std::ref(t), 7u + static_cast<unsigned>(i),
                           std::cref(stop));
    }
  }
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) writers.emplace_back(writer, std::ref(*clients[i]), std::ref(t));
  for (auto& w : writers) w.join();
  stop = true;
  for (auto& r : readers) r.join();
}

class SoakWithEviction : public ContractTest {
 protected:
  SoakWithEviction()
      : ContractTest({"--threads", "2", "--eviction", "lru", "--read-lease-ms", std::to_string(kLease.count())}) {}
};

TEST_F(SoakWithEviction, SavesKeepSucceedingAndNoReaderLosesItsPagesWithinItsLease) {
  Totals t;
  run_soak(server_, true, kKeys, t);
  EXPECT_EQ(t.errors.load(), 0);
  EXPECT_EQ(t.violations.load(), 0);
  ASSERT_GT(t.after_full_attempts.load(), 10 * kPages);
  EXPECT_GE(static_cast<double>(t.after_full_saved.load()), 0.99 * static_cast<double>(t.after_full_attempts.load()))
      << t.after_full_saved.load() << " of " << t.after_full_attempts.load();
  // The readers did their part: enough reads were judged, within the lease.
  EXPECT_GE(t.reads_judged.load(), kMinJudged) << "late " << t.reads_late.load() << ", keys " << t.next.load();
  std::printf("soak: %lld of %lld saves after the pool filled succeeded; %lld lookups, %lld reads judged, %lld late\n",
              static_cast<long long>(t.after_full_saved.load()), static_cast<long long>(t.after_full_attempts.load()),
              static_cast<long long>(t.lookups.load()), static_cast<long long>(t.reads_judged.load()),
              static_cast<long long>(t.reads_late.load()));
  auto stats = make_client()->stats();
  ASSERT_TRUE(stats) << describe(stats.error());
  for (const auto& [rank, r] : stats.value().ranks) {
    EXPECT_EQ(r.free + r.allocated + r.mapped + r.orphaned + r.draining, r.num_pages) << "rank " << rank;
    EXPECT_EQ(r.allocated, 0) << "rank " << rank;  // every batch confirmed or gave its pages back
  }
  EXPECT_GT(stats.value().evicted_keys, static_cast<std::uint64_t>(kKeys / 2));
  EXPECT_LE(stats.value().keys_complete, static_cast<std::uint64_t>(kPages));
}

class SoakWithoutEviction : public ContractTest {
 protected:
  SoakWithoutEviction() : ContractTest({"--threads", "2"}) {}
};

TEST_F(SoakWithoutEviction, SavesFailOnceThePoolIsFullAsVllm) {
  Totals t;
  run_soak(server_, false, 4 * kPages, t);
  EXPECT_EQ(t.errors.load(), 0);
  // At most a pool's worth of keys fits; once it is full, saves fail: every save of the run's second
  // half (2,000 keys after at most 1,000 fitted) failed.
  EXPECT_LE(t.saved.load(), kPages);
  EXPECT_GE(t.saved.load(), kPages - 2 * kWriters * kBatch);
  EXPECT_EQ(t.late_attempts.load(), 2 * kPages);
  EXPECT_EQ(t.late_saved.load(), 0);
  auto stats = make_client()->stats();
  ASSERT_TRUE(stats) << describe(stats.error());
  EXPECT_EQ(stats.value().evicted_keys, 0u);
  EXPECT_EQ(stats.value().keys_complete, static_cast<std::uint64_t>(t.saved.load()));
}

}  // namespace
}  // namespace hf3fs_meta::contract
