// Client: validate -> encode -> Transport::post -> classify -> retry / re-initialize -> Result<T>.
#include "hf3fs_meta/client.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"

#include "internal/answer_limit.hpp"
#include "internal/field_text.hpp"

namespace hf3fs_meta {

namespace {

using TimePoint = std::chrono::steady_clock::time_point;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

class SteadyClock final : public Clock {
 public:
  TimePoint now() override { return std::chrono::steady_clock::now(); }
};

class ThreadSleeper final : public Sleeper {
 public:
  void sleep_for(nanoseconds duration) override { std::this_thread::sleep_for(duration); }
};

double uniform01() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

// "0.4", "10", "0.0523": short, and exact enough for a person.
std::string seconds_text(nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::chrono::duration<double>(d).count());
  return buf;
}

using internal::indexed;

Error invalid_argument(Operation op, std::string detail) {
  Error e;
  e.code = errc::invalid_argument;
  e.operation = op;
  e.detail = std::move(detail);
  e.sent = false;
  return e;
}

// The first item that repeats an earlier one: (its index, the earlier index). Batches are small
// (vLLM sends up to 128 keys), so short ones are compared pairwise without allocating.
template <class Get>
std::optional<std::pair<std::size_t, std::size_t>> first_duplicate(std::size_t n, Get get) {
  using Item = std::decay_t<decltype(get(std::size_t{0}))>;
  if (n <= 16) {
    for (std::size_t i = 1; i < n; ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (get(j) == get(i)) return std::pair{i, j};
      }
    }
    return std::nullopt;
  }
  std::unordered_map<Item, std::size_t> seen;
  seen.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto [it, inserted] = seen.emplace(get(i), i);
    if (!inserted) return std::pair{i, it->second};
  }
  return std::nullopt;
}

std::optional<Error> check_keys(Operation op, std::string_view field, std::size_t n,
                                const auto& key_at, bool allow_duplicates) {
  for (std::size_t i = 0; i < n; ++i) {
    if (key_at(i).empty()) return invalid_argument(op, indexed(field, i) + ": empty key");
  }
  if (!allow_duplicates) {
    if (auto dup = first_duplicate(n, key_at)) {
      return invalid_argument(op, indexed(field, dup->first) + ": duplicate key " + internal::quoted(key_at(dup->first)) +
                                      " (also " + indexed(field, dup->second) + ")");
    }
  }
  return std::nullopt;
}

std::optional<Error> check_initialize(Rank rank, std::int64_t num_pages, Role role) {
  // Any int64 prints as a decimal the server parses, but the check keeps the client honest if
  // the server's notion of a path rank ever narrows.
  if (!protocol::parse_path_rank(std::to_string(rank))) {
    return invalid_argument(Operation::initialize, "rank: " + std::to_string(rank) + " does not fit a path segment");
  }
  if (role == Role::worker && num_pages <= 0) {
    return invalid_argument(Operation::initialize,
                            "num_pages: must be positive for a worker, got " + std::to_string(num_pages));
  }
  return std::nullopt;
}

