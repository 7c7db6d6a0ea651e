// The hf3fs-meta CLI run in-process: over the in-process transport (the real protocol and state
// model), and over canned transports for the failures a live server cannot be made to give.
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "cli.hpp"
#include "hf3fs_meta/in_process_transport.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/transport.hpp"
#include "support/temp_file.hpp"

namespace hf3fs_meta::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int status;
  std::string out;
  std::string err;
  rapidjson::Document json() const {
    rapidjson::Document doc;
    doc.Parse(out.data(), out.size());  // sized: RapidJSON's SSE2 scanner would read past c_str()'s end
    EXPECT_FALSE(doc.HasParseError()) << out;
    return doc;
  }
};

class CannedTransport final : public Transport {
 public:
  explicit CannedTransport(std::function<TransportResult(const HttpRequest&)> answer) : answer_(std::move(answer)) {}
  TransportResult post(const HttpRequest& request, const AttemptTimeouts&) override {
    ++calls;
    return answer_(request);
  }
  int calls = 0;

 private:
  std::function<TransportResult(const HttpRequest&)> answer_;
};

class CliTest : public ::testing::Test {
 protected:
  CliRun run(std::vector<std::string> args) { return run_with(transport_, std::move(args)); }
  static CliRun run_with(std::shared_ptr<Transport> transport, std::vector<std::string> args) {
    Environment env;
    env.transport = std::move(transport);
    std::ostringstream out, err;
    int status = cli::run(args, env, out, err);
    return {status, out.str(), err.str()};
  }

  std::shared_ptr<MetadataState> state_ = std::make_shared<MetadataState>();
  std::shared_ptr<Transport> transport_ = make_in_process_transport(state_);
};

TEST_F(CliTest, InitPrintsTheServersMessage) {
  CliRun r = run({"init", "3", "--pages", "16"});
  EXPECT_EQ(r.status, kSuccess);
  EXPECT_EQ(r.out, "Rank 3 initialized with 16 pages\n");
  ASSERT_TRUE(state_->rank_stats(3).has_value());
  EXPECT_EQ(state_->rank_stats(3)->num_pages, 16);

  CliRun j = run({"--json", "init", "4", "--pages", "8"});
  auto doc = j.json();
  EXPECT_STREQ(doc["message"].GetString(), "Rank 4 initialized with 8 pages");
  EXPECT_EQ(doc["attempts"].GetInt(), 1);
  EXPECT_FALSE(doc["reinitialized"].GetBool());
}

TEST_F(CliTest, InitNeedsPagesForAWorkerButNotForTheScheduler) {
  EXPECT_EQ(run({"init", "3"}).status, kUsage);
  CliRun r = run({"init", "3", "--role", "scheduler"});
  EXPECT_EQ(r.status, kSuccess);
  EXPECT_EQ(r.out, "Scheduler role does not require initialization\n");
  EXPECT_EQ(run({"init", "3", "--pages", "4", "--role", "boss"}).status, kUsage);
}

TEST_F(CliTest, AllocateOnAnUnknownRankIsARefusalWithTheWholeErrorInJson) {
  CliRun r = run({"--json", "allocate", "3", "k1"});
  EXPECT_EQ(r.status, kServerRefused);
  auto doc = r.json();
  const auto& e = doc["error"];
  EXPECT_STREQ(e["code"].GetString(), "rank_not_initialized");
  EXPECT_EQ(e["status"].GetInt(), 500);
  EXPECT_STREQ(e["operation"].GetString(), "allocate");
  EXPECT_STREQ(e["detail"].GetString(), "Allocation failed: Rank 3 not initialized");
  EXPECT_STREQ(e["cause"].GetString(), "Rank 3 not initialized");
  EXPECT_EQ(e["rank"].GetInt64(), 3);
  EXPECT_TRUE(e["sent"].GetBool());
  EXPECT_EQ(e["attempts"].GetInt(), 1);
  EXPECT_FALSE(e["reinitialized"].GetBool());
  EXPECT_TRUE(e["request_id"].IsString());
  EXPECT_THAT(e["message"].GetString(), HasSubstr("rank 3"));

  CliRun text = run({"allocate", "3", "k1"});
  EXPECT_EQ(text.status, kServerRefused);
  EXPECT_THAT(text.err, HasSubstr("rank_not_initialized"));
  EXPECT_TRUE(text.out.empty());
}

TEST_F(CliTest, EnsurePagesReinitializesAndRepeats) {
  CliRun r = run({"--json", "allocate", "3", "k1", "k2:p", "--ensure-pages", "8"});
  ASSERT_EQ(r.status, kSuccess) << r.out << r.err;
  auto doc = r.json();
  EXPECT_EQ(doc["rank"].GetInt64(), 3);
  ASSERT_EQ(doc["allocations"].Size(), 2u);
  EXPECT_STREQ(doc["allocations"][0]["key"].GetString(), "k1");
  EXPECT_EQ(doc["allocations"][0]["page"].GetInt64(), 0);
  EXPECT_STREQ(doc["allocations"][1]["key"].GetString(), "k2");
  EXPECT_EQ(doc["allocations"][1]["page"].GetInt64(), 1);
  EXPECT_EQ(doc["attempts"].GetInt(), 2);
  EXPECT_TRUE(doc["reinitialized"].GetBool());
  EXPECT_EQ(state_->rank_stats(3)->num_pages, 8);
}

