// EtcdCluster against the real etcd: a quorum serves writes through any member, a lost quorum does
// not, a restarted member catches up, SIGSTOP/SIGCONT, and that nothing outlives the fixture. The
// gateway calls here are the few the checks need (put, range), made with the fixture's own libcurl
// call so that a failure here is the fixture's or etcd's, not the HA client's.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "ha/etcd_codec.hpp"
#include "support/etcd_cluster.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Keys and values are base64 in the gateway; the HA code's encoder, checked in etcd_codec_test.
std::string base64(const std::string& bytes) { return server::ha::base64_encode(bytes); }

HttpAnswer put(const std::string& member, const std::string& key, const std::string& value, milliseconds timeout) {
  std::string body = "{\"key\":\"";
  body.append(base64(key)).append("\",\"value\":\"").append(base64(value)).append("\"}");
  return http_call(member + "/v3/kv/put", body, timeout);
}

// A linearizable read through `member`.
HttpAnswer range(const std::string& member, const std::string& key, milliseconds timeout = seconds(5)) {
  std::string body = "{\"key\":\"";
  body.append(base64(key)).append("\"}");
  return http_call(member + "/v3/kv/range", body, timeout);
}

// What a range answer holds for a key whose value is `value` (values are base64 in the gateway).
std::string value_field(const std::string& value) {
  std::string field = "\"value\":\"";
  field.append(base64(value)).append("\"");
  return field;
}

// Puts through `member` until one succeeds (a new leader may be being elected), within `bound`.
HttpAnswer put_within(const std::string& member, const std::string& key, const std::string& value,
                      milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  HttpAnswer answer;
  do {
    answer = put(member, key, value, seconds(2));
    if (answer.status == 200) return answer;
  } while (Clock::now() < deadline);
  return answer;
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// The scenario of the HA tests (ha_member_test, ha_faults_test) at the level of etcd itself: what the HA code will rely on.
TEST(EtcdClusterTest, AQuorumServesWritesALostQuorumDoesNotARestartedMemberCatchesUp) {
  const auto started = Clock::now();
  std::vector<pid_t> pids;
  std::string root_dir;
  {
    EtcdCluster cluster;
    ASSERT_EQ(cluster.size(), 3u);
    const auto urls = cluster.client_urls();
    ASSERT_EQ(urls.size(), 3u);
    std::string joined = urls[0];
    joined.append(",").append(urls[1]).append(",").append(urls[2]);
    EXPECT_EQ(cluster.endpoints(), joined);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(urls[i].rfind("http://127.0.0.1:", 0), 0u) << urls[i];
      EXPECT_TRUE(cluster.member_healthy(i));
      pids.push_back(cluster.pid(i));
      EXPECT_GT(pids.back(), 0);
    }
    root_dir = std::filesystem::path(cluster.data_dir(0)).parent_path().parent_path().string();
    ASSERT_TRUE(std::filesystem::exists(root_dir));

    // Written through one member, read through another.
    ASSERT_EQ(put(urls[0], "k/before", "v-before", seconds(5)).status, 200);
    const HttpAnswer read = range(urls[1], "k/before");
    ASSERT_EQ(read.status, 200) << read.error;
    EXPECT_NE(read.body.find(value_field("v-before")), std::string::npos) << read.body;

    // One member lost: the other two still form a quorum.
    cluster.kill(0);
    EXPECT_EQ(cluster.pid(0), -1);
    EXPECT_FALSE(cluster.running(0));
    EXPECT_TRUE(process_gone(pids[0]));
    const HttpAnswer one_down = put_within(urls[1], "k/one-down", "v-one-down", seconds(15));
    ASSERT_EQ(one_down.status, 200) << one_down.error << one_down.body;
    EXPECT_EQ(put(urls[2], "k/one-down-2", "v2", seconds(5)).status, 200);

    // Two lost: no write succeeds; a client with a short timeout learns so at once.
    cluster.kill(1);
    const auto asked = Clock::now();
    const HttpAnswer no_quorum = put(urls[2], "k/no-quorum", "never", milliseconds(1500));
    EXPECT_NE(no_quorum.status, 200) << no_quorum.body;
    EXPECT_LT(Clock::now() - asked, seconds(3));
    EXPECT_FALSE(cluster.member_healthy(2, seconds(2)));
    try {
      cluster.wait_healthy(milliseconds(1500));
      ADD_FAILURE() << "wait_healthy succeeded without a quorum";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("etcd member m2"), std::string::npos) << message;
      EXPECT_NE(message.find("is not healthy"), std::string::npos) << message;
      EXPECT_NE(message.find("/m2/log"), std::string::npos) << message;  // and its tail follows
      EXPECT_EQ(message.find("etcd member m0"), std::string::npos) << message;  // killed: not waited for
    }

    // The member that missed the writes of the one-down phase comes back: a quorum again, and it
    // has caught up with every acknowledged write.
    cluster.restart(0);
    EXPECT_GT(cluster.pid(0), 0);
    EXPECT_NE(cluster.pid(0), pids[0]);
    pids.push_back(cluster.pid(0));
    cluster.wait_healthy(seconds(20));
    const HttpAnswer resumed = put_within(urls[0], "k/resumed", "v-resumed", seconds(15));
    ASSERT_EQ(resumed.status, 200) << resumed.error << resumed.body;
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"k/before", "v-before"},
                                     {"k/one-down", "v-one-down"}, {"k/resumed", "v-resumed"}}) {
      const HttpAnswer back = range(urls[0], key);
      ASSERT_EQ(back.status, 200) << back.error;
      EXPECT_NE(back.body.find(value_field(value)), std::string::npos) << key << ": " << back.body;
    }
  }
  // The destructor killed every member it started and removed the data dirs.
  for (const pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << "etcd pid " << pid << " still exists";
  EXPECT_FALSE(std::filesystem::exists(root_dir)) << root_dir;
  EXPECT_LT(Clock::now() - started, seconds(60));
}