std::optional<Error> check_confirm_write(const std::vector<Confirmation>& confirmations,
                                         const std::vector<Page>& releases) {
  constexpr auto op = Operation::confirm_write;
  const auto key_at = [&](std::size_t i) { return std::string_view(confirmations[i].key); };
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    if (confirmations[i].page < 0) {
      return invalid_argument(op, indexed("confirmations", i) + ": negative page " +
                                      std::to_string(confirmations[i].page));
    }
  }
  if (auto e = check_keys(op, "confirmations", confirmations.size(), key_at, false)) return e;
  if (auto dup = first_duplicate(confirmations.size(), [&](std::size_t i) { return confirmations[i].page; })) {
    const auto& [i, j] = *dup;
    return invalid_argument(op, indexed("confirmations", i) + ": page " + std::to_string(confirmations[i].page) +
                                    " of key " + internal::quoted(confirmations[i].key) + " is also named by key " +
                                    internal::quoted(confirmations[j].key) + " (" + indexed("confirmations", j) + ")");
  }
  for (std::size_t i = 0; i < releases.size(); ++i) {
    if (releases[i] < 0) {
      return invalid_argument(op, indexed("pages_to_release", i) + ": negative page " + std::to_string(releases[i]));
    }
  }
  if (auto dup = first_duplicate(releases.size(), [&](std::size_t i) { return releases[i]; })) {
    return invalid_argument(op, indexed("pages_to_release", dup->first) + ": duplicate page " +
                                    std::to_string(releases[dup->first]) + " (also " +
                                    indexed("pages_to_release", dup->second) + ")");
  }
  if (!confirmations.empty() && !releases.empty()) {
    const auto conflict = [&](std::size_t r, std::size_t c) {
      return invalid_argument(op, indexed("pages_to_release", r) + ": page " + std::to_string(releases[r]) +
                                      " is also confirmed for key " + internal::quoted(confirmations[c].key) + " (" +
                                      indexed("confirmations", c) + ")");
    };
    if (confirmations.size() * releases.size() <= 256) {
      for (std::size_t r = 0; r < releases.size(); ++r) {
        for (std::size_t c = 0; c < confirmations.size(); ++c) {
          if (confirmations[c].page == releases[r]) return conflict(r, c);
        }
      }
    } else {
      std::unordered_map<Page, std::size_t> confirmed;
      confirmed.reserve(confirmations.size());
      for (std::size_t c = 0; c < confirmations.size(); ++c) confirmed.emplace(confirmations[c].page, c);
      for (std::size_t r = 0; r < releases.size(); ++r) {
        if (auto it = confirmed.find(releases[r]); it != confirmed.end()) return conflict(r, it->second);
      }
    }
  }
  return std::nullopt;
}

// gRPC A6 retry throttling. Kept in thousandths of a token so that the arithmetic is exact and
// lock-free.
class RetryBudget {
 public:
  explicit RetryBudget(const RetryBudgetOptions& o)
      : max_(to_milli(o.max_tokens)), cost_(to_milli(o.failure_cost)), refund_(to_milli(o.success_refund)),
        tokens_(max_) {}

  // Takes a token; true when a retry is still allowed.
  bool on_failure() {
    std::int64_t now = tokens_.load(std::memory_order_relaxed);
    std::int64_t next = 0;
    do {
      next = std::max<std::int64_t>(0, now - cost_);
    } while (!tokens_.compare_exchange_weak(now, next, std::memory_order_relaxed));
    return 2 * next > max_;
  }

  // True when a retry is allowed, without taking a token.
  bool allows() const { return 2 * tokens_.load(std::memory_order_relaxed) > max_; }

  void on_success() {
    std::int64_t now = tokens_.load(std::memory_order_relaxed);
    while (now < max_ && !tokens_.compare_exchange_weak(now, std::min(max_, now + refund_), std::memory_order_relaxed)) {
    }
  }

 private:
  static std::int64_t to_milli(double tokens) { return static_cast<std::int64_t>(tokens * 1000.0 + 0.5); }
  std::int64_t max_, cost_, refund_;
  std::atomic<std::int64_t> tokens_;
};

// The parts of a call the retry loop needs.
struct CallSpec {
  Operation operation;
  std::optional<Rank> rank;  // the rank the client restores when the server forgot it
  bool has_releases = false;
  TimePoint start;
  TimePoint deadline;
  nanoseconds deadline_length;
};

template <class T>
Result<T> success_of(auto&& decoded) {
  if constexpr (std::is_void_v<T>) {
    return boost::outcome_v2::success();
  } else {
    return std::move(decoded).value();
  }
}

