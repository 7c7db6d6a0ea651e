// The SDK's guards, against a fake server that records every request: tokens that
// cannot be sent are refused before anything is (fuzzed with keys), durations too long for the
// clock are clamped, urllib3's attempt count and backoff as a policy configuration, error texts
// that say what happened, and keyed releases to a server that advertises them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"

#include "client/page_keys.hpp"
#include "client/validation.hpp"
#include "client/http_peer.hpp"
#include "internal/token_file.hpp"
#include "support/fakes.hpp"
#include "support/scripted_client.hpp"

namespace hf3fs_meta {
namespace {

using namespace std::chrono_literals;
using testing::FakeClock;
using testing::FakeSleeper;
using testing::FixedBackoff;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A server in a test: it records every request and answers allocate (a page per key, counting up
// modulo `num_pages`), confirm_write (204), batch_exists, clear and drop; `keyed` adds
// kKeyedReleaseHeader to every answer; `answer`, when set, answers instead.
class FakeServer final : public Transport {
 public:
  bool keyed = false;
  Page num_pages = 1000;
  std::function<TransportResult(const HttpRequest&)> answer;

  TransportResult post(const HttpRequest& request, const AttemptTimeouts& timeouts) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
    timeouts_.push_back(timeouts);
    if (answer) return answer(request);
    HttpResponse r = respond(request);
    if (keyed) r.headers.push_back({std::string(kKeyedReleaseHeader), "1"});
    return r;
  }

  std::vector<HttpRequest> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::vector<AttemptTimeouts> timeouts() {
    std::lock_guard lock(mutex_);
    return timeouts_;
  }
  std::string last_body() {
    std::lock_guard lock(mutex_);
    return requests_.empty() ? std::string() : requests_.back().body;
  }

 private:
  HttpResponse respond(const HttpRequest& request) {
    if (request.path == "/keys/batch_allocate") {
      auto decoded = protocol::decode_allocate_request(request.body);
      if (!decoded) return testing::detail_answer(400, "bad allocate");
      std::vector<Page> pages;
      for (std::size_t i = 0; i < decoded.value().keys.size(); ++i) pages.push_back(next_page_++ % num_pages);
      const auto& sent = decoded.value();
      return testing::http_answer(200, protocol::encode_allocate_response(sent.rank, sent.keys, pages));
    }
    if (request.path == "/keys/batch_exists") {
      auto decoded = protocol::decode_batch_exists_request(request.body);
      if (!decoded) return testing::detail_answer(400, "bad exists");
      return testing::http_answer(200, protocol::encode_batch_exists_response(
                                           std::vector<bool>(decoded.value().keys.size(), false)));
    }
    if (request.path.starts_with("/rank/") && request.path.ends_with("/drop")) {
      const Rank rank = std::stoll(request.path.substr(6));
      return testing::http_answer(200, protocol::encode_drop_response(rank, DropOutcome{true, 8, 0, 0}));
    }
    if (request.path == "/clear") return testing::http_answer(200, R"({"message":"cleared"})");
    return testing::no_content();
  }

  std::mutex mutex_;
  std::vector<HttpRequest> requests_;
  std::vector<AttemptTimeouts> timeouts_;
  Page next_page_ = 0;
};

std::optional<std::string> header_of(const HttpRequest& request, std::string_view name) {
  for (const auto& h : request.headers) {
    if (h.name == name) return h.value;
  }
  return std::nullopt;
}

struct Rig {
  std::shared_ptr<FakeServer> server = std::make_shared<FakeServer>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  std::shared_ptr<FakeSleeper> sleeper = std::make_shared<FakeSleeper>(clock);
  std::shared_ptr<testing::RecordingObserver> observer = std::make_shared<testing::RecordingObserver>();
  ClientOptions options(std::string token = {}) const {
    ClientOptions o;
    o.transport = server;
    o.clock = clock;
    o.sleeper = sleeper;
    o.observer = observer;
    o.auth_token = std::move(token);
    return o;
  }
};

// ---- Tokens ----------------------------------------------------------------------------------

TEST(ClientGuardsTest, ATokenWithCrLfRefusesEveryCallBeforeAnythingIsSent) {
  Rig s;
  Client client(s.options("t\r\nX-Injected: yes"));
  const auto refused = [](const Error& e, Operation op) {
    EXPECT_EQ(e.code, errc::invalid_argument);
    EXPECT_EQ(e.operation, op);
    EXPECT_FALSE(e.sent);
    EXPECT_THAT(e.detail, StartsWith("ClientOptions::auth_token: byte 0x0D at offset 1 is not visible ASCII"));
    EXPECT_TRUE(e.request_id.empty());
  };
  refused(client.allocate(0, {"k"}).error(), Operation::allocate);
  refused(client.batch_exists({"k"}).error(), Operation::batch_exists);
  refused(client.confirm_write(0, {{"k", 0}}).error(), Operation::confirm_write);
  refused(client.ensure_initialized(0, 8).error(), Operation::initialize);
  refused(client.stats().error(), Operation::stats);
  refused(client.clear().error(), Operation::clear);
  refused(client.raw("/clear", "").error(), Operation::raw);
  EXPECT_TRUE(s.server->requests().empty());
  EXPECT_TRUE(s.observer->events().empty());
}

TEST(ClientGuardsTest, TheTokenRuleIsVisibleAsciiAndNamesTheFirstBadByte) {
  EXPECT_EQ(internal::token_problem(""), std::nullopt);  // empty: no Authorization header
  EXPECT_EQ(internal::token_problem("!azAZ09~-._+/="), std::nullopt);
  for (const std::string& bad : {std::string("a b"), std::string("a\tb"), std::string("a\nb"), std::string("a\x7f" "b"),
                                std::string("a\xc3\xa9"), std::string("a\0b", 3)}) {
    auto problem = internal::token_problem(bad);
    ASSERT_TRUE(problem.has_value()) << bad;
    EXPECT_THAT(*problem, StartsWith("byte 0x")) << bad;
    EXPECT_THAT(*problem, HasSubstr("at offset 1 is not visible ASCII (0x21-0x7E)")) << bad;
  }
  EXPECT_THAT(*internal::token_problem("ab\xff"), StartsWith("byte 0xFF at offset 2"));
}

// Fuzz-style: random tokens and keys, a bounded loop, a fixed seed. Whatever the input, either the
// call is refused before sending (invalid_argument, nothing recorded), or what was sent is valid:
// every header value visible ASCII or space, the token exactly as given, and a body the server's
// strict decoders read back to the very keys given.
TEST(ClientGuardsTest, FuzzedTokensAndKeysAreRefusedOrSentIntact) {
  std::mt19937_64 random(23);
  const auto byte = [&]() -> char {
    // Half from the edges that matter (controls, space, DEL, quote, backslash, non-ASCII), half any.
    static constexpr unsigned char kEdges[] = {0x00, 0x09, 0x0A, 0x0D, 0x20, 0x21, 0x22, 0x5C,
                                               0x7E, 0x7F, 0x80, 0xC3, 0xA9, 0xED, 0xF4, 0xFF};
    if (random() % 2) return static_cast<char>(kEdges[random() % sizeof kEdges]);
    return static_cast<char>(random() % 256);
  };
  const auto text = [&](std::size_t max) {
    std::string s(random() % (max + 1), '\0');
    for (auto& c : s) c = random() % 3 ? static_cast<char>('a' + random() % 26) : byte();
    return s;
  };
  int refused_tokens = 0, named_token = 0, sent_tokens = 0, refused_keys = 0, sent_keys = 0;
  for (int round = 0; round < 1500; ++round) {
    Rig s;
    const std::string token = text(12);
    const std::vector<std::string> keys{text(10), text(10)};
    Client client(s.options(token));
    auto r = client.batch_exists(keys);
    const auto sent = s.server->requests();
    if (internal::token_problem(token)) {
      ++refused_tokens;
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, errc::invalid_argument);
      // The keys are checked first; a call with good keys names the token.
      if (!r.error().detail.starts_with("keys[")) {
        ++named_token;
        EXPECT_THAT(r.error().detail, StartsWith("ClientOptions::auth_token: "));
      }
      EXPECT_TRUE(sent.empty()) << "token sent: " << token;
      continue;
    }
    ++sent_tokens;
    if (!r) {
      ++refused_keys;
      EXPECT_EQ(r.error().code, errc::invalid_argument) << r.error().message();
      EXPECT_TRUE(sent.empty());
      continue;
    }
    ++sent_keys;
    ASSERT_EQ(sent.size(), 1u);
    for (const auto& h : sent[0].headers) {
      for (const char c : h.value) {
        EXPECT_TRUE(c >= 0x20 && c <= 0x7E) << h.name << " carries byte " << int(static_cast<unsigned char>(c));
      }
    }
    EXPECT_EQ(header_of(sent[0], "Authorization"), token.empty() ? std::nullopt : std::optional("Bearer " + token));
    auto decoded = protocol::decode_batch_exists_request(sent[0].body);
    ASSERT_TRUE(decoded) << decoded.error().message;
    EXPECT_EQ(decoded.value().keys, keys);
  }
  // The seed reaches every branch.
  EXPECT_GT(refused_tokens, 100);
  EXPECT_GT(named_token, 50);
  EXPECT_GT(sent_tokens, 100);
  EXPECT_GT(refused_keys, 50);
  EXPECT_GT(sent_keys, 50);
}

TEST(ClientGuardsTest, FuzzedAllocateAndConfirmKeysAreRefusedOrDecodeBackExactly) {
  std::mt19937_64 random(2323);
  const auto key = [&] {
    std::string s(1 + random() % 8, '\0');
    for (auto& c : s) c = random() % 4 ? static_cast<char>('a' + random() % 26) : static_cast<char>(random() % 256);
    return s;
  };
  int refused = 0, sent = 0;
  for (int round = 0; round < 1000; ++round) {
    Rig s;
    Client client(s.options());
    const std::vector<BlockKey> keys{{key(), key()}, {key(), ""}};
    auto pages = client.allocate(0, keys);
    if (!pages) {
      ++refused;
      EXPECT_EQ(pages.error().code, errc::invalid_argument);
      EXPECT_THAT(pages.error().detail, HasSubstr("not valid UTF-8 at byte"));
      EXPECT_TRUE(s.server->requests().empty());
      continue;
    }
    ++sent;
    auto decoded = protocol::decode_allocate_request(s.server->last_body());
    ASSERT_TRUE(decoded) << decoded.error().message;
    EXPECT_EQ(decoded.value().keys, keys);
    ASSERT_TRUE(client.confirm_write(0, {{keys[0].key, pages.value()[0]}}, {pages.value()[1]}));
    auto confirm = protocol::decode_confirm_write_request(s.server->last_body());
    ASSERT_TRUE(confirm) << confirm.error().message;
    EXPECT_EQ(confirm.value().confirmations, (std::vector<Confirmation>{{keys[0].key, pages.value()[0]}}));
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(sent, 100);
}

TEST(ClientGuardsTest, KeysThatAreNotUtf8AreRefusedNamingTheirIndexAndByte) {
  const auto detail = [](const std::optional<Error>& e) { return e ? e->detail : std::string("accepted"); };
  EXPECT_EQ(detail(internal::check_allocate({{"ok", ""}, {"abcdefghij\xff", ""}})),
            "keys[1]: not valid UTF-8 at byte 10");
  EXPECT_EQ(detail(internal::check_allocate({{"ok", ""}, {"k", "p\xc3"}})), "keys[1][1]: not valid UTF-8 at byte 1");
  EXPECT_EQ(detail(internal::check_lookup(Operation::batch_exists, {"caf\xc3\xa9", "\xed\xa0\x80"})),
            "keys[1]: not valid UTF-8 at byte 0");  // a surrogate
  EXPECT_EQ(detail(internal::check_confirm_write({{"a\x80", 0}}, {})), "confirmations[0]: not valid UTF-8 at byte 1");
  EXPECT_EQ(detail(internal::check_allocate({{"caf\xc3\xa9-0123456789abcdef", "\xf0\x9f\x98\x80"}})), "accepted");
}

// ---- Durations ---------------------------------------------------------------------------------

TEST(ClientGuardsTest, DurationsTooLongForTheClockAreClampedNotOverflowed) {
  Rig s;
  ClientOptions o = s.options();
  o.connect_timeout = std::chrono::milliseconds::max();
  o.request_timeout = std::chrono::milliseconds::max();
  o.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(4, std::chrono::milliseconds::max());
  Client client(o);
  // Before: the deadline overflowed into the past ("deadline of -9.22e+15 s reached").
  auto r = client.batch_exists({"k"});
  ASSERT_TRUE(r) << r.error().message();
  auto call = client.batch_exists({"k"}, CallOptions{std::chrono::milliseconds::max()});
  ASSERT_TRUE(call) << call.error().message();
  for (const auto& t : s.server->timeouts()) {
    EXPECT_EQ(t.connect, kMaxDuration);
    EXPECT_EQ(t.total, kMaxDuration);
  }
  EXPECT_EQ(LimitedAttemptsRetryPolicy(1, std::chrono::milliseconds::max()).deadline(), kMaxDuration);
  EXPECT_EQ(LimitedAttemptsRetryPolicy(1, -5ms).deadline(), 0ms);
  EXPECT_EQ(clamp_duration(std::chrono::nanoseconds::max()), std::chrono::nanoseconds(kMaxDuration));
  EXPECT_EQ(clamp_duration(std::chrono::nanoseconds::min()), 0ns);
}

TEST(ClientGuardsTest, BackoffsTooLongForTheClockStayWithinIt) {
  const ExponentialBackoffPolicy exponential(std::chrono::milliseconds::max(), std::chrono::milliseconds::max());
  const Urllib3BackoffPolicy urllib3(std::chrono::milliseconds::max(), std::chrono::milliseconds::max());
  for (int n = 1; n < 80; ++n) {
    for (const BackoffPolicy* p : std::vector<const BackoffPolicy*>{&exponential, &urllib3}) {
      const auto d = p->delay(n, 0.999);
      EXPECT_GE(d, 0ns) << n;
      EXPECT_LE(d, std::chrono::nanoseconds(kMaxDuration)) << n;
    }
  }
}

// A backoff policy of the user's that asks for forever: the loop waits at most what is left.
class ForeverBackoff final : public BackoffPolicy {
 public:
  std::unique_ptr<BackoffPolicy> clone() const override { return std::make_unique<ForeverBackoff>(); }
  std::chrono::nanoseconds delay(int, double) const override { return std::chrono::nanoseconds::max(); }
};

TEST(ClientGuardsTest, AnEndlessBackoffStopsTheCallAtOnceWithATrueMessage) {
  Rig s;
  ClientOptions o = s.options();
  o.backoff_policy = std::make_shared<ForeverBackoff>();
  s.server->answer = [](const HttpRequest&) -> TransportResult { return testing::detail_answer(503, "busy"); };
  Client client(o);
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 1);
  EXPECT_TRUE(s.sleeper->sleeps().empty());
  EXPECT_THAT(r.error().stop_reason, HasSubstr("could not start within the deadline of 10 s"));
}

TEST(ClientGuardsTest, ADedupWindowTooLongForTheClockStillLetsAnAllocateRepeat) {
  Rig s;
  int answered = 0;
  s.server->answer = [&](const HttpRequest& request) -> TransportResult {
    const std::vector<HttpHeader> window{{"X-Request-Id-Dedup", "9223372036854775807"}};
    if (request.path == "/keys/batch_exists") {
      return testing::http_answer(200, R"({"exists":[false]})", "application/json", window);
    }
    if (answered++ == 0) return testing::http_answer(502, "", "", window);  // ambiguous
    const std::vector<BlockKey> keys{{"k", ""}};
    return testing::http_answer(200, protocol::encode_allocate_response(0, keys, std::vector<Page>{4}),
                                "application/json", window);
  };
  Client client(s.options());
  ASSERT_TRUE(client.batch_exists({"k"}));
  auto pages = client.allocate(0, {"k"});
  ASSERT_TRUE(pages) << pages.error().message();
  EXPECT_THAT(pages.value(), ElementsAre(4));
}

// ---- urllib3's attempt count and backoff, as a policy configuration (the Python drop-in's) -------

TEST(ClientGuardsTest, Urllib3BackoffIsZeroThenFactorTimesTwoToTheN) {
  const Urllib3BackoffPolicy vllm;  // backoff_factor 0.3, as vLLM's client
  EXPECT_EQ(vllm.delay(1, 0.9), 0ns);
  EXPECT_EQ(vllm.delay(2, 0.9), 600ms);
  EXPECT_EQ(vllm.delay(3, 0.1), 1200ms);
  EXPECT_EQ(vllm.delay(4, 0.5), 2400ms);
  EXPECT_EQ(vllm.delay(10, 0.5), 120s);  // 0.3 * 2^9 = 153.6 s, capped at urllib3's backoff_max
  EXPECT_EQ(vllm.delay(1000, 0.5), 120s);
  EXPECT_EQ(Urllib3BackoffPolicy(1s, 5s).delay(3, 0), 4s);
}

ClientOptions urllib3_like(const Rig& s, int max_retries) {
  ClientOptions o = s.options();
  o.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(max_retries + 1, 10s, Unreachable::count);
  o.backoff_policy = std::make_shared<Urllib3BackoffPolicy>();
  o.retry_budget.failure_cost = 0;
  return o;
}

TEST(ClientGuardsTest, CountingUnreachableMakesRefusedConnectionsStopAtTheAttemptCount) {
  Rig s;
  s.server->answer = [](const HttpRequest&) -> TransportResult { return testing::refused_connection(); };
  Client client(urllib3_like(s, 3));
  // Every call, not only the first: no budget drains and shortens later ones.
  for (int call = 0; call < 5; ++call) {
    const auto before = s.clock->elapsed();
    auto r = client.batch_exists({"k"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::connection_failed);
    EXPECT_EQ(r.error().attempts, 4);
    EXPECT_EQ(r.error().stop_reason, "retry policy exhausted after 4 attempts in 1.8 s");
    EXPECT_EQ(s.clock->elapsed() - before, 1800ms);
  }
  EXPECT_EQ(s.server->requests().size(), 20u);
  const auto sleeps = s.sleeper->sleeps();
  ASSERT_GE(sleeps.size(), 3u);
  EXPECT_THAT(std::vector(sleeps.begin(), sleeps.begin() + 3), ElementsAre(0ns, 600ms, 1200ms));

  // The default policy still rides out a restart until its deadline.
  Rig d;
  d.server->answer = [](const HttpRequest&) -> TransportResult { return testing::refused_connection(); };
  auto r = Client(d.options()).batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_GT(r.error().attempts, 4);
}

TEST(ClientGuardsTest, CountingUnreachableKeepsTheCountForEveryFailure) {
  Rig s;
  s.server->answer = [](const HttpRequest&) -> TransportResult { return testing::detail_answer(503, "busy"); };
  Client client(urllib3_like(s, 1));
  auto r = client.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(s.sleeper->sleeps(), std::vector<std::chrono::nanoseconds>{0ns});
}

// ---- Error texts ------------------------------------------------------------------------------

TEST(ClientGuardsTest, A401Or403NamesTheTokenAndWhereToSetIt) {
  for (const int status : {401, 403}) {
    Rig s;
    s.server->answer = [status](const HttpRequest&) -> TransportResult {
      return testing::detail_answer(status, "Not authenticated");
    };
    auto r = Client(s.options()).batch_exists({"k"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, errc::unexpected_status);
    const std::string m = r.error().message();
    EXPECT_THAT(m, HasSubstr("refused the request's credentials (Not authenticated)"));
    for (const char* where : {"--token-file", "$HF3FS_META_TOKEN", "token=", "ClientOptions::auth_token"}) {
      EXPECT_THAT(m, HasSubstr(where)) << status;
    }
    EXPECT_THAT(m, Not(HasSubstr("base URL"))) << status;
    // 403 is a known token outside its namespace: the advice names the namespace settings too.
    EXPECT_EQ(m.find("ClientOptions::namespace_name") != std::string::npos, status == 403) << m;
  }
  Error other;
  other.code = errc::unexpected_status;
  other.status = 404;
  EXPECT_THAT(other.message(), HasSubstr("check that the base URL points at an HF3FS metadata server"));
}

// `--deadline-ms 1500` said "deadline of 1.5 s reached ... in 1.06 s": the loop had stopped early,
// because the next backoff would pass the deadline. The message now says that.
TEST(ClientGuardsTest, StoppingBeforeTheDeadlineSaysSoAndTheRealElapsedTime) {
  Rig s;
  ClientOptions o = s.options();
  o.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(10, 1500ms);
  o.backoff_policy = std::make_shared<FixedBackoff>(400ms);
  s.server->answer = [&](const HttpRequest&) -> TransportResult {
    s.clock->advance(350ms);
    return testing::detail_answer(503, "busy");
  };
  auto r = Client(o).batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().attempts, 2);
  EXPECT_EQ(r.error().stop_reason,
            "stopped after 2 attempts in 1.1 s: the next attempt, after a 0.4 s backoff, could not start within the "
            "deadline of 1.5 s");
}

// ---- Keyed releases --------------------------------------------------------------------------

TEST(ClientGuardsTest, ReleasesAreBareToAServerThatDoesNotAdvertiseKeyedReleases) {
  Rig s;
  Client client(s.options());
  ASSERT_THAT(client.allocate(0, {"a", "b"}).value(), ElementsAre(0, 1));
  ASSERT_TRUE(client.confirm_write(0, {}, {0, 1}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":0,"confirmations":[],"pages_to_release":[0,1]})");
}

TEST(ClientGuardsTest, AKnownPageIsReleasedWithItsKeyToAServerThatAdvertisesIt) {
  Rig s;
  s.server->keyed = true;
  Client client(s.options());
  ASSERT_THAT(client.allocate(0, {"a", "b", "c\"d"}).value(), ElementsAre(0, 1, 2));
  // Page 7 was never allocated to this client: bare.
  ASSERT_TRUE(client.confirm_write(0, {{"a", 0}}, {1, 7, 2}));
  EXPECT_EQ(s.server->last_body(),
            R"({"rank":0,"confirmations":[["a",0]],"pages_to_release":[["b",1],7,["c\"d",2]]})");
  // Confirmed and released pages are forgotten: a second release of them is bare.
  ASSERT_TRUE(client.confirm_write(0, {}, {0, 1}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":0,"confirmations":[],"pages_to_release":[0,1]})");
}

TEST(ClientGuardsTest, KeyedReleasesFollowTheLatestAnswersHeaderAndTheRank) {
  Rig s;
  s.server->keyed = true;
  s.server->num_pages = 2;
  Client client(s.options());
  ASSERT_THAT(client.allocate(0, {"a"}).value(), ElementsAre(0));
  ASSERT_THAT(client.allocate(1, {"x"}).value(), ElementsAre(1));
  ASSERT_THAT(client.allocate(1, {"y"}).value(), ElementsAre(0));
  // Page 0 again, for another key: the newer allocation counts.
  ASSERT_THAT(client.allocate(0, {"z"}).value(), ElementsAre(1));
  ASSERT_THAT(client.allocate(0, {"w"}).value(), ElementsAre(0));
  ASSERT_TRUE(client.confirm_write(0, {}, {0, 1}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":0,"confirmations":[],"pages_to_release":[["w",0],["z",1]]})");
  ASSERT_TRUE(client.confirm_write(1, {}, {1, 0}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":1,"confirmations":[],"pages_to_release":[["x",1],["y",0]]})");

  // A server that stops advertising it (restarted without it, another server behind the URL).
  ASSERT_THAT(client.allocate(0, {"v"}).value(), ElementsAre(1));
  s.server->keyed = false;
  ASSERT_TRUE(client.batch_exists({"v"}));
  ASSERT_TRUE(client.confirm_write(0, {}, {1}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":0,"confirmations":[],"pages_to_release":[1]})");
}

TEST(ClientGuardsTest, AFailedReleaseKeepsItsKeysAndClearOrDropForgetThem) {
  Rig s;
  s.server->keyed = true;
  Client client(s.options());
  ASSERT_THAT(client.allocate(0, {"a"}).value(), ElementsAre(0));
  ASSERT_THAT(client.allocate(1, {"b"}).value(), ElementsAre(1));
  ASSERT_THAT(client.allocate(2, {"c"}).value(), ElementsAre(2));
  s.server->answer = [](const HttpRequest&) -> TransportResult {
    HttpResponse r = testing::detail_answer(400, "refused");
    r.headers.push_back({std::string(kKeyedReleaseHeader), "1"});
    return r;
  };
  ASSERT_FALSE(client.confirm_write(0, {}, {0}));
  s.server->answer = nullptr;
  ASSERT_TRUE(client.confirm_write(0, {}, {0}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":0,"confirmations":[],"pages_to_release":[["a",0]]})");

  ASSERT_TRUE(client.drop_rank(1));
  ASSERT_TRUE(client.confirm_write(1, {}, {1}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":1,"confirmations":[],"pages_to_release":[1]})");
  ASSERT_TRUE(client.clear());
  ASSERT_TRUE(client.confirm_write(2, {}, {2}));
  EXPECT_EQ(s.server->last_body(), R"({"rank":2,"confirmations":[],"pages_to_release":[2]})");
}

TEST(ClientGuardsTest, PageKeysHoldAPageOnceAndNoMoreThanTheirBound) {
  internal::PageKeys keys(4);
  const std::vector<BlockKey> names{{"a", ""}, {"b", ""}, {"c", ""}, {"d", ""}, {"e", ""}, {"f", ""}};
  const std::vector<Page> pages{0, 1, kNoPage, 2, 3, 4};
  keys.remember(0, names, pages);
  EXPECT_EQ(keys.size(0), 4u);  // page 4 beyond the bound: not remembered, so released bare
  // Page 4 not known: no entry for it, and the others at their index among the pages asked about.
  EXPECT_EQ(keys.release_keys(0, std::vector<Page>{4, 0, 1, 2, 3}),
            (std::vector<ReleaseKey>{{1, "a"}, {2, "b"}, {3, "d"}, {4, "e"}}));
  EXPECT_TRUE(keys.release_keys(1, std::vector<Page>{0}).empty());  // a rank it knows nothing of
  // Allocated again: replaced, never added.
  for (int round = 0; round < 100; ++round) {
    std::string key = "k";  // (not "k" + to_string: GCC 12 warns falsely on it, -Wrestrict)
    key += std::to_string(round);
    keys.remember(0, std::vector<BlockKey>{{key, ""}}, std::vector<Page>{round % 4});
  }
  EXPECT_EQ(keys.size(0), 4u);
  EXPECT_EQ(keys.release_keys(0, std::vector<Page>{3}), (std::vector<ReleaseKey>{{0, "k99"}}));
  keys.forget(0, std::vector<Confirmation>{{"x", 0}}, std::vector<Page>{1, 9});
  EXPECT_EQ(keys.size(0), 2u);
  EXPECT_EQ(keys.size(1), 0u);
  keys.forget_rank(0);
  EXPECT_EQ(keys.size(0), 0u);
}

// Many threads allocate and release on one client (each its own rank): each release names the key
// its page was allocated for. Run under TSan with the concurrency label.
TEST(ClientGuardsTest, KeyedReleasesFromManyThreads) {
  Rig s;
  s.server->keyed = true;
  std::mutex expected_mutex;
  std::vector<std::string> expected;
  Client client(s.options());
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::string key = "t";  // (not "t" + to_string: GCC 12 warns falsely on it, -Wrestrict)
        key += std::to_string(t) + "-" + std::to_string(i);
        auto pages = client.allocate(t, {key});
        ASSERT_TRUE(pages);
        const Page page = pages.value()[0];
        ASSERT_TRUE(client.confirm_write(t, {}, {page}));
        std::lock_guard lock(expected_mutex);
        expected.push_back(R"({"rank":)" + std::to_string(t) + R"(,"confirmations":[],"pages_to_release":[[")" + key +
                           R"(",)" + std::to_string(page) + "]]}");
      }
    });
  }
  for (auto& th : threads) th.join();
  // Every expected body was sent (the order across threads is not fixed).
  std::vector<std::string> sent;
  for (const auto& r : s.server->requests()) {
    if (r.path == "/keys/confirm_write") sent.push_back(r.body);
  }
  ASSERT_EQ(sent.size(), 600u);
  std::sort(sent.begin(), sent.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sent, expected);
}

