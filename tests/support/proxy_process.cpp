#include "support/proxy_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "support/child_process.hpp"

#ifndef HF3FS_META_PROXY_PATH
#error "HF3FS_META_PROXY_PATH must name the hf3fs-meta-proxy binary"
#endif

namespace hf3fs_meta::testing {

std::string ProxyProcess::binary_path() { return HF3FS_META_PROXY_PATH; }

ProxyProcess::ProxyProcess(const std::string& upstream, std::vector<std::string> extra_args)
    : ProxyProcess(upstream, std::move(extra_args), std::string()) {}

ProxyProcess::ProxyProcess(const std::string& upstream, std::vector<std::string> extra_args,
                           const std::string& stderr_path) {
  std::vector<std::string> args{binary_path(), "--listen", "127.0.0.1:0", "--upstream", upstream};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const auto [pid, output] = spawn_child(args, [&](int) {
    if (stderr_path.empty()) return;
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err >= 0) dup2(err, STDERR_FILENO);
  });
  pid_ = pid;
  const auto [line, complete] = read_first_line(output, std::chrono::seconds(20));
  close(output);
  const std::string prefix = "listening on http://";
  const auto colon = line.rfind(':');
  if (!complete || line.rfind(prefix, 0) != 0 || colon == std::string::npos || colon < prefix.size()) {
    const int status = terminate(std::chrono::seconds(2));
    throw std::runtime_error("hf3fs-meta-proxy did not start: got '" + line + "', exit " + std::to_string(status));
  }
  host_ = line.substr(prefix.size(), colon - prefix.size());
  port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

ProxyProcess::~ProxyProcess() { terminate(); }

int ProxyProcess::terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return 0;
  const int result = signal_and_reap(pid_, SIGTERM, timeout);
  pid_ = -1;
  return result;
}

}  // namespace hf3fs_meta::testing
