#include "dedup_cache.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace hf3fs_meta::server {

struct DedupCache::Entry {
  std::string key;
  std::size_t ns_size = 0;  // the bytes of a named namespace's name in `key` (0: the default's)
  std::uint64_t body_hash = 0;
  std::size_t body_size = 0;
  std::uint64_t generation = 0;
  std::size_t bytes = 0;   // counted in DedupCache::bytes_ until erased
  bool done = false;       // completed with a kept answer
  bool settled = false;    // completed or abandoned: waiters have been woken
  KeptAnswer answer;
  Clock::time_point stored_at;
  std::vector<std::function<void()>> waiters;
};

namespace {

// The default namespace's key is the route's letter and the id, as before namespaces (nothing more to
// build on the hot path). A named one's is '#', the name, ' ', then the same: '#' is no route's
// letter, so it never equals a default key, and a name holds no space (valid_namespace_name), so the
// name ends at the first one and two namespaces' keys never meet.
std::string make_key(std::string_view ns, int route, std::string_view id) {
  std::string key;
  if (ns.empty()) {
    key.reserve(id.size() + 1);
  } else {
    key.reserve(ns.size() + 3 + id.size());
    key.push_back('#');
    key.append(ns);
    key.push_back(' ');
  }
  key.push_back(static_cast<char>('a' + route));
  key.append(id);
  return key;
}

}  // namespace

// An entry's namespace, read back from its key (make_key): "" for the default one.
static std::string_view namespace_of(const DedupCache::Entry& entry) {
  return entry.ns_size == 0 ? std::string_view{} : std::string_view(entry.key).substr(1, entry.ns_size);
}

// An entry with `pages` pages, weighed as the journal and the snapshot weigh it: its namespace and id
// read back from its key (make_key).
std::size_t DedupCache::weight(const Entry& entry, std::size_t pages) {
  const std::string_view key = entry.key;
  return durable::dedup_weight(namespace_of(entry), key.substr(entry.ns_size == 0 ? 1 : entry.ns_size + 3), pages);
}

DedupCache::Claim& DedupCache::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    entry_ = std::move(other.entry_);
  }
  return *this;
}

void DedupCache::Claim::complete(int status, std::span<const std::int64_t> pages, std::uint64_t seq) {
  if (!entry_) return;
  auto entry = std::move(entry_);
  cache_->settle(entry, status >= 200 && status < 300, status, pages, seq);
}

void DedupCache::Claim::reset() {
  if (!entry_) return;
  auto entry = std::move(entry_);
  cache_->settle(entry, false, 0, {}, 0);
}

DedupCache::DedupCache(Options options) : options_(std::move(options)) {}

DedupCache::Acquired DedupCache::acquire(std::string_view ns, int route, std::string_view id, std::string_view body,
                                         std::size_t max_pages) {
  const auto hash = body_hash(body);
  auto key = make_key(ns, route, id);
  const std::size_t reserve = durable::dedup_weight(ns, id, max_pages);
  const auto at = now();
  std::lock_guard lock(mutex_);
  evict_locked(at);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    auto& entry = it->second;
    if (entry->body_hash != hash || entry->body_size != body.size()) return Acquired{Kind::conflict, {}, {}, {}, {}};
    if (entry->done) {
      ++hits_;
      return Acquired{Kind::hit, {}, entry->answer, {}, {}};
    }
    return Acquired{Kind::wait, {}, {}, entry, {}};
  }
  const std::size_t share = namespace_budget();
  if (reserve > share) return Acquired{Kind::too_large, {}, {}, {}, {}, share < options_.max_bytes};
  const auto held = namespace_bytes_.find(ns);
  const std::size_t ns_bytes = held == namespace_bytes_.end() ? 0 : held->second;
  const bool whole_full = reserve > options_.max_bytes - std::min(bytes_, options_.max_bytes);
  const bool ns_full = !whole_full && reserve > share - std::min(ns_bytes, share);  // the whole one said first
  if (whole_full || ns_full) {
    // Every byte is promised to an answer still inside its window (or in flight): forgetting one
    // would break a promise, so the new request waits instead.
    ++refused_;
    return Acquired{Kind::full, {}, {}, {}, until_oldest_leaves(ns_full ? std::optional(ns) : std::nullopt, at), ns_full};
  }
  auto entry = std::make_shared<Entry>();
  entry->body_hash = hash;
  entry->body_size = body.size();
  entry->generation = generation_;
  entry->bytes = reserve;
  entry->key = key;
  entry->ns_size = ns.size();
  count_locked(*entry, reserve);
  entries_.emplace(std::move(key), entry);
  return Acquired{Kind::owner, Claim(this, std::move(entry)), {}, {}, {}};
}

std::uint64_t DedupCache::body_hash(std::string_view body) { return std::hash<std::string_view>{}(body); }

