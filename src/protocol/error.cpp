// The hf3fs_meta error category, the stable code names, and Error::message().
#include "hf3fs_meta/error.hpp"

#include <array>
#include <string>
#include <system_error>
#include <utility>

namespace hf3fs_meta {
namespace {

struct CodeInfo {
  errc code;
  std::string_view name;
  std::string_view summary;  // the category's message(): short, context-free
};

// Order follows the enum; the code names are part of the CLI's output, so they never change.
constexpr std::array<CodeInfo, 16> kCodes{{
    {errc::invalid_argument, "invalid_argument", "invalid argument, refused before sending"},
    {errc::invalid_request, "invalid_request", "the server refused the request as malformed"},
    {errc::invalid_initialization, "invalid_initialization",
     "the server refused the initialization parameters"},
    {errc::rank_not_initialized, "rank_not_initialized", "the rank is not initialized on the server"},
    {errc::allocation_failed, "allocation_failed", "the server failed to allocate pages"},
    {errc::confirmation_failed, "confirmation_failed", "the server failed to confirm the write"},
    {errc::existence_check_failed, "existence_check_failed", "the server failed to check key existence"},
    {errc::location_lookup_failed, "location_lookup_failed", "the server failed to look up key locations"},
    {errc::stale_allocation, "stale_allocation", "the confirmed page is not allocated to this key"},
    {errc::validation_error, "validation_error", "the server refused the request path"},
    {errc::server_error, "server_error", "the server failed with an internal error"},
    {errc::unavailable, "unavailable", "the metadata server is unavailable"},
    {errc::unexpected_status, "unexpected_status", "the server answered with an unexpected status"},
    {errc::connection_failed, "connection_failed", "could not connect to the metadata server"},
    {errc::timeout, "timeout", "the metadata server did not answer in time"},
    {errc::protocol_error, "protocol_error", "the server's answer does not follow the protocol"},
}};

const CodeInfo* info_of(int value) noexcept {
  for (const auto& info : kCodes) {
    if (static_cast<int>(info.code) == value) return &info;
  }
  return nullptr;
}

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "hf3fs_meta"; }
  std::string message(int value) const override {
    const CodeInfo* info = info_of(value);
    return info ? std::string(info->summary) : "unknown hf3fs_meta error " + std::to_string(value);
  }
};

// "(detail)" when there is a detail: every message carries what the server (or transport) said.
std::string parenthesized(const std::string& detail) {
  return detail.empty() ? std::string() : " (" + detail + ")";
}

std::string rank_phrase(const Error& e) {
  return e.rank ? "rank " + std::to_string(*e.rank) : std::string("the rank");
}

std::string sent_phrase(const Error& e) {
  return e.sent ? "; the request may have reached the server"
                : "; the request did not reach the server";
}

