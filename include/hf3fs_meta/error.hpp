// The one error type of the SDK: an hf3fs_meta error code plus the context a caller acts on.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/outcome/result.hpp>

#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

// Stable codes; to_string() gives the names the CLI prints (docs/design.md, "The SDK's errors").
enum class errc {
  invalid_argument = 1,    // refused by the client before sending
  invalid_request,         // 400 Invalid request format / Invalid keys format / any other 400
  invalid_initialization,  // 400 Invalid initialization parameters
  rank_not_initialized,    // 500 "Rank N not initialized", or "Confirmation failed: N"
  allocation_failed,       // other 500s, by the detail's operation prefix
  confirmation_failed,
  existence_check_failed,
  location_lookup_failed,
  stale_allocation,   // 409 from the reference server
  validation_error,   // 422
  server_error,       // any other 500
  unavailable,        // 502, 503, 504
  unexpected_status,  // any other status
  connection_failed,  // transport failures
  timeout,
  protocol_error,  // a success whose body is not the expected shape
};

const std::error_category& error_category() noexcept;
std::error_code make_error_code(errc code) noexcept;
std::string_view to_string(errc code) noexcept;
std::optional<errc> errc_from_string(std::string_view name) noexcept;

// The SDK method a failure came from.
enum class Operation {
  initialize,
  allocate,
  confirm_write,
  batch_exists,
  get_locations,
  clear,
  delete_keys,  // extension: POST /keys/delete
  stats,        // extension: GET /stats
  drop_rank,    // extension: POST /rank/{rank}/drop
  namespaces,      // extension: GET /namespaces
  drop_namespace,  // extension: POST /namespaces/{name}/drop
  key_status,      // extension: POST /keys/status
  raw,
};
std::string_view to_string(Operation op) noexcept;

struct Error {
  errc code = errc::server_error;
  Operation operation = Operation::raw;
  std::optional<int> status;  // HTTP status; none when no answer came
  std::string detail;         // the server's detail as sent (or the transport's / client's message)
  std::string cause;          // the parsed cause, e.g. "Rank 3 not initialized"
  std::optional<Rank> rank;   // the rank the cause names, where it names one
  bool sent = false;          // whether the request may have reached the server
  int attempts = 0;           // attempts made in the call
  bool reinitialized = false; // whether the call re-initialized the rank
  std::string request_id;     // X-Request-Id of the call
  std::string stop_reason;    // why the retry loop stopped, when it retried or refused to

  // A sentence a person can act on, e.g. "rank 3 is not initialized on the server (Allocation
  // failed: Rank 3 not initialized); initialize it, or register it with ensure_initialized".
  std::string message() const;
  std::error_code error_code() const noexcept { return make_error_code(code); }
};

// ADL hooks: let Result<T>::value() throw std::system_error, and let errors compare with errc.
std::error_code make_error_code(const Error& error) noexcept;
[[noreturn]] void outcome_throw_as_system_error_with_payload(const Error& error);

template <class T>
using Result = boost::outcome_v2::result<T, Error>;

}  // namespace hf3fs_meta

template <>
struct std::is_error_code_enum<hf3fs_meta::errc> : std::true_type {};
