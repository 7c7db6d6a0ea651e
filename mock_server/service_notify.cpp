// The notify protocol spoken directly, without libsystemd: systemd documents it (sd_notify(3),
// "Notes"; systemd.io "The sd_notify protocol") as a stable interface meant to be reimplemented:
// one datagram of assignments on an AF_UNIX socket named by $NOTIFY_SOCKET. Linking libsystemd for
// it would add a runtime dependency (and its own dependencies) to every install, systemd or not.
#include "service_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hf3fs_meta::server {

std::string notify_socket_send(std::string_view address, std::string_view state) {
  sockaddr_un target{};
  target.sun_family = AF_UNIX;
  if (address.empty() || (address.front() != '/' && address.front() != '@')) {
    return "NOTIFY_SOCKET=" + std::string(address) + ": not an absolute path nor an abstract name ('@...')";
  }
  // An abstract name has no terminating NUL; a path keeps room for one.
  const bool abstract = address.front() == '@';
  const std::size_t longest = sizeof target.sun_path - (abstract ? 0 : 1);
  if (address.size() > longest) {
    return "NOTIFY_SOCKET=" + std::string(address) + ": longer than a socket address (" + std::to_string(longest) +
           " bytes)";
  }
  std::memcpy(target.sun_path, address.data(), address.size());
  if (abstract) target.sun_path[0] = '\0';
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());

  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  ssize_t sent;
  do {
    sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&target),
                    length);
  } while (sent < 0 && errno == EINTR);
  const int error = errno;
  ::close(fd);
  if (sent < 0) return "NOTIFY_SOCKET=" + std::string(address) + ": " + std::strerror(error);
  if (static_cast<std::size_t>(sent) != state.size()) {
    return "NOTIFY_SOCKET=" + std::string(address) + ": sent " + std::to_string(sent) + " of " +
           std::to_string(state.size()) + " bytes";
  }
  return {};
}

void notify_service_manager(std::string_view program, std::string_view state) {
  const char* address = std::getenv("NOTIFY_SOCKET");
  if (address == nullptr || *address == '\0') return;
  const std::string error = notify_socket_send(address, state);
  if (error.empty()) return;
  // The first assignment names the notice (READY=1, STOPPING=1); STATUS= text is not repeated.
  const std::string_view notice = state.substr(0, state.find('\n'));
  std::fprintf(stderr, "%.*s: cannot tell the service manager %.*s: %s\n", static_cast<int>(program.size()),
               program.data(), static_cast<int>(notice.size()), notice.data(), error.c_str());
}

}  // namespace hf3fs_meta::server
