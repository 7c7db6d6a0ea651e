// Test doubles shared by the client's tests and anyone else's: a fake clock, a sleeper that only
// advances it (nothing really sleeps), a GoogleMock transport, a recording observer, and helpers
// that build canned answers.
#pragma once

#include <gmock/gmock.h>

#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hf3fs_meta/policies.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::testing {

class FakeClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point now() override {
    std::lock_guard lock(mutex_);
    return now_;
  }
  void advance(std::chrono::nanoseconds d) {
    std::lock_guard lock(mutex_);
    now_ += d;
  }
  // Time since the clock was made.
  std::chrono::nanoseconds elapsed() {
    std::lock_guard lock(mutex_);
    return now_ - start_;
  }

 private:
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_{std::chrono::hours(1000)};
  std::chrono::steady_clock::time_point now_{start_};
};

// Sleeping advances the fake clock by the requested time and records it.
class FakeSleeper final : public Sleeper {
 public:
  explicit FakeSleeper(std::shared_ptr<FakeClock> clock) : clock_(std::move(clock)) {}
  void sleep_for(std::chrono::nanoseconds d) override {
    {
      std::lock_guard lock(mutex_);
      sleeps_.push_back(d);
    }
    clock_->advance(d);
  }
  std::vector<std::chrono::nanoseconds> sleeps() {
    std::lock_guard lock(mutex_);
    return sleeps_;
  }

 private:
  std::shared_ptr<FakeClock> clock_;
  std::mutex mutex_;
  std::vector<std::chrono::nanoseconds> sleeps_;
};

class MockTransport : public Transport {
 public:
  MOCK_METHOD(TransportResult, post, (const HttpRequest& request, const AttemptTimeouts& timeouts), (override));
};

// One observed event, flattened so tests can compare sequences.
struct ObservedEvent {
  enum class Kind { attempt, retry, reinitialize, give_up, success };
  Kind kind = Kind::attempt;
  std::string request_id;
  Operation operation = Operation::raw;
  int attempt = 0;                    // attempt: its number; retry: the failed one; give_up, success: attempts
  std::chrono::nanoseconds delay{0};  // retry
  Rank rank = 0;                      // reinitialize
  errc code = errc::server_error;     // retry, give_up
  std::string stop_reason;            // give_up
  bool reinitialized = false;         // success, give_up
};

class RecordingObserver final : public ClientObserver {
 public:
  void on_attempt(const AttemptEvent& e) override {
    auto o = make(ObservedEvent::Kind::attempt, e.request_id, e.operation);
    o.attempt = e.attempt;
    add(std::move(o));
  }
  void on_retry(const RetryEvent& e) override {
    auto o = make(ObservedEvent::Kind::retry, e.request_id, e.operation);
    o.attempt = e.attempt;
    o.delay = e.delay;
    o.code = e.error.code;
    add(std::move(o));
  }
  void on_reinitialize(const ReinitializeEvent& e) override {
    auto o = make(ObservedEvent::Kind::reinitialize, e.request_id, e.operation);
    o.rank = e.rank;
    add(std::move(o));
  }
  void on_give_up(const GiveUpEvent& e) override {
    auto o = make(ObservedEvent::Kind::give_up, e.request_id, e.operation);
    o.attempt = e.error.attempts;
    o.code = e.error.code;
    o.stop_reason = e.error.stop_reason;
    o.reinitialized = e.error.reinitialized;
    add(std::move(o));
  }
  void on_success(const SuccessEvent& e) override {
    auto o = make(ObservedEvent::Kind::success, e.request_id, e.operation);
    o.attempt = e.attempts;
    o.reinitialized = e.reinitialized;
    add(std::move(o));
  }

  std::vector<ObservedEvent> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  // "attempt 1", "retry 1", "reinitialize 3", "give_up 4", "success 2": a compact trace, optionally
  // of one request id only.
  std::vector<std::string> trace(std::string_view request_id = {}) {
    std::vector<std::string> out;
    for (const auto& e : events()) {
      if (!request_id.empty() && e.request_id != request_id) continue;
      switch (e.kind) {
        case ObservedEvent::Kind::attempt: out.push_back("attempt " + std::to_string(e.attempt)); break;
        case ObservedEvent::Kind::retry: out.push_back("retry " + std::to_string(e.attempt)); break;
        case ObservedEvent::Kind::reinitialize: out.push_back("reinitialize " + std::to_string(e.rank)); break;
        case ObservedEvent::Kind::give_up: out.push_back("give_up " + std::to_string(e.attempt)); break;
        case ObservedEvent::Kind::success: out.push_back("success " + std::to_string(e.attempt)); break;
      }
    }
    return out;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    events_.clear();
  }

