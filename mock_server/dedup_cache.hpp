// Request-id deduplication: batch_allocate and confirm_write carrying X-Request-Id are applied once.
// The key is (namespace, route, id): ids of one namespace never answer another's requests.
// The namespace is its name, not its id, so that a repeat after the namespace was dropped finds its
// entry and gets 409 from the router's check of its pages, as a repeat after /clear does. A 2xx
// answer is kept for the window (`ttl`) and given again to a repeat without applying anything; a
// repeat that arrives while the first is still being handled waits for it; the same id with another
// body is refused; errors are not kept, so a repeat is applied again.
// clear() (forget_state, which plays a server that lost its memory) starts a new generation: nothing
// from before it is kept. The clear route forgets no id: the server checks a kept allocate answer's
// pages before giving it again (router.cpp), and /clear took them all back.
//
// An entry keeps what answering again needs, not the rendered answer: its key, a hash and
// the size of the body (which detect a reused id), the status and, for an allocate, its pages (4
// bytes each; the keys come from the repeat's own body, which is the same). Entries are weighed in
// bytes and the cache never holds more than `max_bytes`: a new entry reserves, before anything is
// applied, the most its answer can weigh, and gives back the excess when it is kept. A promise is
// never forgotten inside its window: when the budget is full of entries still inside it, acquire()
// refuses (`full`, with the time until the oldest leaves), and the server answers 503. One namespace
// never holds more than its share (`namespace_max_bytes`), so a tenant that fills its own share gets
// those 503s while the others still have room. An answer that could not fit even in an empty cache is refused at once (`too_large`:
// 413), since waiting would never help.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "durable/record.hpp"
#include "hash/keyed_hash.hpp"

namespace hf3fs_meta::server {

// What answering a repeat again needs.
struct KeptAnswer {
  int status = 0;
  std::vector<std::uint32_t> pages;  // batch_allocate: the pages answered, kNoPage as 0xFFFFFFFF
  std::uint64_t seq = 0;  // the journal record of the change it answered (0: none); a durable server
                          // answers a repeat only once that record is as durable as the first answer was
};

class DedupCache {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::size_t max_bytes = std::size_t{256} << 20;  // 0: deduplication is off
    std::chrono::milliseconds ttl{60000};
    std::function<Clock::time_point()> now;  // injectable for tests; empty: Clock::now
    std::size_t namespace_max_bytes = 0;     // the most one namespace may hold (0: max_bytes)
  };
  struct Entry;

  // Bytes an entry weighs besides its id and pages: the entry, its map node and its place in the
  // expiry queue, rounded up. Public so that tests can state bounds in entries.
  static constexpr std::size_t kEntryOverhead = durable::kDedupEntryOverhead;

  // Owning the entry obliges the holder to complete() it; an owner dropped without completing (the
  // connection went away) abandons it, and those waiting handle their request themselves.
  class Claim {
   public:
    Claim() = default;
    Claim(DedupCache* cache, std::shared_ptr<Entry> entry) : cache_(cache), entry_(std::move(entry)) {}
    Claim(Claim&& other) noexcept { *this = std::move(other); }
    Claim& operator=(Claim&& other) noexcept;
    ~Claim() { reset(); }
    explicit operator bool() const noexcept { return entry_ != nullptr; }
    // Keeps a 2xx answer for repeats (pages: at most the count reserved at acquire); wakes those
    // waiting either way.
    void complete(int status, std::span<const std::int64_t> pages, std::uint64_t seq = 0);
    void reset();  // abandon

   private:
    DedupCache* cache_ = nullptr;
    std::shared_ptr<Entry> entry_;
  };

  enum class Kind { owner, hit, conflict, wait, full, too_large };
  struct Acquired {
    Kind kind = Kind::owner;
    Claim claim;                      // owner
    KeptAnswer answer;                // hit
    std::shared_ptr<Entry> entry;     // wait: pass to wait()
    std::chrono::milliseconds retry_after{0};  // full: until the oldest entry leaves its window
    bool namespace_share = false;  // full, too_large: the namespace's share is the bound, not the whole
  };

