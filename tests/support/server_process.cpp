#include "support/server_process.hpp"

#include "support/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#ifndef HF3FS_META_SERVER_PATH
#error "HF3FS_META_SERVER_PATH must name the hf3fs-meta-server binary"
#endif

namespace hf3fs_meta::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(20);

}  // namespace

std::string ServerProcess::binary_path() {
  if (const char* override_path = std::getenv("HF3FS_META_SERVER"); override_path && *override_path)
    return override_path;
  return HF3FS_META_SERVER_PATH;
}

ServerProcess::ServerProcess(std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
  start(0);
}

ServerProcess::ServerProcess(std::vector<std::string> extra_args, std::uint64_t open_files)
    : extra_args_(std::move(extra_args)), open_files_(open_files) {
  start(0);
}

ServerProcess::ServerProcess(std::vector<std::string> extra_args, std::string stderr_path)
    : extra_args_(std::move(extra_args)), stderr_path_(std::move(stderr_path)) {
  start(0);
}

ServerProcess::ServerProcess(std::vector<std::string> extra_args, std::string stderr_path, Placement placement)
    : extra_args_(std::move(extra_args)),
      placement_(std::move(placement)),
      host_(placement_.host),
      stderr_path_(std::move(stderr_path)) {
  start(0);
}

ServerProcess::Finished ServerProcess::run_to_exit(const std::vector<std::string>& args,
                                                   std::chrono::milliseconds timeout) {
  std::vector<std::string> all{binary_path()};
  all.insert(all.end(), args.begin(), args.end());
  return run_binary_to_exit(std::move(all), timeout);
}

ServerProcess::Finished ServerProcess::run_binary_to_exit(std::vector<std::string> all,
                                                          std::chrono::milliseconds timeout) {
  const auto [pid, output] = spawn_child(std::move(all), [](int out) { dup2(out, STDERR_FILENO); });
  Finished out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd pfd{output, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const auto n = read(output, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.output.append(buffer, static_cast<std::size_t>(n));
  }
  close(output);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = decode_exit_status(status);
  return out;
}

ServerProcess::~ServerProcess() {
  if (running()) terminate();
}

std::string ServerProcess::base_url() const { return scheme_ + "://" + host_ + ":" + std::to_string(port_); }

void ServerProcess::start(std::uint16_t port) {
  std::vector<std::string> args{binary_path(), "--host", placement_.host, "--port", std::to_string(port)};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  const auto [pid, output] = spawn_child(placement_.wrap(args), [&](int) {
    if (open_files_ > 0) {
      const rlimit limit{open_files_, open_files_};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(125);
    }
    if (!stderr_path_.empty()) {
      const int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
    }
  });
  pid_ = pid;

  // Read the startup line.
  const auto [line, complete] = read_first_line(output, kStartTimeout);
  close(output);

  const bool tls = line.rfind("listening on https://", 0) == 0;
  const std::string prefix = tls ? "listening on https://" : "listening on http://";
  const auto colon = line.rfind(':');
  if (!complete || line.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size()) {
    const int status = terminate(std::chrono::seconds(2));
    throw std::runtime_error("hf3fs-meta-server (" + args[0] + ") did not start: got '" + line +
                             "', exit " + std::to_string(status));
  }
  startup_line_ = line;
  scheme_ = tls ? "https" : "http";
  host_ = line.substr(prefix.size(), colon - prefix.size());
  port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

int ServerProcess::wait_for_exit(std::chrono::milliseconds timeout) {
  const int result = wait_exit(pid_, timeout);
  if (result != kStillRunning) pid_ = -1;
  return result;
}

int ServerProcess::signal_and_wait(int signal, std::chrono::milliseconds timeout) {
  if (!running()) return 0;
  const int result = signal_and_reap(pid_, signal, timeout);
  if (result != kStillRunning) pid_ = -1;
  return result;
}

int ServerProcess::terminate(std::chrono::milliseconds timeout) { return signal_and_wait(SIGTERM, timeout); }

void ServerProcess::kill() { signal_and_wait(SIGKILL, std::chrono::seconds(30)); }

void ServerProcess::restart() {
  if (running()) kill();
  // The port was ours a moment ago; binding it again can race with the kernel releasing it.
  for (int attempt = 0;; ++attempt) {
    try {
      start(port_);
      return;
    } catch (const std::runtime_error&) {
      if (attempt >= 50) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace hf3fs_meta::testing
