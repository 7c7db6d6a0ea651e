// Child processes for tests: started so that they die with the test process, and reaped within a
// bound. ServerProcess (the hf3fs-meta-server) and EtcdCluster (etcd members) start theirs here,
// each where its Placement says.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hf3fs_meta::testing {

// A waitpid() status as the tests report it: the exit code, or -signal when a signal ended it.
inline int decode_exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

// Where a server child runs: the address it listens on, and the command it is started through. A
// network namespace's `ip netns exec NS` (NetLab::placement) execs the child in place, so the PID
// is still the child's own and it still dies with the test. The default: loopback, started directly.
struct Placement {
  std::string host = "127.0.0.1";
  std::vector<std::string> prefix;

  // `command` behind the prefix.
  std::vector<std::string> wrap(std::vector<std::string> command) const {
    std::vector<std::string> all = prefix;
    all.insert(all.end(), std::make_move_iterator(command.begin()), std::make_move_iterator(command.end()));
    return all;
  }
};

struct Spawned {
  pid_t pid;
  int output;  // the read end of the pipe on the child's stdout
};

// Starts `args` (argv[0] the binary) with its stdout on a pipe; `in_child` runs in the child just
// before exec (redirections, limits). The child dies with the test binary: PR_SET_PDEATHSIG fires
// when the forking *thread* ends, so spawn from a thread that outlives the child (the test's own).
template <class InChild>
Spawned spawn_child(std::vector<std::string> args, InChild&& in_child) {
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(error));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    dup2(fds[1], STDOUT_FILENO);
    in_child(fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  return Spawned{pid, fds[0]};
}

// A child's first line on `fd` (its startup line), without the newline; `complete` is false when the
// output ended or `timeout` passed first (`line` then holds what came).
struct FirstLine {
  std::string line;
  bool complete = false;
};
inline FirstLine read_first_line(int fd, std::chrono::milliseconds timeout) {
  FirstLine out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!out.complete) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char c;
    const auto n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (c == '\n') {
      out.complete = true;
    } else {
      out.line.push_back(c);
    }
  }
  return out;
}

// What wait_exit() returns while the child still runs after the timeout.
inline constexpr int kStillRunning = std::numeric_limits<int>::min();

// Waits up to `timeout` for the child `pid` to exit and reaps it: its decode_exit_status(), -1 if it
// cannot be waited for (not our child, already reaped), or kStillRunning.
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_exit_status(status);
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return kStillRunning;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Sends `signal` to the child `pid`, waits up to `timeout` for it to end, then SIGKILLs it; returns
// as wait_exit() does (-9 after the SIGKILL).
inline int signal_and_reap(pid_t pid, int signal, std::chrono::milliseconds timeout) {
  ::kill(pid, signal);
  int result = wait_exit(pid, timeout);
  if (result == kStillRunning) {
    ::kill(pid, SIGKILL);
    result = wait_exit(pid, std::chrono::seconds(30));
  }
  return result;
}

}  // namespace hf3fs_meta::testing
