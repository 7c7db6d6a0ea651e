// EtcdCluster: a real etcd cluster (etcd 3.4, the Debian etcd-server that scripts/bootstrap
// installs) of N members on 127.0.0.1 for the HA tests, started as child processes with free client
// and peer ports, a data dir and a log each in one temporary directory, and etcd's default timing
// (heartbeat 100 ms, election 1 s: lease TTLs of at least 2 s). Every member dies with the test
// process; the destructor SIGKILLs the ones still running and removes the directory. A member may
// run elsewhere than loopback (its Placement: a network namespace's address, through `ip netns
// exec`); the test then asks it from where that address is reached.
// kill/stop/cont/restart model a crash, a hang and a recovery of one member. Every wait is bounded;
// a failure throws std::runtime_error naming the member and showing the tail of its log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

namespace hf3fs_meta::testing {

// One HTTP exchange with libcurl. `status` is 0 when no answer came (refused, timed out); then
// `error` says why.
struct HttpAnswer {
  long status = 0;
  std::string body;
  std::string error;
};

// GET `url` (empty `body`) or POST `body` to it, giving up after `timeout`.
HttpAnswer http_call(const std::string& url, const std::string& body, std::chrono::milliseconds timeout);

class EtcdCluster {
 public:
  // Starts `members` members (a new cluster) and waits up to `start_timeout` until each answers
  // healthy. A port taken by someone else between the probe and etcd's bind: tried again with new
  // ports (three times in all).
  // `placements`: member i's where given, else loopback.
  explicit EtcdCluster(std::size_t members = 3,
                       std::chrono::milliseconds start_timeout = std::chrono::seconds(20),
                       std::vector<Placement> placements = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  std::size_t size() const noexcept { return members_.size(); }
  std::vector<std::string> client_urls() const;      // "http://HOST:PORT", member order
  std::string client_url(std::size_t i) const;
  std::string endpoints() const;                      // client_urls() joined with ","
  pid_t pid(std::size_t i) const;                     // -1 once killed (until restarted)
  bool running(std::size_t i) const;                  // started and not killed (stopped counts)
  std::string data_dir(std::size_t i) const;

  void kill(std::size_t i);     // SIGKILL, reaped before it returns
  void stop(std::size_t i);     // SIGSTOP; returns once the kernel reports it stopped
  void cont(std::size_t i);     // SIGCONT
  // Starts a killed member (or kills it first) with its data dir and ports and
  // --initial-cluster-state existing. Does not wait: wait_healthy() does.
  void restart(std::size_t i);

  // Whether member i answers GET /health with {"health":"true"} (it has a leader and a quorum)
  // within `timeout`.
  bool member_healthy(std::size_t i, std::chrono::milliseconds timeout = std::chrono::seconds(1)) const;
  // Waits until every running, not stopped member is healthy; throws after `timeout`, or at once
  // when a member has exited by itself, naming the members that are not, with their logs' tails.
  void wait_healthy(std::chrono::milliseconds timeout = std::chrono::seconds(20));

  // What member i says of itself (POST /v3/maintenance/status): its member id and the id of the
  // leader it knows; empty strings when it does not answer.
  std::pair<std::string, std::string> status(std::size_t i) const;
  static constexpr std::size_t kNoMember = static_cast<std::size_t>(-1);
  // The running member that says it leads etcd; kNoMember if none does.
  std::size_t leader() const;
  // A running member that says it follows another; kNoMember if none can be told.
  std::size_t follower() const;

  std::string log_tail(std::size_t i, std::size_t lines = 30) const;

  // $HF3FS_META_ETCD_BIN, else the etcd found at configure time, else "etcd" on PATH.
  static std::string binary_path();

 private:
  struct Member {
    std::string name;
    Placement placement;
    std::uint16_t client_port = 0;
    std::uint16_t peer_port = 0;
    pid_t pid = -1;
    bool stopped = false;
  };

  bool start_all(std::chrono::milliseconds start_timeout);  // false: a port was taken
  void spawn(std::size_t i, bool new_cluster);
  void kill_all() noexcept;
  std::string member_dir(std::size_t i) const;
  std::string describe(std::size_t i, const std::string& what) const;
  std::size_t checked(std::size_t i) const;

  TempDir root_;
  std::string token_;
  std::vector<Member> members_;
};

}  // namespace hf3fs_meta::testing