TEST_F(CliTest, ARepeatAfterReinitializationIsAllowedWithOneAttempt) {
  CliRun r = run({"--json", "--attempts", "1", "locations", "5", "k", "--ensure-pages", "4"});
  ASSERT_EQ(r.status, kSuccess) << r.out << r.err;
  auto doc = r.json();
  EXPECT_TRUE(doc["locations"][0].IsNull());
  EXPECT_EQ(doc["attempts"].GetInt(), 2);
  EXPECT_TRUE(doc["reinitialized"].GetBool());
}

TEST_F(CliTest, ConfirmExistsLocationsAndClear) {
  ASSERT_EQ(run({"init", "0", "--pages", "4"}).status, kSuccess);
  CliRun a = run({"allocate", "0", "k1", "k2"});
  ASSERT_EQ(a.status, kSuccess);
  EXPECT_EQ(a.out, "k1 0\nk2 1\n");

  CliRun c = run({"--json", "confirm", "0", "k1=0", "--release", "1"});
  ASSERT_EQ(c.status, kSuccess) << c.out << c.err;
  EXPECT_TRUE(c.json()["ok"].GetBool());
  EXPECT_EQ(state_->page_state(0, 1), PageState::free);

  CliRun e = run({"--json", "exists", "k1", "k2"});
  auto ed = e.json();
  ASSERT_EQ(ed["exists"].Size(), 2u);
  EXPECT_TRUE(ed["exists"][0].GetBool());
  EXPECT_FALSE(ed["exists"][1].GetBool());
  EXPECT_EQ(run({"exists", "k1", "k2"}).out, "k1 true\nk2 false\n");

  CliRun l = run({"--json", "locations", "0", "k1", "k2"});
  auto ld = l.json();
  EXPECT_EQ(ld["locations"][0].GetInt64(), 0);
  EXPECT_TRUE(ld["locations"][1].IsNull());

  CliRun cl = run({"clear"});
  EXPECT_EQ(cl.status, kSuccess);
  EXPECT_EQ(cl.out, "ok\n");
  EXPECT_EQ(state_->rank_count(), 0u);
}

TEST_F(CliTest, DeleteAndStats) {
  ASSERT_EQ(run({"init", "0", "--pages", "2"}).status, kSuccess);
  ASSERT_EQ(run({"allocate", "0", "k1"}).status, kSuccess);
  ASSERT_EQ(run({"confirm", "0", "k1=0"}).status, kSuccess);
  CliRun s = run({"stats"});
  ASSERT_EQ(s.status, kSuccess) << s.err;
  EXPECT_THAT(s.out, HasSubstr("rank 0 num_pages 2 free 1 allocated 0 mapped 1 orphaned 0 draining 0 kept_on_release 0\n"));
  EXPECT_THAT(s.out, HasSubstr("keys_complete 1\n"));
  CliRun d = run({"delete", "k1", "k2"});
  ASSERT_EQ(d.status, kSuccess) << d.err;
  EXPECT_EQ(d.out, "k1 deleted\nk2 absent\n");
  EXPECT_EQ(state_->key_count(), 0u);
  auto sd = run({"--json", "stats"}).json();
  EXPECT_EQ(sd["ranks"][0]["rank"].GetInt64(), 0);
  EXPECT_EQ(sd["ranks"][0]["free"].GetInt64(), 2);
  EXPECT_EQ(sd["ranks"][0]["kept_on_release"].GetUint64(), 0u);
  EXPECT_EQ(sd["deleted_keys"].GetUint64(), 1u);
  auto dd = run({"--json", "delete", "k1"}).json();
  EXPECT_FALSE(dd["deleted"][0].GetBool());
  EXPECT_EQ(run({"delete"}).status, kUsage);
  EXPECT_EQ(run({"stats", "x"}).status, kUsage);
  EXPECT_THAT(run({"delete", "--help"}).out, HasSubstr("Usage: hf3fs-meta delete"));
}