// Over HTTP (CurlTransport): the header is read from the wire whatever its case, and the body of
// the release on the wire names the key.
TEST(ClientGuardsTest, KeyedReleasesOverHttp) {
  for (const bool keyed : {false, true}) {
    testing::HttpPeer peer(testing::HttpPeer::Mode::answer, [keyed](const testing::PeerRequest& request) {
      testing::PeerResponse r;
      if (keyed) r.headers.push_back({"x-hf3fs-keyed-release", "1"});
      if (request.target == "/keys/batch_allocate") {
        r.body = R"({"rank":0,"results":[["a",5]]})";
      } else {
        r.status = 204;
        r.content_type.clear();
      }
      return r;
    });
    ClientOptions options;
    options.base_url = peer.url();
    Client client(options);
    auto pages = client.allocate(0, {"a"});
    ASSERT_TRUE(pages) << pages.error().message();
    ASSERT_THAT(pages.value(), ElementsAre(5));
    auto done = client.confirm_write(0, {}, {5});
    ASSERT_TRUE(done) << done.error().message();
    const auto seen = peer.requests();
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[1].body, keyed ? R"({"rank":0,"confirmations":[],"pages_to_release":[["a",5]]})"
                                  : R"({"rank":0,"confirmations":[],"pages_to_release":[5]})");
  }
}