// The connection's state: policies, the retry loop, the registered ranks.
struct Impl {
  explicit Impl(ClientOptions o)
      : options(std::move(o)),
        transport(options.transport
                      ? options.transport
                      : make_curl_transport(options.base_url, options.ca_file, options.max_answer_bytes)),
        retry(options.retry_policy ? options.retry_policy->clone() : std::make_unique<LimitedAttemptsRetryPolicy>()),
        backoff(options.backoff_policy ? options.backoff_policy->clone()
                                       : std::make_unique<ExponentialBackoffPolicy>()),
        idempotency(options.idempotency_policy ? options.idempotency_policy->clone()
                                               : std::make_unique<DefaultIdempotencyPolicy>()),
        clock(options.clock ? options.clock : std::make_shared<SteadyClock>()),
        sleeper(options.sleeper ? options.sleeper : std::make_shared<ThreadSleeper>()),
        observer(options.observer),
        budget(options.retry_budget) {
    std::random_device rd;
    id_prefix = (std::uint64_t{rd()} << 32) ^ rd() ^
                static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }

  ClientOptions options;
  std::shared_ptr<Transport> transport;
  std::unique_ptr<RetryPolicy> retry;
  std::unique_ptr<BackoffPolicy> backoff;
  std::unique_ptr<IdempotencyPolicy> idempotency;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<Sleeper> sleeper;
  std::shared_ptr<ClientObserver> observer;
  RetryBudget budget;
  // The window the server last declared (X-Request-Id-Dedup: <ms>), 0 while none: an ambiguous
  // allocate may be repeated only while its first attempt is younger than this.
  std::atomic<std::int64_t> dedup_window_ms{0};
  std::uint64_t id_prefix = 0;
  std::atomic<std::uint64_t> id_counter{0};

  // Registered ranks, and the single flight that restores each.
  struct Flight {
    bool done = false;
    std::optional<Error> error;
  };
  struct RankEntry {
    std::int64_t num_pages = 0;
    Role role = Role::worker;
    std::uint64_t restored_epoch = 0;  // reinit_epoch when this rank was last restored
    std::shared_ptr<Flight> flight;    // the initialize in flight for it, if any
  };
  std::mutex ranks_mutex;
  std::condition_variable ranks_cv;
  std::unordered_map<Rank, RankEntry> ranks;
  // Bumped by every restore; an attempt notes it before sending, so that a rank restored by
  // another thread after that is not initialized a second time.
  std::atomic<std::uint64_t> reinit_epoch{0};

  std::string next_request_id() {
    const std::uint64_t n = id_counter.fetch_add(1, std::memory_order_relaxed);
    char buf[40];
    auto [p, ec] = std::to_chars(buf, buf + 16, id_prefix, 16);
    (void)ec;
    // Zero-padded prefix: ids of one client share their first 16 characters.
    const std::size_t len = static_cast<std::size_t>(p - buf);
    std::string id(16 - len, '0');
    id.append(buf, len);
    id += '-';
    auto [q, ec2] = std::to_chars(buf, buf + sizeof buf, n, 16);
    (void)ec2;
    id.append(buf, static_cast<std::size_t>(q - buf));
    return id;
  }

  // `route` names the call's operation; Route::not_found stands for raw.
  CallSpec spec(Route route, std::optional<Rank> rank, const CallOptions& call, bool has_releases = false) {
    const auto length = call.deadline ? *call.deadline : retry->deadline();
    const TimePoint start = clock->now();
    return CallSpec{route_info(route).operation, rank, has_releases, start, start + length, length};
  }

  Result<std::string> do_initialize(Rank rank, std::int64_t num_pages, Role role, const CallSpec& s) {
    if (auto e = check_initialize(rank, num_pages, role)) return std::move(*e);
    HttpRequest request{request_path(Route::initialize, rank), protocol::encode_initialize_request(num_pages, role), {}};
    return run<std::string>(s, request,
                            [](const HttpResponse& r) { return protocol::decode_initialize_response(r.body); });
  }

  enum class Restore { restored, unregistered, failed };