TEST_F(CliTest, DropRankForgetsTheRankAndItsKeysMappings) {
  ASSERT_EQ(run({"init", "0", "--pages", "4"}).status, kSuccess);
  ASSERT_EQ(run({"init", "1", "--pages", "8"}).status, kSuccess);
  ASSERT_EQ(run({"allocate", "1", "k"}).status, kSuccess);
  ASSERT_EQ(run({"confirm", "1", "k=0"}).status, kSuccess);
  CliRun d = run({"drop-rank", "1"});
  EXPECT_EQ(d.status, kSuccess) << d.err;
  EXPECT_EQ(d.out, "dropped rank 1: 8 pages, 1 key mappings, 1 keys removed\n");
  EXPECT_FALSE(state_->rank_stats(1).has_value());
  EXPECT_EQ(state_->key_count(), 0u);
  auto j = run({"--json", "drop-rank", "1"}).json();
  EXPECT_FALSE(j["dropped"].GetBool());
  EXPECT_EQ(run({"drop-rank"}).status, kUsage);
  EXPECT_EQ(run({"drop-rank", "1", "2"}).status, kUsage);
}

TEST_F(CliTest, StaleConfirmIsARefusal) {
  ASSERT_EQ(run({"init", "0", "--pages", "4"}).status, kSuccess);
  CliRun r = run({"--json", "confirm", "0", "k=2"});
  EXPECT_EQ(r.status, kServerRefused);
  EXPECT_STREQ(r.json()["error"]["code"].GetString(), "stale_allocation");
  EXPECT_EQ(r.json()["error"]["status"].GetInt(), 409);
}

TEST_F(CliTest, UsageErrorsAndInvalidArgumentsExitTwoWithNothingSent) {
  auto counting = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", "{}", {}};
  });
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"allocate"},
           {"allocate", "x", "k"},
           {"allocate", "3"},
           {"confirm", "3"},
           {"confirm", "3", "k"},
           {"confirm", "3", "k=x"},
           {"exists"},
           {"locations", "3"},
           {"clear", "extra"},
           {"raw", "/clear"},
           {"--attempts", "0", "clear"},
           {"--timeout-ms", "-5", "clear"},
           {"--bogus", "clear"},
           {"exists", "k", "--ensure-pages", "4"},
           {"allocate", "3", ""},               // an empty key: invalid_argument
           {"confirm", "3", "k=-1"},            // a negative page: invalid_argument
           {"allocate", "3", "k", "k"},         // a duplicate key: invalid_argument
       }) {
    CliRun r = run_with(counting, args);
    EXPECT_EQ(r.status, kUsage) << ::testing::PrintToString(args) << r.err;
  }
  EXPECT_EQ(counting->calls, 0);

  CliRun j = run_with(counting, {"--json", "allocate", "3", ""});
  EXPECT_STREQ(j.json()["error"]["code"].GetString(), "invalid_argument");
  EXPECT_FALSE(j.json()["error"]["sent"].GetBool());
}

TEST_F(CliTest, RawShowsStatusAndBodyOrTheClassifiedError) {
  ASSERT_EQ(run({"init", "0", "--pages", "4"}).status, kSuccess);
  CliRun ok = run({"--json", "raw", "/keys/batch_exists", R"({"keys": ["a"]})"});
  ASSERT_EQ(ok.status, kSuccess) << ok.err;
  auto doc = ok.json();
  EXPECT_EQ(doc["status"].GetInt(), 200);
  EXPECT_FALSE(doc["body"]["exists"][0].GetBool());

  CliRun empty = run({"--json", "raw", "/clear", "anything"});
  ASSERT_EQ(empty.status, kSuccess);
  EXPECT_EQ(empty.json()["status"].GetInt(), 204);
  EXPECT_TRUE(empty.json()["body"].IsNull());

  CliRun bad = run({"--json", "raw", "/keys/batch_exists", R"({"keys": 5})"});
  EXPECT_EQ(bad.status, kServerRefused);
  EXPECT_STREQ(bad.json()["error"]["code"].GetString(), "invalid_request");
  EXPECT_STREQ(bad.json()["error"]["detail"].GetString(), "Invalid keys format");
  EXPECT_STREQ(bad.json()["error"]["operation"].GetString(), "raw");
}

TEST_F(CliTest, NoUsableAnswerExitsThree) {
  auto refused = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return TransportError{errc::connection_failed, false, "Couldn't connect to server", true};
  });
  // Never sent: repeated until the deadline, whatever --attempts says.
  CliRun r = run_with(refused, {"--json", "--attempts", "1", "--deadline-ms", "200", "exists", "k"});
  EXPECT_EQ(r.status, kNoAnswer);
  EXPECT_STREQ(r.json()["error"]["code"].GetString(), "connection_failed");
  EXPECT_TRUE(r.json()["error"]["status"].IsNull());
  EXPECT_GT(refused->calls, 1);

  auto unavailable = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{503, "application/json", R"({"detail":"injected fault"})", {}};
  });
  CliRun u = run_with(unavailable, {"--attempts", "1", "exists", "k"});
  EXPECT_EQ(u.status, kNoAnswer);
  EXPECT_THAT(u.err, HasSubstr("unavailable"));
}

