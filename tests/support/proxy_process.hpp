// ProxyProcess: runs the real hf3fs-meta-proxy binary as a child process for tests, in front of
// `upstream` (--upstream's value), on a free port of 127.0.0.1 (--listen 127.0.0.1:0), read from its
// `listening on http://HOST:PORT` line. Stopped by PID: SIGTERM in the destructor, SIGKILL if it does
// not exit in time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hf3fs_meta::testing {

class ProxyProcess {
 public:
  // Throws std::runtime_error if it does not print its listening line within 20 s.
  ProxyProcess(const std::string& upstream, std::vector<std::string> extra_args = {});
  // The same, with the proxy's stderr appended to `stderr_path` (its warnings, its log of signals).
  ProxyProcess(const std::string& upstream, std::vector<std::string> extra_args, const std::string& stderr_path);
  ~ProxyProcess();
  ProxyProcess(const ProxyProcess&) = delete;
  ProxyProcess& operator=(const ProxyProcess&) = delete;

  const std::string& host() const noexcept { return host_; }
  std::uint16_t port() const noexcept { return port_; }
  std::string base_url() const { return "http://" + host_ + ":" + std::to_string(port_); }
  pid_t pid() const noexcept { return pid_; }

  // SIGTERM, then SIGKILL after `timeout`: the exit code, or -signal.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  static std::string binary_path();

 private:
  pid_t pid_ = -1;
  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace hf3fs_meta::testing