  // Initializes a registered rank again, once for all the calls that met "not initialized" together.
  Restore restore_rank(Rank rank, std::uint64_t epoch_at_send, std::string_view request_id, const CallSpec& s,
                       std::optional<Error>& failure) {
    std::unique_lock lock(ranks_mutex);
    auto it = ranks.find(rank);
    if (it == ranks.end()) return Restore::unregistered;
    RankEntry& entry = it->second;
    if (entry.restored_epoch > epoch_at_send) return Restore::restored;  // restored since we sent
    if (auto flight = entry.flight) {
      // Another call is restoring the rank: wait for it, but not past this call's own deadline
      // (measured on the injected clock, waited in real time).
      const auto left = s.deadline - clock->now();
      if (!ranks_cv.wait_for(lock, std::max(left, nanoseconds(0)), [&] { return flight->done; })) {
        Error e;
        e.code = errc::timeout;
        e.operation = Operation::initialize;
        e.rank = rank;
        e.request_id = std::string(request_id);
        e.detail = "waited for another call's re-initialization of rank " + std::to_string(rank) +
                   " until this call's deadline";
        failure = std::move(e);
        return Restore::failed;
      }
      if (flight->error) {
        failure = flight->error;
        return Restore::failed;
      }
      return Restore::restored;
    }
    auto flight = std::make_shared<Flight>();
    entry.flight = flight;
    const auto num_pages = entry.num_pages;
    const auto role = entry.role;
    lock.unlock();

    // Waiters must be released even if the initialize throws (an observer, an allocation).
    struct Release {
      Impl& impl;
      Flight& flight;
      RankEntry& entry;
      bool armed = true;
      ~Release() {
        if (!armed) return;
        {
          std::lock_guard guard(impl.ranks_mutex);
          Error e;
          e.code = errc::server_error;
          e.operation = Operation::initialize;
          e.detail = "the re-initialization was interrupted by an exception";
          flight.error = std::move(e);
          flight.done = true;
          entry.flight.reset();
        }
        impl.ranks_cv.notify_all();
      }
    } release{*this, *flight, entry};

    if (observer) observer->on_reinitialize(ReinitializeEvent{request_id, s.operation, rank});
    // Its own logical call (own request id and retries), within what is left of the caller's deadline.
    CallSpec init{Operation::initialize, std::nullopt, false, clock->now(), s.deadline, s.deadline_length};
    auto result = do_initialize(rank, num_pages, role, init);

    release.armed = false;
    lock.lock();
    if (result) {
      entry.restored_epoch = reinit_epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
    } else {
      flight->error = result.error();
      failure = result.error();
    }
    flight->done = true;
    entry.flight.reset();
    lock.unlock();
    ranks_cv.notify_all();
    return result ? Restore::restored : Restore::failed;
  }

  void register_rank(Rank rank, std::int64_t num_pages, Role role) {
    std::lock_guard lock(ranks_mutex);
    RankEntry& entry = ranks[rank];
    entry.num_pages = num_pages;
    entry.role = role;
  }
  void unregister_rank(Rank rank) {
    std::lock_guard lock(ranks_mutex);
    // A restore in flight keeps its entry (its waiters hold on to it): left as it is then.
    if (auto it = ranks.find(rank); it != ranks.end() && !it->second.flight) ranks.erase(it);
  }

  std::string exhausted(int attempts, const CallSpec& s) {
    return "retry policy exhausted after " + std::to_string(attempts) + " attempt" + (attempts == 1 ? "" : "s") +
           " in " + seconds_text(clock->now() - s.start) + " s";
  }
  std::string deadline_passed(int attempts, const CallSpec& s) {
    return "deadline of " + seconds_text(s.deadline_length) + " s reached after " + std::to_string(attempts) +
           " attempt" + (attempts == 1 ? "" : "s") + " in " + seconds_text(clock->now() - s.start) + " s";
  }

