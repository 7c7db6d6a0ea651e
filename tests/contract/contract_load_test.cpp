// Load with invariants: 8 client threads, 4 ranks, 2,000 mixed calls per thread and rank, against
// one server; then every key is completed and the state is checked from outside: no page mapped by
// two keys, every page of a rank accounted for exactly once, and each thread's own keys exactly
// where that thread put them.
//
// Each thread owns a set of keys nobody else touches, so it can predict every answer about them
// exactly. Shared keys come from a window that every thread works in and that keeps moving on to
// new keys, so threads race on keys that are not complete yet: those answers cannot be predicted
// (and may orphan pages, as the protocol allows), but must never fail.
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "contract/contract_support.hpp"

namespace hf3fs_meta::contract {
namespace {

constexpr int kThreads = 8;
constexpr int kRanks = 4;
#if defined(HF3FS_META_CONTRACT_TSAN)
constexpr int kCallsPerRank = 250;  // TSan is some 10-20x slower, on the server as well
#elif defined(HF3FS_META_CONTRACT_ASAN)
constexpr int kCallsPerRank = 1000;
#else
constexpr int kCallsPerRank = 2000;
#endif
constexpr int kOwnKeys = 48;            // per thread
constexpr int kSharedWindow = 16;       // shared keys in play at a time
constexpr int kSharedWindowStep = 8;    // the window moves on by this many keys...
constexpr int kSharedRoundsPerStep = 16;  // ...after this many shared rounds (all threads together)
constexpr std::int64_t kPages = std::int64_t{1} << 16;
// The pool must never run short (an allocate would answer -1 for every key, own ones included). A
// shared round costs 9 calls and confirms at most 4 keys on each rank, each of which orphans at
// most one page; pages out of the pool are then at most: own keys + shared keys + in flight +
// orphans.
constexpr std::int64_t kMaxSharedRounds = std::int64_t{kThreads} * (kRanks * kCallsPerRank / 9 + 1);
constexpr std::int64_t kMaxSharedKeys = (kMaxSharedRounds / kSharedRoundsPerStep + 2) * kSharedWindowStep;
static_assert(kThreads * kOwnKeys + kMaxSharedKeys + kThreads * 8 + kMaxSharedRounds * 4 < kPages);

// Built with a stream: GCC 12 warns falsely (-Wrestrict) on "literal" + std::to_string(...).
std::string own_key(int thread, int i) {
  std::ostringstream out;
  out << "t" << thread << "-key-" << i;
  return out.str();
}
std::string shared_key(int i) {
  std::ostringstream out;
  out << "shared-key-" << i;
  return out.str();
}
std::string page_text(const std::optional<Page>& page) {
  std::ostringstream out;
  if (page) {
    out << *page;
  } else {
    out << "null";
  }
  return out.str();
}

// One worker thread's view: its own keys' pages per rank, and the releases the server must keep.
struct Worker {
  int id = 0;
  Client* client = nullptr;
  std::mt19937 rng;
  std::map<std::string, std::array<std::optional<Page>, kRanks>> own;
  std::array<std::int64_t, kRanks> kept{};
  std::atomic<std::int64_t>* shared_rounds = nullptr;  // all threads' shared rounds so far
  std::int64_t calls = 0;
  std::vector<std::string> failures;

  bool complete(const std::string& key) const {
    const auto& pages = own.at(key);
    return std::all_of(pages.begin(), pages.end(), [](const auto& p) { return p.has_value(); });
  }

  template <class T>
  bool check(const Result<T>& r, const std::string& what) {
    ++calls;
    if (r) return true;
    fail(what + ": " + describe(r.error()));
    return false;
  }
  void fail(std::string message) {
    std::ostringstream out;
    out << "thread " << id << ", call " << calls << ": " << message;
    failures.push_back(out.str());
  }

  // `count` distinct numbers from first..first+space-1.
  std::vector<int> pick(int first, int space, int count) {
    std::vector<int> indices(static_cast<std::size_t>(space));
    for (int i = 0; i < space; ++i) indices[static_cast<std::size_t>(i)] = first + i;
    std::shuffle(indices.begin(), indices.end(), rng);
    indices.resize(static_cast<std::size_t>(count));
    return indices;
  }

