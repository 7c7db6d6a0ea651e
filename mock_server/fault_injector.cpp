#include "fault_injector.hpp"

#include <cerrno>

#include "hf3fs_meta/protocol_server.hpp"
#include "internal/json.hpp"

namespace hf3fs_meta::server {
namespace {

struct Named {
  std::string_view name;
  int value;
};
constexpr Named kDiskErrors[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}};
constexpr Named kDiskOps[] = {{"journal_write", static_cast<int>(durable::DiskOp::journal_write)},
                              {"journal_sync", static_cast<int>(durable::DiskOp::journal_sync)},
                              {"snapshot_write", static_cast<int>(durable::DiskOp::snapshot_write)}};

template <std::size_t N>
std::optional<int> find_named(const Named (&table)[N], const rapidjson::Value& value) {
  if (!value.IsString()) return std::nullopt;
  const std::string_view text(value.GetString(), value.GetStringLength());
  for (const Named& n : table) {
    if (n.name == text) return n.value;
  }
  return std::nullopt;
}

}  // namespace

ParsedFaultRequest parse_fault_request(std::string_view body) {
  auto fail = [](std::string message) { return ParsedFaultRequest{std::nullopt, std::move(message)}; };
  internal::ParsedJson json;
  if (!json.parse(body)) return fail("fault rule is not JSON: " + json.error_text());
  const rapidjson::Value& doc = json.root();
  if (!doc.IsObject()) return fail("fault rule must be a JSON object");

  FaultRequest request;
  int actions = 0;
  std::optional<std::string> detail;  // a status rule's detail, to mimic another server's 500s
  std::optional<std::string> answer;  // a status rule's whole body, e.g. a malformed 200
  std::optional<durable::DiskOp> disk_op;
  for (auto& member : doc.GetObject()) {
    std::string_view name(member.name.GetString(), member.name.GetStringLength());
    const auto& value = member.value;
    if (name == "forget_state") {
      if (!value.IsBool()) return fail("forget_state must be a boolean");
      request.forget_state = value.GetBool();
    } else if (name == "path") {
      if (!value.IsString() || value.GetStringLength() == 0 || value.GetString()[0] != '/')
        return fail("path must be a string starting with '/'");
      request.rule.path = std::string(value.GetString(), value.GetStringLength());
    } else if (name == "times") {
      if (!value.IsInt64() || value.GetInt64() < 1) return fail("times must be an integer >= 1");
      request.rule.times = value.GetInt64();
    } else if (name == "status") {
      if (!value.IsInt() || value.GetInt() < 200 || value.GetInt() > 599)
        return fail("status must be an integer in 200..599");
      request.rule.action.kind = FaultAction::Kind::status;
      request.rule.action.status = value.GetInt();
      ++actions;
    } else if (name == "detail" || name == "body") {
      if (!value.IsString()) return fail(std::string(name) + " must be a string");
      (name == "detail" ? detail : answer) = std::string(value.GetString(), value.GetStringLength());
    } else if (name == "delay_ms") {
      if (!value.IsInt64() || value.GetInt64() < 0 || value.GetInt64() > 600000)
        return fail("delay_ms must be an integer in 0..600000");
      request.rule.action.kind = FaultAction::Kind::delay;
      request.rule.action.delay = std::chrono::milliseconds(value.GetInt64());
      ++actions;
    } else if (name == "close_connection") {
      std::string_view when = value.IsString() ? std::string_view(value.GetString(), value.GetStringLength()) : "";
      if (when == "before") {
        request.rule.action.kind = FaultAction::Kind::close_before;
      } else if (when == "after") {
        request.rule.action.kind = FaultAction::Kind::close_after;
      } else {
        return fail("close_connection must be \"before\" or \"after\"");
      }
      ++actions;
    } else if (name == "disk_error") {
      const auto err = find_named(kDiskErrors, value);
      if (!err) return fail("disk_error must be \"ENOSPC\" or \"EIO\"");
      request.disk.emplace().err = *err;
      ++actions;
    } else if (name == "disk_op") {
      const auto op = find_named(kDiskOps, value);
      if (!op) return fail("disk_op must be \"journal_write\", \"journal_sync\" or \"snapshot_write\"");
      disk_op = static_cast<durable::DiskOp>(*op);
    } else if (name == "exception") {
      if (!value.IsBool() || !value.GetBool()) return fail("exception must be true");
      request.rule.action.kind = FaultAction::Kind::exception;
      ++actions;
    } else {
      return fail("unknown field '" + std::string(name) + "'");
    }
  }
  if (request.forget_state) {
    if (actions != 0 || request.rule.path) return fail("forget_state takes no other field");
    return ParsedFaultRequest{request, {}};
  }
  if (actions != 1) {
    return fail("a fault rule needs exactly one of status, delay_ms, close_connection, exception, disk_error");
  }
  if (request.disk || disk_op) {
    if (!request.disk || !disk_op) return fail("disk_error and disk_op go together");
    if (request.rule.path || detail || answer) return fail("a disk_error rule takes disk_op and times only");
    request.disk->op = *disk_op;
    request.disk->times = request.rule.times;
    return ParsedFaultRequest{request, {}};
  }
  auto& action = request.rule.action;
  if (action.kind != FaultAction::Kind::status) {
    if (detail || answer) return fail("detail and body go with status only");
  } else {
    if (detail && answer) return fail("a fault rule takes detail or body, not both");
    if (action.status < 400 && !answer) return fail("a status below 400 needs a body");
    action.body = answer ? std::move(*answer) : protocol::encode_detail(detail.value_or("injected fault"));
  }
  return ParsedFaultRequest{request, {}};
}

std::size_t FaultInjector::add(FaultRule rule) {
  std::lock_guard lock(mutex_);
  rules_.push_back(std::move(rule));
  count_.store(rules_.size(), std::memory_order_release);
  return rules_.size();
}

std::size_t FaultInjector::clear() {
  std::lock_guard lock(mutex_);
  auto removed = rules_.size();
  rules_.clear();
  count_.store(0, std::memory_order_release);
  return removed;
}

FaultAction FaultInjector::match(std::string_view path, bool protocol_route) {
  if (count_.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard lock(mutex_);
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    const bool matches = it->path ? *it->path == path : protocol_route;
    if (!matches) continue;
    auto action = it->action;
    if (--it->times == 0) {
      rules_.erase(it);
      count_.store(rules_.size(), std::memory_order_release);
    }
    return action;
  }
  return {};
}

}  // namespace hf3fs_meta::server