TEST_F(CliTest, AMalformedAnswerExitsFour) {
  auto garbage = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", R"({"exists":[true,true]})", {}};
  });
  CliRun r = run_with(garbage, {"--json", "exists", "k"});  // one key sent, two answers
  EXPECT_EQ(r.status, kProtocol);
  EXPECT_STREQ(r.json()["error"]["code"].GetString(), "protocol_error");
}

TEST_F(CliTest, ADeeplyNestedAnswerIsAProtocolErrorNotACrash) {
  auto deep = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", R"({"exists":)" + std::string(1'000'000, '['), {}};
  });
  EXPECT_EQ(run_with(deep, {"exists", "k"}).status, kProtocol);
  EXPECT_EQ(run_with(deep, {"locations", "0", "k"}).status, kProtocol);
}

// The bearer token: --token-file (content without surrounding whitespace), else $HF3FS_META_TOKEN.
TEST_F(CliTest, TheTokenComesFromTheTokenFileElseTheEnvironment) {
  std::vector<std::string> sent;  // each request's Authorization header, "-" for none
  auto recorder = std::make_shared<CannedTransport>([&](const HttpRequest& request) -> TransportResult {
    std::string authorization = "-";
    for (const auto& h : request.headers) {
      if (h.name == "Authorization") authorization = h.value;
    }
    sent.push_back(authorization);
    return HttpResponse{200, "application/json", R"({"exists":[false]})", {}};
  });
  hf3fs_meta::testing::TempFile file("\n  from-file \n");
  auto run_env = [&](std::string token, std::vector<std::string> args) {
    Environment env;
    env.transport = recorder;
    env.default_token = std::move(token);
    std::ostringstream out, err;
    return cli::run(args, env, out, err);
  };
  EXPECT_EQ(run_env("", {"exists", "k"}), kSuccess);
  EXPECT_EQ(run_env("from-env", {"exists", "k"}), kSuccess);
  EXPECT_EQ(run_env("", {"--token-file", file.path(), "exists", "k"}), kSuccess);
  EXPECT_EQ(run_env("from-env", {"--token-file", file.path(), "exists", "k"}), kSuccess);
  EXPECT_THAT(sent, ::testing::ElementsAre("-", "Bearer from-env", "Bearer from-file", "Bearer from-file"));

  // An unusable token file is a usage error, and nothing is sent.
  hf3fs_meta::testing::TempFile blank("\n");
  EXPECT_EQ(run_env("", {"--token-file", "/nonexistent/token", "exists", "k"}), kUsage);
  EXPECT_EQ(run_env("", {"--token-file", blank.path(), "exists", "k"}), kUsage);
  EXPECT_EQ(run_env("", {"exists", "k", "--token-file"}), kUsage);
  EXPECT_EQ(sent.size(), 4u);
}

// A token that cannot be sent (any byte outside visible ASCII) is refused before anything
// is sent, naming where it came from: $HF3FS_META_TOKEN or --token-file.
TEST_F(CliTest, ATokenThatCannotBeSentIsRefusedNamingWhereItCameFrom) {
  auto recorder = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", R"({"exists":[false]})", {}};
  });
  auto run_env = [&](std::string token, std::vector<std::string> args) {
    Environment env;
    env.transport = recorder;
    env.default_token = std::move(token);
    std::ostringstream out, err;
    const int status = cli::run(args, env, out, err);
    return CliRun{status, out.str(), err.str()};
  };
  CliRun env = run_env("t\r\nX-Injected: yes", {"exists", "k"});
  EXPECT_EQ(env.status, kUsage);
  EXPECT_THAT(env.err, HasSubstr("$HF3FS_META_TOKEN: byte 0x0D at offset 1 is not visible ASCII (0x21-0x7E)"));
  CliRun non_ascii = run_env("caf\xc3\xa9", {"--json", "exists", "k"});
  EXPECT_EQ(non_ascii.status, kUsage);
  EXPECT_THAT(non_ascii.out, HasSubstr("$HF3FS_META_TOKEN: byte 0xC3 at offset 3"));

  hf3fs_meta::testing::TempFile control("a\x01" "b\n");
  CliRun file = run_env("", {"--token-file", control.path(), "exists", "k"});
  EXPECT_EQ(file.status, kUsage);
  EXPECT_THAT(file.err, HasSubstr("--token-file: the token in '" + control.path() + "': byte 0x01 at offset 1"));
  hf3fs_meta::testing::TempFile inner_space("two words\n");
  EXPECT_EQ(run_env("", {"--token-file", inner_space.path(), "exists", "k"}).status, kUsage);
  // A good file wins over a bad environment, as it wins over a good one.
  hf3fs_meta::testing::TempFile good("good-token\n");
  EXPECT_EQ(run_env("bad token", {"--token-file", good.path(), "exists", "k"}).status, kSuccess);
  EXPECT_EQ(recorder->calls, 1);
}