  Error give_up(Error error) {
    if (observer) observer->on_give_up(GiveUpEvent{error.request_id, error.operation, error});
    return error;
  }

  // The retry loop (DESIGN.md, "Retries"). `decode` turns a 2xx answer into Decoded<T>.
  template <class T, class Decode>
  Result<T> run(const CallSpec& s, HttpRequest& request, Decode&& decode) {
    std::string request_id = next_request_id();
    request.headers.push_back({"X-Request-Id", request_id});
    if (!options.auth_token.empty()) request.headers.push_back({"Authorization", "Bearer " + options.auth_token});
    const int max_attempts = retry->max_attempts();
    const nanoseconds connect = options.connect_timeout;
    const nanoseconds total = options.request_timeout;
    std::int64_t window_ms = dedup_window_ms.load(std::memory_order_relaxed);
    std::optional<TimePoint> first_sent;
    bool reinitialized = false;
    int attempts = 0;
    int retries = 0;
    std::optional<Error> last;

    for (;;) {
      const TimePoint now = clock->now();
      if (now >= s.deadline) {
        Error e;
        if (last) {
          e = std::move(*last);
        } else {
          e.code = errc::timeout;
          e.operation = s.operation;
          e.detail = "the call's deadline passed before the first attempt";
          e.request_id = request_id;
        }
        e.stop_reason = deadline_passed(attempts, s);
        return give_up(std::move(e));
      }
      ++attempts;
      if (observer) observer->on_attempt(AttemptEvent{request_id, s.operation, attempts});
      const auto left = std::chrono::ceil<milliseconds>(s.deadline - now);
      const AttemptTimeouts timeouts{std::chrono::duration_cast<milliseconds>(std::min<nanoseconds>(connect, left)),
                                     std::chrono::duration_cast<milliseconds>(std::min<nanoseconds>(total, left))};
      const std::uint64_t epoch = reinit_epoch.load(std::memory_order_acquire);

      if (!first_sent) first_sent = now;
      TransportResult answer = transport->post(request, timeouts);

      // A transport that read an answer over the limit anyway (CurlTransport stops reading at it)
      // fails as CurlTransport does.
      if (answer && answer.value().body.size() > options.max_answer_bytes) {
        answer = TransportError{errc::protocol_error, true, internal::answer_too_large(options.max_answer_bytes)};
      }

      Error e;
      e.operation = s.operation;
      e.request_id = request_id;
      bool unreachable = false;
      if (answer) {
        HttpResponse& response = answer.value();
        // Every answer says whether the server deduplicates now: one without the header (a server
        // restarted with deduplication off, another server behind the same URL) withdraws the window.
        window_ms = 0;
        if (auto h = response.header("X-Request-Id-Dedup")) {
          std::int64_t ms = 0;
          const auto [end, ec] = std::from_chars(h->data(), h->data() + h->size(), ms);
          if (ec == std::errc() && end == h->data() + h->size() && ms > 0) window_ms = ms;
        }
        if (dedup_window_ms.load(std::memory_order_relaxed) != window_ms) {
          dedup_window_ms.store(window_ms, std::memory_order_relaxed);
        }
        if (response.status >= 200 && response.status < 300) {
          budget.on_success();
          auto decoded = decode(response);
          if (decoded) {
            if (observer) observer->on_success(SuccessEvent{request_id, s.operation, attempts, reinitialized});
            return success_of<T>(std::move(decoded));
          }
          e.code = errc::protocol_error;
          e.status = response.status;
          e.detail = std::move(decoded).error().message;
          e.sent = true;
          e.attempts = attempts;
          e.reinitialized = reinitialized;
          return give_up(std::move(e));
        }
        auto c = protocol::classify_error(response.status, response.content_type, response.body);
        e.code = c.code;
        e.status = response.status;
        e.detail = std::move(c.detail);
        e.cause = std::move(c.cause);
        e.rank = c.rank;
        e.sent = true;
      } else {
        TransportError& t = answer.error();
        e.code = t.code;
        e.detail = std::move(t.message);
        e.sent = t.sent;
        unreachable = t.unreachable;
      }
      e.attempts = attempts;
      e.reinitialized = reinitialized;
      // An answer too large to read: repeating the call would get the same.
      if (e.code == errc::protocol_error) return give_up(std::move(e));

      if (e.code == errc::rank_not_initialized) {
        // Ours only if the cause names this call's rank (or no rank at all).
        if (!s.rank || (e.rank && *e.rank != *s.rank)) return give_up(std::move(e));
        const Rank rank = *s.rank;
        if (reinitialized) {
          e.stop_reason = "rank " + std::to_string(rank) + " was not initialized again after the client restored it";
          return give_up(std::move(e));
        }
        std::optional<Error> failure;
        switch (restore_rank(rank, epoch, request_id, s, failure)) {
          case Restore::unregistered:
            e.stop_reason = "rank " + std::to_string(rank) + " is not registered with this client: call ensure_initialized(" +
                            std::to_string(rank) + ", num_pages) or register_rank first, so that it restores the rank";
            return give_up(std::move(e));
          case Restore::failed:
            e.stop_reason = "re-initializing rank " + std::to_string(rank) + " failed: " + failure->message();
            return give_up(std::move(e));
          case Restore::restored:
            break;
        }
        reinitialized = true;
        e.reinitialized = true;
        if (s.operation == Operation::confirm_write) {
          e.stop_reason = "rank " + std::to_string(rank) +
                          " was re-initialized: the pages this confirm_write names belong to the state the server "
                          "lost; allocate again";
          return give_up(std::move(e));
        }
        // The repeat after a restore is always allowed, even past max_attempts: the attempt that
        // met "not initialized" could never have succeeded, and restores happen once per call.
        last = std::move(e);
        continue;  // at once: no backoff, no budget token
      }

      // The request certainly did not reach the server (or a 503 says it was not processed): repeat.
      // Otherwise it may have been applied: repeat only what is safe to apply twice.
      const bool transport_failure = !e.status.has_value();
      const bool unapplied = (transport_failure && !e.sent) || e.status == 503;
      const bool ambiguous = (transport_failure && e.sent) || e.status == 502 || e.status == 504 ||
                             e.code == errc::server_error;
      if (!unapplied && !ambiguous) return give_up(std::move(e));

      // Nothing accepted the connection (the server is restarting): the request never left and costs
      // the server nothing, so it is repeated without spending the budget, until the deadline
      // rather than an attempt count, so that a call rides out a restart; a budget that other
      // failures drained still stops it.
      const bool budget_left = unreachable ? budget.allows() : budget.on_failure();
      // The server keeps the first attempt's answer for window_ms from when it answered, which is
      // after the first attempt was sent: a repeat that arrives within the window from the send
      // finds it (measured with the longest backoff the repeat may wait first).
      const bool dedup = window_ms > 0 && clock->now() + backoff->delay(retries + 1, 1.0) - *first_sent <
                                              milliseconds(window_ms);
      if (ambiguous && !unapplied &&
          !idempotency->safe_to_repeat(RepeatQuery{s.operation, s.has_releases, dedup})) {
        e.stop_reason = "not safe to repeat " + std::string(to_string(s.operation)) + " after " +
                        std::string(to_string(e.code)) +
                        (e.status ? " (" + std::to_string(*e.status) + ")" : std::string(" (request sent)"));
        return give_up(std::move(e));
      }
      if (attempts >= max_attempts && !unreachable) {
        e.stop_reason = exhausted(attempts, s);
        return give_up(std::move(e));
      }
      if (!budget_left) {
        e.stop_reason = "retry budget exhausted";
        return give_up(std::move(e));
      }
      ++retries;
      const nanoseconds delay = backoff->delay(retries, uniform01());
      if (clock->now() + delay >= s.deadline) {
        e.stop_reason = deadline_passed(attempts, s);
        return give_up(std::move(e));
      }
      if (observer) observer->on_retry(RetryEvent{request_id, s.operation, attempts, delay, e});
      sleeper->sleep_for(delay);
      last = std::move(e);
    }
  }
};