 private:
  static ObservedEvent make(ObservedEvent::Kind kind, std::string_view request_id, Operation op) {
    ObservedEvent o;
    o.kind = kind;
    o.request_id = std::string(request_id);
    o.operation = op;
    return o;
  }
  void add(ObservedEvent e) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
  }
  std::mutex mutex_;
  std::vector<ObservedEvent> events_;
};

// A transport that answers from a script, in order, and logs what was posted: for sequences of
// attempts where a mock's expectations would be longer than the test. Thread-safe. An answer may be
// a function of the request (and may advance a fake clock to model a slow attempt).
class ScriptedTransport final : public Transport {
 public:
  struct Posted {
    std::string path;
    std::string body;
    std::string request_id;
    AttemptTimeouts timeouts;
    std::string endpoint;  // HttpRequest::endpoint: where a client sent it
  };
  using Answer = std::function<TransportResult(const HttpRequest&, const AttemptTimeouts&)>;

  void then(TransportResult result) {
    then([result](const HttpRequest&, const AttemptTimeouts&) { return result; });
  }
  void then(Answer answer) {
    std::lock_guard lock(mutex_);
    script_.push_back(std::move(answer));
  }
  // Used once the script runs out; without one, running out is a test failure.
  void otherwise(Answer answer) {
    std::lock_guard lock(mutex_);
    fallback_ = std::move(answer);
  }

  TransportResult post(const HttpRequest& request, const AttemptTimeouts& timeouts) override {
    Answer answer;
    {
      std::lock_guard lock(mutex_);
      std::string id;
      for (const auto& h : request.headers) {
        if (h.name == "X-Request-Id") id = h.value;
      }
      posted_.push_back({request.path, request.body, id, timeouts, request.endpoint});
      if (!script_.empty()) {
        answer = std::move(script_.front());
        script_.pop_front();
      } else {
        answer = fallback_;
      }
    }
    if (!answer) {
      ADD_FAILURE() << "unexpected post to " << request.path << ": the script ran out";
      return TransportError{errc::connection_failed, false, "script ran out"};
    }
    return answer(request, timeouts);
  }

  std::vector<Posted> posted() {
    std::lock_guard lock(mutex_);
    return posted_;
  }
  std::size_t count(std::string_view path) {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& p : posted_) n += p.path == path ? 1 : 0;
    return n;
  }
  // The endpoint of each post, in order.
  std::vector<std::string> endpoints() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& p : posted_) out.push_back(p.endpoint);
    return out;
  }
  std::size_t remaining() {
    std::lock_guard lock(mutex_);
    return script_.size();
  }

 private:
  std::mutex mutex_;
  std::deque<Answer> script_;
  Answer fallback_;
  std::vector<Posted> posted_;
};

// ---- Canned answers ----
inline HttpResponse http_answer(int status, std::string body, std::string content_type = "application/json",
                                std::vector<HttpHeader> headers = {}) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  r.headers = std::move(headers);
  if (!r.content_type.empty()) r.headers.push_back({"content-type", r.content_type});
  return r;
}
inline HttpResponse no_content() { return http_answer(204, "", ""); }
inline HttpResponse detail_answer(int status, std::string_view detail) {
  return http_answer(status, "{\"detail\":\"" + std::string(detail) + "\"}");
}
inline TransportError transport_failure(errc code, bool sent, std::string message = "simulated") {
  return TransportError{code, sent, std::move(message)};
}

// A member of a highly available service that is not the leader (routes.hpp, kNotLeaderDetailPrefix),
// naming the leader when `leader` is not empty.
inline HttpResponse not_leader_answer(std::string leader = {}) {
  std::vector<HttpHeader> headers;
  if (!leader.empty()) headers.push_back({"X-Hf3fs-Leader", std::move(leader)});
  return http_answer(503, R"({"detail":"not the leader: nothing applied"})", "application/json", std::move(headers));
}

// A connection nothing accepted: the server is down or restarting (TransportError::unreachable).
inline TransportError refused_connection() {
  return TransportError{errc::connection_failed, false, "Connection refused", true};
}

}  // namespace hf3fs_meta::testing