// --url, else $HF3FS_META_URL, may list the members of a highly available service; the
// call goes to the leader a member names. A bad entry is a usage error naming where it came from and
// its index, and nothing is sent.
class CliEndpointsTest : public ::testing::Test {
 protected:
  CliEndpointsTest() {
    recorder = std::make_shared<CannedTransport>([this](const HttpRequest& request) -> TransportResult {
      sent.push_back(request.endpoint);
      if (request.endpoint != "http://127.0.0.1:18002") {
        return HttpResponse{503,
                            "application/json",
                            R"({"detail":"not the leader: nothing applied"})",
                            {{std::string(kLeaderHeader), "http://127.0.0.1:18002"}}};
      }
      return HttpResponse{200, "application/json", R"({"exists":[true]})", {}};
    });
  }
  CliRun run_env(std::string url, std::vector<std::string> args) {
    Environment env;
    env.transport = recorder;
    env.default_url = std::move(url);
    std::ostringstream out, err;
    const int status = cli::run(args, env, out, err);
    return CliRun{status, out.str(), err.str()};
  }

  std::vector<std::string> sent;  // each request's endpoint
  std::shared_ptr<CannedTransport> recorder;
};

TEST_F(CliEndpointsTest, AListFromTheFlagElseTheEnvironmentReachesTheLeader) {
  CliRun flag = run_env("", {"--url", "http://127.0.0.1:18001,http://127.0.0.1:18002", "exists", "k"});
  EXPECT_EQ(flag.status, kSuccess) << flag.err;
  CliRun env = run_env("http://127.0.0.1:18003, http://127.0.0.1:18001", {"exists", "k"});
  EXPECT_EQ(env.status, kSuccess) << env.err;
  EXPECT_THAT(sent, ::testing::ElementsAre("http://127.0.0.1:18001", "http://127.0.0.1:18002", "http://127.0.0.1:18003",
                                           "http://127.0.0.1:18002"));
  sent.clear();
  EXPECT_EQ(run_env("", {"exists", "k"}).status, kSuccess);  // the default, one URL
  EXPECT_THAT(sent, ::testing::ElementsAre("http://127.0.0.1:18000", "http://127.0.0.1:18002"));
}

TEST_F(CliEndpointsTest, ABadEntryIsAUsageErrorNamingWhereItCameFromAndNothingIsSent) {
  CliRun flag = run_env("", {"--url", "http://127.0.0.1:18001,127.0.0.1:18002", "exists", "k"});
  EXPECT_EQ(flag.status, kUsage);
  EXPECT_THAT(flag.err, HasSubstr("--url[1]: '127.0.0.1:18002' is not an http:// or https:// URL"));
  CliRun env = run_env("http://127.0.0.1:18001,", {"exists", "k"});
  EXPECT_EQ(env.status, kUsage);
  EXPECT_THAT(env.err, HasSubstr("$HF3FS_META_URL[1]: empty"));
  CliRun one = run_env("", {"--url", "http://h:99999", "exists", "k"});
  EXPECT_EQ(one.status, kUsage);
  EXPECT_THAT(one.err, HasSubstr("--url: 'http://h:99999' has port '99999'"));
  // A bad environment does not matter when the flag names a good one.
  EXPECT_EQ(run_env("nonsense", {"--url", "http://127.0.0.1:18002", "exists", "k"}).status, kSuccess);
  EXPECT_THAT(sent, ::testing::ElementsAre("http://127.0.0.1:18002"));
}

// --namespace NAME, else $HF3FS_META_NAMESPACE, is sent as X-Hf3fs-Namespace; a server
// that answers without echoing it (vLLM's) is a protocol error; a bad name is a usage error naming
// where it came from, and nothing is sent.
class CliNamespaceTest : public ::testing::Test {
 protected:
  CliNamespaceTest() {
    recorder = std::make_shared<CannedTransport>([this](const HttpRequest& request) -> TransportResult {
      std::string ns = "-";
      for (const auto& h : request.headers) {
        if (h.name == kNamespaceHeader) ns = h.value;
      }
      sent.push_back(ns);
      HttpResponse r{200, "application/json", R"({"exists":[false]})", {}};
      if (ns != "-" && echo) r.headers.push_back({std::string(kNamespaceHeader), ns});
      return r;
    });
  }
  CliRun run_env(std::string ns, std::vector<std::string> args) {
    Environment env;
    env.transport = recorder;
    env.default_namespace = std::move(ns);
    std::ostringstream out, err;
    const int status = cli::run(args, env, out, err);
    return CliRun{status, out.str(), err.str()};
  }

  bool echo = true;
  std::vector<std::string> sent;  // each request's namespace header, "-" for none
  std::shared_ptr<CannedTransport> recorder;
};