// The time until the oldest kept entry leaves its window: of namespace `ns` if given, when it is
// among the first few (a longer search would hold the lock that a refusal should not cost). Else the
// window itself, by which every entry kept now has left; with nothing kept (all in flight, which
// settle within a call's time) a second.
std::chrono::milliseconds DedupCache::until_oldest_leaves(std::optional<std::string_view> ns,
                                                         Clock::time_point at) const {
  constexpr std::size_t kLooked = 64;
  for (std::size_t i = 0; i < kept_.size() && i < kLooked; ++i) {
    if (ns && namespace_of(*kept_[i]) != *ns) continue;
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(kept_[i]->stored_at + options_.ttl - at);
    return std::max(wait, std::chrono::milliseconds(1));
  }
  return kept_.empty() ? std::chrono::milliseconds(1000) : options_.ttl;
}

void DedupCache::count_locked(const Entry& entry, std::size_t bytes) {
  bytes_ += bytes;
  const std::string_view ns = namespace_of(entry);
  auto it = namespace_bytes_.find(ns);
  if (it == namespace_bytes_.end()) it = namespace_bytes_.emplace(std::string(ns), 0).first;
  it->second += bytes;
}

void DedupCache::uncount_locked(const Entry& entry, std::size_t bytes) {
  bytes_ -= bytes;
  const auto it = namespace_bytes_.find(namespace_of(entry));
  if (it == namespace_bytes_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) namespace_bytes_.erase(it);
}

void DedupCache::restore(std::string_view ns, int route, std::string_view id, std::uint64_t body_hash,
                         std::size_t body_size, KeptAnswer answer, std::chrono::milliseconds age) {
  if (age >= options_.ttl) return;
  auto entry = std::make_shared<Entry>();
  entry->key = make_key(ns, route, id);
  entry->ns_size = ns.size();
  entry->body_hash = body_hash;
  entry->body_size = body_size;
  entry->bytes = durable::dedup_weight(ns, id, answer.pages.size());
  entry->answer = std::move(answer);
  entry->done = true;
  entry->settled = true;
  std::lock_guard lock(mutex_);
  // The namespace's share bounds new ids only: an answer kept before a restart is a promise still
  // inside its window, whatever share the restart gives its namespace.
  if (entry->bytes > options_.max_bytes - std::min(bytes_, options_.max_bytes)) return;
  entry->generation = generation_;
  entry->stored_at = now() - age;
  if (auto it = entries_.find(entry->key); it != entries_.end()) {
    const auto older = it->second;  // the same id used again after its window: the later one counts
    erase_locked(older);
  }
  count_locked(*entry, entry->bytes);
  entries_.emplace(entry->key, entry);
  // In expiry order (evict_locked), which entries restored with their ages need not come in.
  auto at = kept_.end();
  while (at != kept_.begin() && (*std::prev(at))->stored_at > entry->stored_at) --at;
  kept_.insert(at, entry);
}

void DedupCache::restore(const durable::DedupEntry& e, std::int64_t now_ms) {
  const auto age = std::chrono::milliseconds(e.at_ms == 0 ? 0 : std::max<std::int64_t>(now_ms - e.at_ms, 0));
  restore(e.tag.ns, static_cast<int>(e.tag.route), e.tag.id, e.tag.body_hash, e.tag.body_size,
          KeptAnswer{static_cast<int>(e.status), e.pages, e.seq}, age);
}

void DedupCache::settle(const std::shared_ptr<Entry>& entry, bool keep, int status,
                        std::span<const std::int64_t> pages, std::uint64_t seq) {
  std::vector<std::function<void()>> waiters;
  {
    std::lock_guard lock(mutex_);
    const bool current = entry->generation == generation_;
    entry->settled = true;
    const std::size_t kept_bytes = weight(*entry, pages.size());
    if (keep && current && kept_bytes <= entry->bytes) {
      entry->done = true;
      entry->answer.status = status;
      entry->answer.seq = seq;
      entry->answer.pages.reserve(pages.size());
      for (const auto page : pages) entry->answer.pages.push_back(static_cast<std::uint32_t>(page));
      uncount_locked(*entry, entry->bytes - kept_bytes);
      entry->bytes = kept_bytes;
      entry->stored_at = now();
      kept_.push_back(entry);
    } else {
      erase_locked(entry);
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

void DedupCache::erase_locked(const std::shared_ptr<Entry>& entry) {
  auto it = entries_.find(entry->key);
  if (it != entries_.end() && it->second == entry) entries_.erase(it);
  uncount_locked(*entry, std::exchange(entry->bytes, 0));
}

void DedupCache::evict_locked(Clock::time_point now) {
  // Every entry is kept for the same window, so the queue is in expiry order.
  while (!kept_.empty() && now - kept_.front()->stored_at >= options_.ttl) {
    erase_locked(kept_.front());
    kept_.pop_front();
  }
}

void DedupCache::clear() {
  std::lock_guard lock(mutex_);
  ++generation_;
  for (const auto& entry : kept_) uncount_locked(*entry, std::exchange(entry->bytes, 0));
  kept_.clear();
  // Entries in flight stay counted until their owners settle them (they are not kept then).
  entries_.clear();
}

DedupCache::Stats DedupCache::stats() const {
  std::lock_guard lock(mutex_);
  return Stats{entries_.size(), bytes_, hits_, refused_};
}

}  // namespace hf3fs_meta::server