class DefaultConnection final : public Connection {
 public:
  explicit DefaultConnection(ClientOptions options) : impl_(std::move(options)) {}

  Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role, const CallOptions& call) override;
  Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                         const CallOptions& call) override;
  void register_rank(Rank rank, std::int64_t num_pages, Role role) override;
  Result<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call) override;
  Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                             const std::vector<Page>& pages_to_release, const CallOptions& call) override;
  Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call) override;
  Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                         const CallOptions& call) override;
  Result<std::vector<bool>> delete_keys(const std::vector<std::string>& keys, const CallOptions& call) override;
  Result<StateStats> stats(const CallOptions& call) override;
  Result<void> clear(const CallOptions& call) override;
  Result<DropOutcome> drop_rank(Rank rank, const CallOptions& call) override;
  Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call) override;

 private:
  Impl impl_;
};

Result<std::string> DefaultConnection::initialize(Rank rank, std::int64_t num_pages, Role role,
                                                  const CallOptions& call) {
  return impl_.do_initialize(rank, num_pages, role, impl_.spec(Route::initialize, std::nullopt, call));
}

Result<std::string> DefaultConnection::ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                                          const CallOptions& call) {
  // A scheduler's initialize changes nothing on the server, so there is nothing to restore: it
  // neither registers the rank nor replaces a worker's registration of it.
  if (role != Role::worker) return initialize(rank, num_pages, role, call);
  // Refused before anything is registered: a rank that could never be initialized is not one.
  if (auto e = check_initialize(rank, num_pages, role)) return std::move(*e);
  // Registered first, then sent: a worker that starts during an outage (its first initialize fails)
  // is still restored when the server comes back and says "not initialized".
  impl_.register_rank(rank, num_pages, role);
  auto result = initialize(rank, num_pages, role, call);
  // The server refuses these parameters for good: restoring with them could never succeed.
  if (!result && result.error().code == errc::invalid_initialization) impl_.unregister_rank(rank);
  return result;
}

