#include "dedup_cache.hpp"

#include <utility>

namespace hf3fs_meta::server {

struct DedupCache::Entry {
  std::string key;
  std::uint64_t body_hash = 0;
  std::size_t body_size = 0;
  std::uint64_t generation = 0;
  bool done = false;       // completed with a kept answer
  bool settled = false;    // completed or abandoned: waiters have been woken
  CachedAnswer answer;
  std::chrono::steady_clock::time_point stored_at;
  std::vector<std::function<void()>> waiters;
};

namespace {

std::string make_key(int route, std::string_view id) {
  std::string key;
  key.reserve(id.size() + 1);
  key.push_back(static_cast<char>('a' + route));
  key.append(id);
  return key;
}

std::uint64_t hash_body(std::string_view body) { return std::hash<std::string_view>{}(body); }

}  // namespace

DedupCache::Claim& DedupCache::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    entry_ = std::move(other.entry_);
  }
  return *this;
}

void DedupCache::Claim::complete(int status, std::string_view content_type, std::string_view body) {
  if (!entry_) return;
  auto entry = std::move(entry_);
  cache_->settle(entry, status >= 200 && status < 300, status, content_type, body);
}

void DedupCache::Claim::reset() {
  if (!entry_) return;
  auto entry = std::move(entry_);
  cache_->settle(entry, false, 0, {}, {});
}

DedupCache::DedupCache(Options options) : options_(options) {}

DedupCache::Acquired DedupCache::acquire(int route, std::string_view id, std::string_view body) {
  const auto hash = hash_body(body);
  auto key = make_key(route, id);
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  evict_locked(now);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    auto& entry = it->second;
    if (entry->body_hash != hash || entry->body_size != body.size()) return Acquired{Kind::conflict, {}, {}, {}};
    if (entry->done) {
      ++hits_;
      return Acquired{Kind::hit, {}, entry->answer, {}};
    }
    return Acquired{Kind::wait, {}, {}, entry};
  }
  auto entry = std::make_shared<Entry>();
  entry->body_hash = hash;
  entry->body_size = body.size();
  entry->generation = generation_;
  entry->key = key;
  entries_.emplace(std::move(key), entry);
  return Acquired{Kind::owner, Claim(this, std::move(entry)), {}, {}};
}

void DedupCache::settle(const std::shared_ptr<Entry>& entry, bool keep, int status,
                        std::string_view content_type, std::string_view body) {
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock(mutex_);
    const bool current = entry->generation == generation_;
    entry->settled = true;
    if (keep && current && options_.capacity > 0) {
      entry->done = true;
      entry->answer = CachedAnswer{status, std::string(content_type), std::string(body)};
      entry->stored_at = Clock::now();
      kept_.push_back(entry);
      evict_locked(entry->stored_at);
    } else if (current) {
      auto it = entries_.find(entry->key);
      if (it != entries_.end() && it->second == entry) entries_.erase(it);
    }
    waiters.swap(entry->waiters);
  }
  for (auto& wake : waiters) wake();
}

void DedupCache::wait(const std::shared_ptr<Entry>& entry, std::function<void()> wake) {
  {
    std::lock_guard lock(mutex_);
    if (!entry->settled) {
      entry->waiters.push_back(std::move(wake));
      return;
    }
  }
  wake();
}

void DedupCache::evict_locked(Clock::time_point now) {
  while (!kept_.empty()) {
    const auto& entry = kept_.front();
    if (kept_.size() <= options_.capacity && now - entry->stored_at < options_.ttl) break;
    auto it = entries_.find(entry->key);
    if (it != entries_.end() && it->second == entry) entries_.erase(it);
    kept_.pop_front();
  }
}

void DedupCache::clear() {
  std::lock_guard lock(mutex_);
  ++generation_;
  entries_.clear();
  kept_.clear();
}

std::uint64_t DedupCache::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

std::size_t DedupCache::size() const {
  std::lock_guard lock(mutex_);
  return kept_.size();
}

}  // namespace hf3fs_meta::server