  // A batch of shared keys on every rank, in an order of its own: allocate, confirm every page.
  bool shared_round() {
    const auto round = shared_rounds->fetch_add(1);
    const int first = static_cast<int>(round / kSharedRoundsPerStep) * kSharedWindowStep;
    std::vector<std::string> keys;
    for (int k : pick(first, kSharedWindow, 1 + static_cast<int>(rng() % 4))) keys.push_back(shared_key(k));
    std::array<Rank, kRanks> order{};
    for (int r = 0; r < kRanks; ++r) order[static_cast<std::size_t>(r)] = r;
    std::shuffle(order.begin(), order.end(), rng);
    for (const Rank rank : order) {
      auto allocated = client->allocate(rank, blocks(keys));
      if (!check(allocated, "allocate shared")) return false;
      std::vector<Confirmation> confirmations;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const Confirmation a{keys[i], allocated.value()[i]};
        if (a.page < 0 || a.page >= kPages) {
          fail("allocate shared: page " + std::to_string(a.page) + " for " + a.key);
          return false;
        }
        confirmations.push_back(a);
      }
      if (!check(client->confirm_write(rank, confirmations), "confirm shared")) return false;
    }
    return check(client->batch_exists(keys), "exists shared");
  }

  // A batch of own keys on every rank, with every answer predicted.
  bool own_round() {
    std::vector<std::string> keys;
    for (int k : pick(0, kOwnKeys, 1 + static_cast<int>(rng() % 8))) keys.push_back(own_key(id, k));
    for (Rank rank = 0; rank < kRanks; ++rank) {
      const auto r = static_cast<std::size_t>(rank);
      auto allocated = client->allocate(rank, blocks(keys));
      if (!check(allocated, "allocate")) return false;
      std::vector<Confirmation> confirmations;
      std::vector<Page> releases;
      std::int64_t kept_here = 0;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const Confirmation a{keys[i], allocated.value()[i]};
        const auto& recorded = own[a.key][r];
        if (a.page < 0 || a.page >= kPages) {
          fail("allocate: page " + std::to_string(a.page) + " for " + a.key);
          return false;
        }
        if (recorded && complete(a.key)) {
          // A complete key gets its own page back. Confirming it again changes nothing; releasing
          // it is refused by the server (kept, counted).
          if (a.page != *recorded) {
            fail("allocate: complete key " + a.key + " got page " + std::to_string(a.page) + ", not its " +
                 std::to_string(*recorded));
            return false;
          }
          if (rng() % 2) {
            confirmations.push_back({a.key, a.page});
          } else {
            releases.push_back(a.page);
            ++kept_here;
          }
        } else if (recorded) {
          // Incomplete: a fresh page. The block is already on this rank: give the page back.
          if (a.page == *recorded) {
            fail("allocate: incomplete key " + a.key + " got its mapped page " + std::to_string(a.page));
            return false;
          }
          releases.push_back(a.page);
        } else if (rng() % 4 != 0) {
          confirmations.push_back({a.key, a.page});
        } else {
          releases.push_back(a.page);  // the write "failed"
        }
      }
      if (!check(client->confirm_write(rank, confirmations, releases), "confirm")) return false;
      kept[r] += kept_here;
      for (const auto& c : confirmations) own[c.key][r] = c.page;

      auto locations = client->get_locations(rank, keys);
      if (!check(locations, "get_locations")) return false;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        std::optional<Page> expected;
        if (complete(keys[i])) expected = own[keys[i]][r];
        if (locations.value()[i] != expected) {
          fail("get_locations: " + keys[i] + " on rank " + std::to_string(rank) + " is " +
               page_text(locations.value()[i]) + ", expected " + page_text(expected));
          return false;
        }
      }
    }
    auto exists = client->batch_exists(keys);
    if (!check(exists, "batch_exists")) return false;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (exists.value()[i] != complete(keys[i])) {
        fail("batch_exists: " + keys[i] + " is " + (exists.value()[i] ? "true" : "false"));
        return false;
      }
    }
    return true;
  }

  // Confirms every own key on every rank it is missing from.
  bool complete_all() {
    for (Rank rank = 0; rank < kRanks; ++rank) {
      const auto r = static_cast<std::size_t>(rank);
      std::vector<std::string> missing;
      for (int i = 0; i < kOwnKeys; ++i) {
        if (!own[own_key(id, i)][r]) missing.push_back(own_key(id, i));
      }
      if (missing.empty()) continue;
      auto allocated = client->allocate(rank, blocks(missing));
      if (!check(allocated, "allocate (completing)")) return false;
      std::vector<Confirmation> confirmations;
      for (std::size_t i = 0; i < missing.size(); ++i) confirmations.push_back({missing[i], allocated.value()[i]});
      if (!check(client->confirm_write(rank, confirmations), "confirm (completing)")) return false;
      for (const auto& c : confirmations) own[c.key][r] = c.page;
    }
    return true;
  }

  void run() {
    for (int i = 0; i < kOwnKeys; ++i) own[own_key(id, i)];
    const std::int64_t target = std::int64_t{kRanks} * kCallsPerRank;
    while (calls < target) {
      const bool ok = rng() % 4 == 0 ? shared_round() : own_round();
      if (!ok) return;
    }
    complete_all();
  }
};