  struct Stats {
    std::size_t entries = 0;  // kept and in flight
    std::size_t bytes = 0;    // reserved by them
    std::uint64_t hits = 0;
    std::uint64_t refused = 0;  // acquire() answered full
  };

  explicit DedupCache(Options options);

  bool enabled() const noexcept { return options_.max_bytes > 0; }
  // The most one namespace may hold.
  std::size_t namespace_budget() const noexcept {
    return options_.namespace_max_bytes == 0 ? options_.max_bytes : std::min(options_.namespace_max_bytes, options_.max_bytes);
  }
  std::chrono::milliseconds window() const noexcept { return options_.ttl; }

  // `ns`: the namespace's name (empty or kDefaultNamespace: the default one); `route` is a small
  // number naming the route; ids are only compared within a namespace and a route.
  // `max_pages`: the most pages the answer may carry (0 for confirm_write).
  Acquired acquire(std::string_view ns, int route, std::string_view id, std::string_view body,
                   std::size_t max_pages);

  // Calls `wake` (on the completing thread, or at once if already settled) when the entry's owner
  // completes or abandons it; the waiter then calls acquire() again.
  void wait(const std::shared_ptr<Entry>& entry, std::function<void()> wake);

  void clear();

  // An answer recovered from a durable server's journal or snapshot, kept as if given `age` ago (what
  // is left of its window); left out if its window is over or the budget has no room for it.
  void restore(std::string_view ns, int route, std::string_view id, std::uint64_t body_hash, std::size_t body_size,
               KeptAnswer answer, std::chrono::milliseconds age = std::chrono::milliseconds(0));
  // The same, for an answer recovery found (durable::Recovered::dedup), in its namespace (tag.ns): its
  // age is the time since it was recorded (`now_ms`: the system clock, as DedupEntry::at_ms), none
  // when that is unknown.
  void restore(const durable::DedupEntry& entry, std::int64_t now_ms);
  // The body's fingerprint kept with an entry (and journaled): libstdc++'s hash of a string is a
  // fixed-seed MurmurHash, the same in every run, so journaled fingerprints match after a restart.
  static std::uint64_t body_hash(std::string_view body);

  Stats stats() const;

 private:
  void settle(const std::shared_ptr<Entry>& entry, bool keep, int status, std::span<const std::int64_t> pages,
              std::uint64_t seq);
  void evict_locked(Clock::time_point now);
  static std::size_t weight(const Entry& entry, std::size_t pages);
  void erase_locked(const std::shared_ptr<Entry>& entry);
  std::chrono::milliseconds until_oldest_leaves(std::optional<std::string_view> ns, Clock::time_point at) const;
  void count_locked(const Entry& entry, std::size_t bytes);    // bytes_ and the namespace's, += bytes
  void uncount_locked(const Entry& entry, std::size_t bytes);  // -= bytes
  Clock::time_point now() const { return options_.now ? options_.now() : Clock::now(); }

  Options options_;
  mutable std::mutex mutex_;
  // Keyed by namespace, route and request id: a client chooses the ids, so the hash is keyed.
  std::unordered_map<std::string, std::shared_ptr<Entry>, hash::KeyedHash, std::equal_to<>> entries_;
  std::deque<std::shared_ptr<Entry>> kept_;  // completed, oldest first (so also first to expire)
  std::size_t bytes_ = 0;
  // What each namespace holding entries holds, by name ("" the default's); a name leaves with its
  // last entry. Keyed hash: tenants name namespaces.
  std::unordered_map<std::string, std::size_t, hash::KeyedHash, std::equal_to<>> namespace_bytes_;
  std::uint64_t generation_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace hf3fs_meta::server