TEST_F(CliNamespaceTest, TheNamespaceComesFromTheFlagElseTheEnvironment) {
  EXPECT_EQ(run_env("", {"exists", "k"}).status, kSuccess);
  EXPECT_EQ(run_env("from-env", {"exists", "k"}).status, kSuccess);
  EXPECT_EQ(run_env("", {"--namespace", "m1", "exists", "k"}).status, kSuccess);
  EXPECT_EQ(run_env("from-env", {"exists", "k", "--namespace=m2"}).status, kSuccess);  // the flag wins
  EXPECT_EQ(run_env("from-env", {"--namespace", "", "exists", "k"}).status, kSuccess);  // empty: the default
  EXPECT_THAT(sent, ::testing::ElementsAre("-", "from-env", "m1", "m2", "-"));
}

TEST_F(CliNamespaceTest, ABadNameIsAUsageErrorNamingWhereItCameFromAndNothingIsSent) {
  CliRun flag = run_env("", {"--namespace", "a b", "exists", "k"});
  EXPECT_EQ(flag.status, kUsage);
  EXPECT_THAT(flag.err, HasSubstr("--namespace has byte 0x20 at offset 1: a namespace name is 1 to 64 characters"));
  CliRun env = run_env("m1\r\nX-Injected: yes", {"exists", "k"});
  EXPECT_EQ(env.status, kUsage);
  EXPECT_THAT(env.err, HasSubstr("$HF3FS_META_NAMESPACE has byte 0x0D at offset 2"));
  EXPECT_THAT(env.err, Not(HasSubstr("Injected")));  // located, never echoed
  CliRun json = run_env("", {"--json", "--namespace", std::string(65, 'n'), "clear"});
  EXPECT_EQ(json.status, kUsage);
  EXPECT_STREQ(json.json()["error"]["code"].GetString(), "usage");
  EXPECT_THAT(json.out, HasSubstr("--namespace is 65 bytes"));
  // A bad environment does not matter when the flag names a good one.
  EXPECT_EQ(run_env("bad name", {"--namespace", "ok", "exists", "k"}).status, kSuccess);
  EXPECT_THAT(sent, ::testing::ElementsAre("ok"));
}

TEST_F(CliNamespaceTest, AServerThatIgnoresTheHeaderIsAProtocolError) {
  echo = false;
  CliRun r = run_env("", {"--namespace", "m1", "exists", "k"});
  EXPECT_EQ(r.status, kProtocol);
  EXPECT_THAT(r.err, HasSubstr("the server ignored X-Hf3fs-Namespace (vLLM's server has no namespaces)"));
  EXPECT_EQ(run_env("", {"exists", "k"}).status, kSuccess);  // without one, as ever
}

TEST_F(CliNamespaceTest, HelpSaysWhatTheNamespaceIsAndWhatClearForgets) {
  CliRun help = run_env("", {"--help"});
  EXPECT_THAT(help.out, HasSubstr("--namespace NAME"));
  EXPECT_THAT(help.out, HasSubstr("$HF3FS_META_NAMESPACE"));
  EXPECT_THAT(help.out, HasSubstr("the server forgets every rank and key of the namespace"));
  EXPECT_TRUE(sent.empty());
}

// exists --why asks POST /keys/status after the exists answer.
TEST_F(CliTest, ExistsWhySaysWhichRanksConfirmedAndWhatTheKeyNeeds) {
  for (Rank rank : {0, 1, 2}) ASSERT_EQ(run({"init", std::to_string(rank), "--pages", "4"}).status, kSuccess);
  for (Rank rank : {0, 1}) {
    ASSERT_EQ(run({"allocate", std::to_string(rank), "k1"}).status, kSuccess);
    ASSERT_EQ(run({"confirm", std::to_string(rank), "k1=0"}).status, kSuccess);
  }
  CliRun text = run({"exists", "--why", "k1", "k2"});
  EXPECT_EQ(text.status, kSuccess) << text.err;
  EXPECT_EQ(text.out, "k1 false: confirmed on ranks 0,1; needs tp_world_size 3\nk2 false: unknown\n");
  ASSERT_EQ(run({"allocate", "2", "k1"}).status, kSuccess);
  ASSERT_EQ(run({"confirm", "2", "k1=0"}).status, kSuccess);
  EXPECT_EQ(run({"exists", "k1", "--why"}).out, "k1 true: confirmed on ranks 0,1,2; needs tp_world_size 3\n");
  EXPECT_EQ(run({"exists", "k1"}).out, "k1 true\n");  // without --why, as ever

  CliRun json = run({"--json", "exists", "--why", "k1", "k2"});
  ASSERT_EQ(json.status, kSuccess);
  auto doc = json.json();
  EXPECT_TRUE(doc["exists"][0].GetBool());
  EXPECT_FALSE(doc["exists"][1].GetBool());
  EXPECT_EQ(doc["why"]["ranks_initialized"].GetUint64(), 3u);
  const auto& k1 = doc["why"]["status"][0];
  ASSERT_EQ(k1["ranks"].Size(), 3u);
  EXPECT_EQ(k1["ranks"][2].GetInt64(), 2);
  EXPECT_EQ(k1["tp_world_size"].GetInt64(), 3);
  EXPECT_TRUE(k1["complete"].GetBool());
  EXPECT_TRUE(doc["why"]["status"][1].IsNull());
  EXPECT_FALSE(run({"--json", "exists", "k1"}).json().HasMember("why"));
}