std::string sentence(const Error& e) {
  const std::string d = parenthesized(e.detail);
  switch (e.code) {
    case errc::invalid_argument:
      return "invalid argument" + d + "; the call was refused before sending: fix the arguments";
    case errc::invalid_request:
      return "the server refused the request as malformed" + d +
             "; the request is wrong as sent: fix the caller (or report an SDK bug)";
    case errc::invalid_initialization:
      return "the server refused the initialization parameters" + d +
             "; initialize role worker with 0 < num_pages <= the server's maximum, or role scheduler";
    case errc::rank_not_initialized:
      if (e.reinitialized) {
        return rank_phrase(e) + " was re-initialized on the server after it lost its state" + d +
               "; the pages of this call belong to the lost state: allocate again";
      }
      return rank_phrase(e) + " is not initialized on the server" + d +
             "; initialize it, or register it with ensure_initialized";
    case errc::allocation_failed:
      return "the server failed to allocate pages" + d + "; check the keys sent";
    case errc::confirmation_failed:
      return "the server failed to confirm the write" + d +
             "; check the confirmations and pages_to_release sent";
    case errc::existence_check_failed:
      return "the server failed to check key existence" + d + "; check the keys sent";
    case errc::location_lookup_failed:
      return "the server failed to look up key locations" + d + "; check the keys sent";
    case errc::stale_allocation:
      return "the server refused the confirmation: the page is not allocated to this key" + d +
             "; its allocation was lost (server restart, clear or release): allocate again and rewrite";
    case errc::validation_error:
      return "the server refused the request path" + d + "; the rank must be a decimal integer";
    case errc::server_error:
      return "the server failed with an internal error" + d + "; see the server's log";
    case errc::unavailable:
      return "the metadata server is unavailable" + d + "; try again later";
    case errc::unexpected_status:
      // 401: a missing or unknown bearer token (--auth-token-file, --tenants-file). 403: a known
      // token that may not act in the namespace asked for (a tenant's token reaches its own only).
      if (e.status == 401) {
        return "the server refused the request's credentials" + d +
               "; send a token the server knows (its --auth-token-file's, or a line of its --tenants-file): "
               "the CLI's --token-file, $HF3FS_META_TOKEN, Python's token=, or ClientOptions::auth_token";
      }
      if (e.status == 403) {
        return "the server refused the request's credentials" + d +
               "; this token may not act in the namespace asked for: ask for the namespace its "
               "--tenants-file line names (the CLI's --namespace, $HF3FS_META_NAMESPACE, Python's "
               "namespace=, ClientOptions::namespace_name), or send that namespace's token: the CLI's "
               "--token-file, $HF3FS_META_TOKEN, Python's token=, or ClientOptions::auth_token";
      }
      return "the server answered with an unexpected status" + d +
             "; check that the base URL points at an HF3FS metadata server";
    case errc::connection_failed:
      return "could not connect to the metadata server" + d + sent_phrase(e) +
             "; check that it runs and is reachable";
    case errc::timeout:
      return "the metadata server did not answer in time" + d + sent_phrase(e);
    case errc::protocol_error:
      return "the server's answer does not follow the protocol" + d +
             "; check that the base URL points at an HF3FS metadata server";
  }
  return "unknown hf3fs_meta error " + std::to_string(static_cast<int>(e.code)) + d;
}

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

std::error_code make_error_code(errc code) noexcept {
  return {static_cast<int>(code), error_category()};
}

std::string_view to_string(errc code) noexcept {
  const CodeInfo* info = info_of(static_cast<int>(code));
  return info ? info->name : std::string_view("unknown");
}

std::optional<errc> errc_from_string(std::string_view name) noexcept {
  for (const auto& info : kCodes) {
    if (info.name == name) return info.code;
  }
  return std::nullopt;
}

std::string_view to_string(Operation op) noexcept {
  switch (op) {
    case Operation::initialize: return "initialize";
    case Operation::allocate: return "allocate";
    case Operation::confirm_write: return "confirm_write";
    case Operation::batch_exists: return "batch_exists";
    case Operation::get_locations: return "get_locations";
    case Operation::clear: return "clear";
    case Operation::drop_rank: return "drop_rank";
    case Operation::raw: return "raw";
    case Operation::delete_keys: return "delete_keys";
    case Operation::stats: return "stats";
    case Operation::namespaces: return "namespaces";
    case Operation::drop_namespace: return "drop_namespace";
    case Operation::key_status: return "key_status";
  }
  return "unknown";
}

std::string Error::message() const {
  std::string text = sentence(*this);
  // The status is in the "last error" clause when the retry loop explains itself, else on its own.
  if (!stop_reason.empty()) {
    text += "; ";
    text += stop_reason;
    text += "; last error: ";
    text += to_string(code);
    text += status ? " (" + std::to_string(*status) + ")" : std::string(" (no answer)");
  } else if (status) {
    text += "; HTTP status " + std::to_string(*status);
  }
  if (!request_id.empty()) text += "; request id " + request_id;
  return text;
}

std::error_code make_error_code(const Error& error) noexcept { return make_error_code(error.code); }

void outcome_throw_as_system_error_with_payload(const Error& error) {
  throw std::system_error(make_error_code(error), error.message());
}

}  // namespace hf3fs_meta