void DefaultConnection::register_rank(Rank rank, std::int64_t num_pages, Role role) {
  // Checked when the rank is restored: the restore then fails with invalid_argument.
  impl_.register_rank(rank, num_pages, role);
}

Result<std::vector<Page>> DefaultConnection::allocate(Rank rank, const std::vector<BlockKey>& keys,
                                                      const CallOptions& call) {
  constexpr auto route = Route::batch_allocate;
  if (auto e = check_keys(route_info(route).operation, "keys", keys.size(),
                          [&](std::size_t i) { return std::string_view(keys[i].key); }, false)) {
    return std::move(*e);
  }
  HttpRequest request{request_path(route), protocol::encode_allocate_request(rank, keys), {}};
  return impl_.run<std::vector<Page>>(
      impl_.spec(route, rank, call), request,
      [&](const HttpResponse& r) { return protocol::decode_allocate_response(r.body, keys); });
}

Result<void> DefaultConnection::confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                                              const std::vector<Page>& pages_to_release, const CallOptions& call) {
  if (auto e = check_confirm_write(confirmations, pages_to_release)) return std::move(*e);
  HttpRequest request{request_path(Route::confirm_write),
                      protocol::encode_confirm_write_request(rank, confirmations, pages_to_release),
                      {}};
  return impl_.run<void>(impl_.spec(Route::confirm_write, rank, call, !pages_to_release.empty()), request,
                          [](const HttpResponse&) { return protocol::Decoded<void>(boost::outcome_v2::success()); });
}