class ContractLoadTest : public ContractTest {
 protected:
  ContractLoadTest() : ContractTest({"--threads", "2"}) {}
};

TEST_F(ContractLoadTest, MixedCallsFromManyThreadsKeepTheInvariants) {
  // Two clients, each shared by four threads: the SDK's own thread safety is part of the load.
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < 2; ++c) {
    clients.push_back(make_client());
    for (Rank rank = 0; rank < kRanks; ++rank) {
      ASSERT_THAT(clients.back()->ensure_initialized(rank, kPages), IsOk());
    }
  }

  std::vector<Worker> workers(kThreads);
  std::vector<std::thread> threads;
  std::atomic<std::int64_t> shared_rounds{0};
  for (int t = 0; t < kThreads; ++t) {
    workers[static_cast<std::size_t>(t)].shared_rounds = &shared_rounds;
    workers[static_cast<std::size_t>(t)].id = t;
    workers[static_cast<std::size_t>(t)].client = clients[static_cast<std::size_t>(t % 2)].get();
    workers[static_cast<std::size_t>(t)].rng.seed(static_cast<std::uint32_t>(1000 + t));
  }
  for (auto& worker : workers) threads.emplace_back([&worker] { worker.run(); });
  for (auto& thread : threads) thread.join();

  std::int64_t calls = 0;
  for (const auto& worker : workers) {
    EXPECT_THAT(worker.failures, ::testing::IsEmpty());
    EXPECT_GE(worker.calls, std::int64_t{kRanks} * kCallsPerRank);
    calls += worker.calls;
  }
  ASSERT_FALSE(HasFailure());
  RecordProperty("calls", std::to_string(calls));
  RecordProperty("shared_rounds", std::to_string(shared_rounds.load()));

  // Complete the shared keys too (every one a window ever held): afterwards every key has exactly one
  // page on every rank.
  Client& client = *clients.front();
  const auto shared_keys =
      static_cast<int>(shared_rounds.load() / kSharedRoundsPerStep) * kSharedWindowStep + kSharedWindow;
  ASSERT_LE(shared_keys, kMaxSharedKeys);
  std::vector<std::string> shared;
  for (int i = 0; i < shared_keys; ++i) shared.push_back(shared_key(i));
  for (Rank rank = 0; rank < kRanks; ++rank) {
    auto allocated = client.allocate(rank, blocks(shared));
    ASSERT_THAT(allocated, IsOk());
    std::vector<Confirmation> confirmations;
    for (std::size_t i = 0; i < shared.size(); ++i) confirmations.push_back({shared[i], allocated.value()[i]});
    ASSERT_THAT(client.confirm_write(rank, confirmations), IsOk());
  }

  std::vector<std::string> all = shared;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kOwnKeys; ++i) all.push_back(own_key(t, i));
  }
  const auto key_count = static_cast<std::int64_t>(all.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < all.size(); ++i) index[all[i]] = i;
  EXPECT_THAT(client.batch_exists(all), HasValue(::testing::Each(true)));

  const auto state = snapshot();
  EXPECT_EQ(state.keys, key_count);
  ASSERT_EQ(state.ranks.size(), static_cast<std::size_t>(kRanks));
  for (Rank rank = 0; rank < kRanks; ++rank) {
    const auto r = static_cast<std::size_t>(rank);
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto locations = client.get_locations(rank, all);
    ASSERT_THAT(locations, IsOk());
    std::set<Page> distinct;
    for (std::size_t i = 0; i < all.size(); ++i) {
      ASSERT_TRUE(locations.value()[i].has_value()) << all[i];
      distinct.insert(*locations.value()[i]);
    }
    // No page is mapped by two keys, and each thread's keys are where it put them.
    EXPECT_EQ(distinct.size(), all.size());
    for (const auto& worker : workers) {
      for (const auto& [key, pages] : worker.own) {
        EXPECT_EQ(locations.value()[index.at(key)], pages[r]) << key;
      }
    }

    const RankPages& p = state.ranks.at(rank);
    std::ostringstream stats;
    stats << p;
    RecordProperty("rank" + std::to_string(rank), stats.str());
    EXPECT_EQ(p.total(), kPages) << p;
    EXPECT_EQ(p.allocated, 0) << p;  // every page handed out was confirmed or released
    EXPECT_EQ(p.mapped, key_count) << p;
    std::int64_t kept = 0;
    for (const auto& worker : workers) kept += worker.kept[r];
    EXPECT_EQ(p.kept_on_release, kept) << p;
  }
}

}  // namespace
}  // namespace hf3fs_meta::contract