TEST_F(CliTest, ExistsWhyAgainstAServerWithoutKeyStatusReportsItsRefusal) {
  auto old_server = std::make_shared<CannedTransport>([](const HttpRequest& request) -> TransportResult {
    if (request.path == "/keys/status") return HttpResponse{404, "application/json", R"({"detail":"Not Found"})", {}};
    return HttpResponse{200, "application/json", R"({"exists":[false]})", {}};
  });
  CliRun r = run_with(old_server, {"exists", "--why", "k"});
  EXPECT_EQ(r.status, kServerRefused);
  EXPECT_THAT(r.err, HasSubstr("404"));
  EXPECT_EQ(old_server->calls, 2);
}

TEST_F(CliTest, NamespacesIsATableOrJson) {
  ASSERT_TRUE(state_->initialize(NamespaceRef{"team-b"}, 3, 32));
  ASSERT_EQ(run({"init", "0", "--pages", "8"}).status, kSuccess);
  ASSERT_EQ(run({"init", "1", "--pages", "8"}).status, kSuccess);
  ASSERT_EQ(run({"allocate", "0", "k1"}).status, kSuccess);
  ASSERT_EQ(run({"confirm", "0", "k1=0"}).status, kSuccess);
  ASSERT_TRUE(state_->drop_namespace("team-b"));
  ASSERT_TRUE(state_->initialize(NamespaceRef{"a-much-longer-name"}, 3, 32));
  CliRun text = run({"namespaces"});
  EXPECT_EQ(text.status, kSuccess) << text.err;
  EXPECT_EQ(text.out,
            "NAME                RANKS  PAGES  KEYS\n"
            "a-much-longer-name  3      32     0\n"
            "default             0,1    16     1\n");
  CliRun json = run({"--json", "namespaces"});
  auto doc = json.json();
  ASSERT_EQ(doc["namespaces"].Size(), 2u);
  const auto& d = doc["namespaces"][1];
  EXPECT_STREQ(d["name"].GetString(), "default");
  ASSERT_EQ(d["ranks"].Size(), 2u);
  EXPECT_EQ(d["ranks"][1].GetInt64(), 1);
  EXPECT_EQ(d["pages"].GetInt64(), 16);
  EXPECT_EQ(d["keys"].GetUint64(), 1u);
}

TEST_F(CliTest, DropNamespaceForgetsItAndRefusesABadNameBeforeSending) {
  ASSERT_TRUE(state_->initialize(NamespaceRef{"m1"}, 0, 8));
  ASSERT_TRUE(state_->initialize(NamespaceRef{"m1"}, 1, 8));
  CliRun dropped = run({"drop-namespace", "m1"});
  EXPECT_EQ(dropped.status, kSuccess) << dropped.err;
  EXPECT_EQ(dropped.out, "dropped namespace m1: 2 ranks, 16 pages, 0 keys removed\n");
  EXPECT_EQ(state_->namespaces().size(), 1u);
  EXPECT_EQ(run({"drop-namespace", "m1"}).out, "namespace m1 did not exist\n");
  auto doc = run({"--json", "drop-namespace", "m1"}).json();
  EXPECT_STREQ(doc["namespace"].GetString(), "m1");
  EXPECT_FALSE(doc["dropped"].GetBool());
  EXPECT_EQ(doc["ranks"].GetUint64(), 0u);

  CliRun def = run({"drop-namespace", "default"});
  EXPECT_EQ(def.status, kServerRefused);
  EXPECT_THAT(def.err, HasSubstr("POST /clear"));

  auto counting = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", "{}", {}};
  });
  CliRun bad = run_with(counting, {"drop-namespace", "a/b"});
  EXPECT_EQ(bad.status, kUsage);
  EXPECT_THAT(bad.err, HasSubstr("name has byte 0x2F at offset 1"));
  EXPECT_EQ(run_with(counting, {"drop-namespace"}).status, kUsage);
  EXPECT_EQ(counting->calls, 0);
}

// Durations beyond what the client measures are refused as usage errors, never overflowed.
TEST_F(CliTest, DurationsTooLongAreRefusedNamingTheFlag) {
  for (const char* flag : {"--deadline-ms", "--timeout-ms"}) {
    for (const char* value : {"1e30", "99999999999999999999", "1099511627777", "0", "-5"}) {
      CliRun r = run({flag, value, "exists", "k"});
      EXPECT_EQ(r.status, kUsage) << flag << " " << value;
      EXPECT_THAT(r.err, HasSubstr(flag)) << flag << " " << value;
    }
    EXPECT_EQ(run({flag, "1099511627776", "exists", "k"}).status, kSuccess) << flag;
  }
}