TEST(EtcdClusterTest, AStoppedMemberIsUnhealthyAndCatchesUpWhenContinued) {
  pid_t left_stopped = -1;
  pid_t killed_while_stopped = -1;
  {
    EtcdCluster cluster;
    const auto urls = cluster.client_urls();
    cluster.stop(2);
    EXPECT_TRUE(cluster.running(2));
    EXPECT_FALSE(cluster.member_healthy(2, milliseconds(500)));  // it answers nothing while stopped
    const HttpAnswer written = put_within(urls[0], "k/while-stopped", "v-stopped", seconds(15));
    ASSERT_EQ(written.status, 200) << written.error << written.body;
    cluster.wait_healthy(seconds(5));  // the stopped member is not waited for

    cluster.cont(2);
    cluster.wait_healthy(seconds(20));
    const HttpAnswer back = range(urls[2], "k/while-stopped");
    ASSERT_EQ(back.status, 200) << back.error;
    EXPECT_NE(back.body.find(value_field("v-stopped")), std::string::npos) << back.body;

    EXPECT_THROW(cluster.kill(3), std::out_of_range);
    EXPECT_THROW(cluster.client_url(3), std::out_of_range);
    // SIGKILL ends a stopped member too, in kill() and in the destructor.
    killed_while_stopped = cluster.pid(1);
    cluster.stop(1);
    cluster.kill(1);
    EXPECT_TRUE(process_gone(killed_while_stopped));
    EXPECT_THROW(cluster.stop(1), std::logic_error);
    EXPECT_THROW(cluster.cont(1), std::logic_error);
    left_stopped = cluster.pid(0);
    cluster.stop(0);
  }
  EXPECT_TRUE(process_gone(left_stopped)) << "a stopped etcd member outlived the fixture";
}

// Sets an environment variable for one test and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string write_script(const TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir.path() / name;
  write_bytes(path, text);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path.string();
}

TEST(EtcdClusterTest, AMemberThatCannotStartIsNamedWithItsLog) {
  TempDir dir;
  const ScopedEnv etcd("HF3FS_META_ETCD_BIN",
                       write_script(dir, "broken-etcd", "#!/bin/sh\necho \"broken etcd refuses $1 $2\" >&2\nexit 3\n"));
  try {
    EtcdCluster cluster(3, seconds(10));
    ADD_FAILURE() << "a cluster of broken members started";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("exited with status 3 while starting"), std::string::npos) << message;
    EXPECT_NE(message.find("broken etcd refuses --name m"), std::string::npos) << message;
  }
}

TEST(EtcdClusterTest, AMissingBinaryIsNamed) {
  const ScopedEnv etcd("HF3FS_META_ETCD_BIN", "/nonexistent/etcd");
  try {
    EtcdCluster cluster;
    ADD_FAILURE() << "a cluster started without etcd";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no etcd at /nonexistent/etcd"), std::string::npos) << e.what();
  }
}

// A port taken between the probe and etcd's bind: the cluster starts again on other ports.
TEST(EtcdClusterTest, APortTakenAtStartIsRetriedWithOtherPorts) {
  TempDir dir;
  const std::string marker = (dir.path() / "failed-once").string();
  std::string script = "#!/bin/sh\nif [ ! -e ";
  script.append(marker).append(" ]; then touch ").append(marker);
  script.append("; echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2; exit 1; fi\nexec ");
  script.append(EtcdCluster::binary_path()).append(" \"$@\"\n");
  const ScopedEnv etcd("HF3FS_META_ETCD_BIN", write_script(dir, "flaky-etcd", script));
  EtcdCluster cluster(1);
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_TRUE(cluster.member_healthy(0));
  EXPECT_EQ(put(cluster.client_url(0), "k", "v", seconds(5)).status, 200);
}

}  // namespace
}  // namespace hf3fs_meta::testing