Result<std::vector<bool>> DefaultConnection::batch_exists(const std::vector<std::string>& keys,
                                                          const CallOptions& call) {
  constexpr auto route = Route::batch_exists;
  if (auto e = check_keys(route_info(route).operation, "keys", keys.size(),
                          [&](std::size_t i) { return std::string_view(keys[i]); }, true)) {
    return std::move(*e);
  }
  HttpRequest request{request_path(route), protocol::encode_batch_exists_request(keys), {}};
  return impl_.run<std::vector<bool>>(
      impl_.spec(route, std::nullopt, call), request,
      [&](const HttpResponse& r) { return protocol::decode_batch_exists_response(r.body, keys.size()); });
}

Result<std::vector<std::optional<Page>>> DefaultConnection::get_locations(Rank rank,
                                                                          const std::vector<std::string>& keys,
                                                                          const CallOptions& call) {
  constexpr auto route = Route::get_locations;
  if (auto e = check_keys(route_info(route).operation, "keys", keys.size(),
                          [&](std::size_t i) { return std::string_view(keys[i]); }, true)) {
    return std::move(*e);
  }
  HttpRequest request{request_path(route), protocol::encode_get_locations_request(rank, keys), {}};
  return impl_.run<std::vector<std::optional<Page>>>(
      impl_.spec(route, rank, call), request,
      [&](const HttpResponse& r) { return protocol::decode_get_locations_response(r.body, keys.size()); });
}

Result<std::vector<bool>> DefaultConnection::delete_keys(const std::vector<std::string>& keys,
                                                         const CallOptions& call) {
  constexpr auto route = Route::delete_keys;
  if (auto e = check_keys(route_info(route).operation, "keys", keys.size(),
                          [&](std::size_t i) { return std::string_view(keys[i]); }, true)) {
    return std::move(*e);
  }
  // Its body is batch_exists' ({"keys": [...]}).
  HttpRequest request{request_path(route), protocol::encode_batch_exists_request(keys), {}};
  return impl_.run<std::vector<bool>>(
      impl_.spec(route, std::nullopt, call), request,
      [&](const HttpResponse& r) { return protocol::decode_delete_keys_response(r.body, keys.size()); });
}

Result<StateStats> DefaultConnection::stats(const CallOptions& call) {
  constexpr auto route = Route::stats;
  HttpRequest request{request_path(route), std::string(), {}, std::string(route_info(route).method)};
  return impl_.run<StateStats>(impl_.spec(route, std::nullopt, call), request,
                               [](const HttpResponse& r) { return protocol::decode_stats_response(r.body); });
}

Result<void> DefaultConnection::clear(const CallOptions& call) {
  HttpRequest request{request_path(Route::clear), std::string(), {}};
  return impl_.run<void>(impl_.spec(Route::clear, std::nullopt, call), request,
                          [](const HttpResponse&) { return protocol::Decoded<void>(boost::outcome_v2::success()); });
}

Result<DropOutcome> DefaultConnection::drop_rank(Rank rank, const CallOptions& call) {
  HttpRequest request{request_path(Route::drop_rank, rank), std::string(), {}};
  return impl_.run<DropOutcome>(impl_.spec(Route::drop_rank, rank, call), request,
                                [](const HttpResponse& r) { return protocol::decode_drop_response(r.body); });
}

Result<RawResponse> DefaultConnection::raw(std::string_view path, std::string_view body, const CallOptions& call) {
  HttpRequest request{std::string(path), std::string(body), {}};
  return impl_.run<RawResponse>(impl_.spec(Route::not_found, std::nullopt, call), request,
                                 [](const HttpResponse& r) -> protocol::Decoded<RawResponse> {
                                   return RawResponse{r.status, r.content_type, r.body};
                                 });
}

}  // namespace

std::shared_ptr<Connection> make_connection(ClientOptions options) {
  return std::make_shared<DefaultConnection>(std::move(options));
}

Client::Client(ClientOptions options) : connection_(make_connection(std::move(options))) {}
Client::Client(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {}

}  // namespace hf3fs_meta