TEST_F(CliTest, HelpGoesToStdoutAndExitsZero) {
  CliRun r = run({"--help"});
  EXPECT_EQ(r.status, kSuccess);
  EXPECT_THAT(r.out, HasSubstr("Usage: hf3fs-meta"));
  EXPECT_THAT(r.out, HasSubstr("allocate"));
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTest, VersionPrintsTheProjectVersionAndSendsNothing) {
  // The project's version (CMakeLists.txt's project(), the same definition the CLI is built with).
  auto counting = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", R"({"exists":[false]})", {}};
  });
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, std::vector<std::string>{"exists", "k", "--version"}}) {
    CliRun r = run_with(counting, args);
    EXPECT_EQ(r.status, kSuccess);
    EXPECT_EQ(r.out, "hf3fs-meta " HF3FS_META_VERSION "\n");
    EXPECT_EQ(r.err, "");
  }
  EXPECT_EQ(counting->calls, 0);
  EXPECT_THAT(run({"--help"}).out, HasSubstr("--version"));
}

TEST_F(CliTest, EachCommandHasItsOwnHelp) {
  CliRun allocate = run({"allocate", "--help"});
  EXPECT_EQ(allocate.status, kSuccess);
  EXPECT_THAT(allocate.out, HasSubstr("Usage: hf3fs-meta allocate"));
  EXPECT_THAT(allocate.out, HasSubstr("--ensure-pages"));
  CliRun exists = run({"exists", "--help"});
  EXPECT_EQ(exists.status, kSuccess);
  EXPECT_THAT(exists.out, Not(HasSubstr("--ensure-pages")));
  EXPECT_THAT(run({"init", "-h"}).out, HasSubstr("--role"));
}

TEST_F(CliTest, AnOptionOfAnotherCommandIsAUsageError) {
  auto counting = std::make_shared<CannedTransport>([](const HttpRequest&) -> TransportResult {
    return HttpResponse{200, "application/json", R"({"exists":[false]})", {}};
  });
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"exists", "k", "--pages", "3"},
           {"exists", "k", "--ensure-pages", "3"},
           {"clear", "--release", "1"},
           {"init", "3", "--pages", "4", "--release", "1"},
           {"--pages", "3", "exists", "k"},
       }) {
    CliRun r = run_with(counting, args);
    EXPECT_EQ(r.status, kUsage) << ::testing::PrintToString(args);
    EXPECT_THAT(r.err, HasSubstr("--")) << ::testing::PrintToString(args);
  }
  EXPECT_EQ(counting->calls, 0);
}

TEST_F(CliTest, OptionsTakeEqualsValuesAndDoubleDashEndsThem) {
  CliRun init = run({"init", "3", "--pages=8", "--role=worker"});
  EXPECT_EQ(init.status, kSuccess) << init.err;
  EXPECT_EQ(state_->rank_stats(3)->num_pages, 8);
  // The program's options work before and after the command, with = or without.
  CliRun allocate = run({"allocate", "--attempts=1", "3", "k", "--json"});
  EXPECT_EQ(allocate.status, kSuccess) << allocate.err;
  EXPECT_EQ(allocate.json()["allocations"][0]["page"].GetInt(), 0);
  // After --, a key that looks like an option is a key.
  CliRun exists = run({"exists", "--", "--json", "-k"});
  EXPECT_EQ(exists.status, kSuccess) << exists.err;
  EXPECT_EQ(exists.out, "--json false\n-k false\n");
  // A negative rank is a rank, not an option.
  EXPECT_EQ(run({"init", "-2", "--pages", "1"}).status, kSuccess);
  EXPECT_TRUE(state_->rank_stats(-2).has_value());
}

TEST_F(CliTest, EveryParseErrorExitsTwoNotCli11sCodes) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},                              // no command
           {"frobnicate"},                  // unknown command
           {"init", "3", "--pages"},        // an option without its value
           {"init", "3", "--pages", "x"},   // not an integer
           {"init", "3", "--json=maybe"},   // a flag given a value
           {"raw", "/clear"},               // a missing positional
           {"clear", "--attempts", "1000"}, // out of range
       }) {
    CliRun r = run(args);
    EXPECT_EQ(r.status, kUsage) << ::testing::PrintToString(args);
    EXPECT_THAT(r.err, HasSubstr("hf3fs-meta: ")) << ::testing::PrintToString(args);
  }
  EXPECT_THAT(run({"frobnicate"}).err, HasSubstr("unknown command 'frobnicate'"));
  CliRun json = run({"--json", "init", "x"});
  EXPECT_EQ(json.status, kUsage);
  EXPECT_STREQ(json.json()["error"]["code"].GetString(), "usage");
}

}  // namespace
}  // namespace hf3fs_meta::cli
