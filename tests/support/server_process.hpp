// ServerProcess: runs the real hf3fs-meta-server binary as a child process for tests. It starts the
// server on an ephemeral port (--port 0), reads the port from its `listening on http://HOST:PORT`
// line, and always stops it: SIGTERM in the destructor, SIGKILL if it does not exit in time.
// kill() and restart() model a crash and a restart on the same port (all state lost). Where it
// runs is its Placement (child_process.hpp): loopback unless a test puts it in a network namespace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace hf3fs_meta::testing {

class ServerProcess {
 public:
  // Starts the server at once, with `--port 0 --host 127.0.0.1` followed by `extra_args`.
  explicit ServerProcess(std::vector<std::string> extra_args = {});
  // The same, with the server's descriptor limit (RLIMIT_NOFILE, soft and hard) set to `open_files`.
  ServerProcess(std::vector<std::string> extra_args, std::uint64_t open_files);
  // The same, with the server's stderr appended to `stderr_path` (on every start).
  ServerProcess(std::vector<std::string> extra_args, std::string stderr_path);
  // The same, listening on `placement`'s host (`--host`) and started through its prefix.
  ServerProcess(std::vector<std::string> extra_args, std::string stderr_path, Placement placement);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return host_; }
  std::string base_url() const;                                 // "http://HOST:PORT" (https with TLS)
  const std::string& startup_line() const noexcept { return startup_line_; }  // without the newline
  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0; }

  // Sends SIGTERM and waits up to `timeout`, then SIGKILL. Returns the exit code, or -signal when a
  // signal ended the process (-9 after the SIGKILL). Returns 0 if it was not running.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // Sends `signal` and waits for the process to end; returns as terminate() does.
  int signal_and_wait(int signal, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // SIGKILL and wait: a crash.
  void kill();

  // Kills the server if it runs, then starts it again on the same port with the same arguments.
  void restart();

  static std::string binary_path();

  // Runs the server binary with exactly `args` until it exits (killed after `timeout`): its exit
  // code (as terminate() returns it) and what it wrote on stdout and stderr.
  struct Finished {
    int exit_code = 0;
    std::string output;
  };
  static Finished run_to_exit(const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // The same for any binary: `argv` starts with its path (hf3fs-meta-proxy's tests run it so).
  static Finished run_binary_to_exit(std::vector<std::string> argv,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  void start(std::uint16_t port);
  int wait_for_exit(std::chrono::milliseconds timeout);

  std::vector<std::string> extra_args_;
  std::uint64_t open_files_ = 0;  // 0: inherited
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  Placement placement_;
  std::string host_ = placement_.host;
  std::string scheme_ = "http";
  std::string startup_line_;
  std::string stderr_path_;
};

}  // namespace hf3fs_meta::testing