TEST(ClientGuardsTest, TheEncoderWritesKeyedAndBareReleases) {
  const std::vector<Confirmation> confirmations{{"k", 3}};
  const std::vector<Page> release{4, 5};
  EXPECT_EQ(protocol::encode_confirm_write_request(1, confirmations, release, std::vector<ReleaseKey>{{0, "a\\b"}}),
            R"({"rank":1,"confirmations":[["k",3]],"pages_to_release":[["a\\b",4],5]})");
  EXPECT_EQ(protocol::encode_confirm_write_request(1, confirmations, release, std::vector<ReleaseKey>{{1, "b"}}),
            R"({"rank":1,"confirmations":[["k",3]],"pages_to_release":[4,["b",5]]})");
  EXPECT_EQ(protocol::encode_confirm_write_request(1, confirmations, release, {}),
            protocol::encode_confirm_write_request(1, confirmations, release));
  // Out of the ascending order the shape asks for: from the first entry out of it on, bare.
  EXPECT_EQ(protocol::encode_confirm_write_request(1, {}, release, std::vector<ReleaseKey>{{1, "b"}, {0, "a"}}),
            R"({"rank":1,"confirmations":[],"pages_to_release":[4,["b",5]]})");
}

}  // namespace
}  // namespace hf3fs_meta
