// Readiness and shutdown notices to a service manager (systemd's Type=notify): READY=1 once the
// program serves, STOPPING=1 when it begins to stop. hf3fs-meta-server and hf3fs-meta-proxy both
// send them.
#pragma once

#include <string>
#include <string_view>

namespace hf3fs_meta::server {

// Sends `state` (newline-separated VAR=value assignments, e.g. "READY=1") as one datagram to the
// AF_UNIX socket `address`: a path, or an abstract name when it starts with '@'. Returns why it
// could not, or an empty string once sent.
std::string notify_socket_send(std::string_view address, std::string_view state);

// notify_socket_send to $NOTIFY_SOCKET; nothing when it is unset or empty (not run by a service
// manager that asked). A failure is one line on stderr, prefixed by `program`, and never stops the
// program: it serves either way, and the manager's start timeout reports the missing notice.
void notify_service_manager(std::string_view program, std::string_view state);

}  // namespace hf3fs_meta::server
