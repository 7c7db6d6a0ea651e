// Fault injection (only with --enable-fault-injection): rules POSTed to the faults route make the next
// matching requests fail in a chosen way, so clients can be tested against a misbehaving server.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/data_dir.hpp"

namespace hf3fs_meta::server {

struct FaultAction {
  // exception: the connection's session throws instead of answering (an exception in one session
  // closes that connection and is logged; the server goes on).
  enum class Kind { none, status, delay, close_before, close_after, exception };
  Kind kind = Kind::none;
  int status = 0;
  std::string body;  // Kind::status: the answer's JSON body ({"detail":"injected fault"} by default)
  std::chrono::milliseconds delay{0};
};

struct FaultRule {
  std::optional<std::string> path;  // absent: every protocol route
  FaultAction action;
  long long times = 1;
};

// A data-dir server's next `times` journal writes, journal syncs or snapshot writes fail with `err`
// (durable::inject_disk_error): {"disk_error": "ENOSPC"|"EIO", "disk_op": "journal_write"|
// "journal_sync"|"snapshot_write", "times": n}. DELETE on the faults route ends them.
struct DiskFault {
  durable::DiskOp op = durable::DiskOp::journal_write;
  int err = 0;
  long long times = 1;
};

// What a POST to the faults route asked for.
struct FaultRequest {
  bool forget_state = false;
  std::optional<DiskFault> disk;
  FaultRule rule;  // when !forget_state and !disk
};

// Parses the body of a POST to the faults route; the error is the detail of a 400.
struct ParsedFaultRequest {
  std::optional<FaultRequest> request;
  std::string error;
};
ParsedFaultRequest parse_fault_request(std::string_view body);

class FaultInjector {
 public:
  std::size_t add(FaultRule rule);  // returns the number of rules now held
  std::size_t clear();              // returns the number removed

  // The first matching rule, in the order added, fires and counts down its `times`.
  // `protocol_route`: the request goes to one of the protocol's endpoints (routes.hpp).
  FaultAction match(std::string_view path, bool protocol_route);

 private:
  std::mutex mutex_;
  std::vector<FaultRule> rules_;
  std::atomic<std::size_t> count_{0};  // lets match() skip the lock when there are no rules
};

}  // namespace hf3fs_meta::server
