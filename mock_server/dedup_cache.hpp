// Request-id deduplication: batch_allocate and confirm_write carrying X-Request-Id are applied once.
// The key is (route, id). A 2xx answer is kept (bounded by count and age) and given again to a repeat
// without applying anything; a repeat that arrives while the first is still being handled waits for
// it; the same id with another body is refused; errors are not kept, so a repeat is applied again.
// clear() (on the clear route and forget_state) starts a new generation: nothing from before it is kept.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hf3fs_meta::server {

struct CachedAnswer {
  int status = 0;
  std::string content_type;
  std::string body;
};

class DedupCache {
 public:
  struct Options {
    std::size_t capacity = 10000;
    std::chrono::milliseconds ttl{60000};
  };
  struct Entry;

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
    // Keeps a 2xx answer for repeats; wakes those waiting either way.
    void complete(int status, std::string_view content_type, std::string_view body);
    void reset();  // abandon

   private:
    DedupCache* cache_ = nullptr;
    std::shared_ptr<Entry> entry_;
  };

  enum class Kind { owner, hit, conflict, wait };
  struct Acquired {
    Kind kind = Kind::owner;
    Claim claim;                   // owner
    CachedAnswer answer;           // hit
    std::shared_ptr<Entry> entry;  // wait: pass to wait()
  };

  explicit DedupCache(Options options);

  // `route` is a small number naming the route; ids are only compared within a route.
  Acquired acquire(int route, std::string_view id, std::string_view body);

  // Calls `wake` (on the completing thread, or at once if already settled) when the entry's owner
  // completes or abandons it; the waiter then calls acquire() again.
  void wait(const std::shared_ptr<Entry>& entry, std::function<void()> wake);

  void clear();

  std::uint64_t hits() const;
  std::size_t size() const;

 private:
  using Clock = std::chrono::steady_clock;
  void settle(const std::shared_ptr<Entry>& entry, bool keep, int status, std::string_view content_type,
              std::string_view body);
  void evict_locked(Clock::time_point now);

  Options options_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  std::deque<std::shared_ptr<Entry>> kept_;  // completed, oldest first
  std::uint64_t generation_ = 0;
  std::uint64_t hits_ = 0;
};

}  // namespace hf3fs_meta::server
