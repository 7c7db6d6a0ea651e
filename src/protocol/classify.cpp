// classify_error: a non-2xx answer -> an errc, from the status and the body alone (docs/design.md,
// "The SDK's errors"). It never looks at which call was made: vLLM's 500 detail names its operation, and a
// "Rank N not initialized" means the same thing whatever the call. It is only meant for non-2xx
// answers; a 2xx given to it is classified as unexpected_status.
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"
#include "internal/json.hpp"

namespace hf3fs_meta::protocol {
namespace {

using internal::find_member;
using internal::string_of;
using rapidjson::Value;

constexpr std::size_t kMaxRawDetail = 200;

// The endpoint whose 500 details carry this prefix (routes.hpp), if any.
const RouteInfo* route_of_prefix(std::string_view prefix) {
  if (prefix.empty()) return nullptr;
  for (const auto& row : kRoutes) {
    if (row.failure_prefix == prefix) return &row;
  }
  return nullptr;
}

// A body that carries no usable detail is kept as the detail, cut short without splitting a UTF-8
// character: a proxy's HTML page must not flood a log line.
std::string raw_detail(std::string_view body) {
  if (body.size() <= kMaxRawDetail) return std::string(body);
  std::size_t cut = kMaxRawDetail;
  while (cut > 0 && (static_cast<unsigned char>(body[cut]) & 0xC0) == 0x80) --cut;
  return std::string(body.substr(0, cut)) + "...";
}

// FastAPI's validation errors, pydantic 1 or 2: [{"loc": ["path", "rank"], "msg": "..."}, ...]
// rendered as "path.rank: msg; ...".
std::string render_detail_list(const Value& list) {
  std::string out;
  for (const auto& item : list.GetArray()) {
    if (!item.IsObject()) continue;
    std::string location;
    if (const Value* loc = find_member(item, "loc"); loc && loc->IsArray()) {
      for (const auto& part : loc->GetArray()) {
        if (!location.empty()) location += '.';
        if (part.IsString()) {
          location += string_of(part);
        } else if (part.IsInt64()) {
          location += std::to_string(part.GetInt64());
        }
      }
    }
    const Value* msg = find_member(item, "msg");
    if (!msg || !msg->IsString()) continue;
    if (!out.empty()) out += "; ";
    if (!location.empty()) out += location + ": ";
    out += string_of(*msg);
  }
  return out;
}

bool is_decimal_integer(std::string_view text) {
  if (!text.empty() && text.front() == '-') text.remove_prefix(1);
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The rank a Python repr names: an int (nullopt beyond 64 bits), True/False (Python's True == 1),
// or an integral float such as 1.0 (a dict lookup with 1.0 finds rank 1).
std::optional<Rank> rank_of_repr(std::string_view text) {
  if (text == "True") return 1;
  if (text == "False") return 0;
  const char* first = text.data();
  const char* last = first + text.size();
  if (is_decimal_integer(text)) {
    Rank rank = 0;
    const auto [end, ec] = std::from_chars(first, last, rank);
    if (ec == std::errc() && end == last) return rank;
    return std::nullopt;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || !std::isfinite(value) || value != std::trunc(value)) return std::nullopt;
  if (value < -9223372036854775808.0 || value >= 9223372036854775808.0) return std::nullopt;
  return static_cast<Rank>(value);
}

// "Rank <X> not initialized": X is the repr of whatever the request's rank was.
bool match_rank_not_initialized(std::string_view cause, std::optional<Rank>& rank) {
  constexpr std::string_view kHead = "Rank ";
  constexpr std::string_view kTail = " not initialized";
  if (cause.size() <= kHead.size() + kTail.size() || !cause.starts_with(kHead) || !cause.ends_with(kTail)) {
    return false;
  }
  rank = rank_of_repr(cause.substr(kHead.size(), cause.size() - kHead.size() - kTail.size()));
  return true;
}

// The reference server's 409 ends with "on rank R".
std::optional<Rank> rank_of_stale_detail(std::string_view cause) {
  constexpr std::string_view kOnRank = " on rank ";
  const auto pos = cause.rfind(kOnRank);
  if (pos == std::string_view::npos) return std::nullopt;
  const std::string_view tail = cause.substr(pos + kOnRank.size());
  if (!is_decimal_integer(tail)) return std::nullopt;
  return rank_of_repr(tail);
}

void split_prefix(ClassifiedError& out) {
  const std::string_view detail = out.detail;
  const auto colon = detail.find(": ");
  if (colon != std::string_view::npos && route_of_prefix(detail.substr(0, colon))) {
    out.prefix = detail.substr(0, colon);
    out.cause = detail.substr(colon + 2);
    return;
  }
  out.cause = out.detail;
}

void classify_500(ClassifiedError& out) {
  if (match_rank_not_initialized(out.cause, out.rank)) {
    out.code = errc::rank_not_initialized;
    return;
  }
  const RouteInfo* route = route_of_prefix(out.prefix);
  // vLLM's confirm_write on a missing rank raises KeyError(rank): str() of it is the bare rank.
  if (route && route->missing_rank == MissingRank::key_error && is_decimal_integer(out.cause)) {
    out.code = errc::rank_not_initialized;
    out.rank = rank_of_repr(out.cause);
    return;
  }
  if (out.prefix.empty()) {
    // An operation we do not know yet, whose cause still says what to do.
    const std::string_view detail = out.detail;
    const auto colon = detail.find(": ");
    if (colon != std::string_view::npos && match_rank_not_initialized(detail.substr(colon + 2), out.rank)) {
      out.code = errc::rank_not_initialized;
      out.prefix = detail.substr(0, colon);
      out.cause = detail.substr(colon + 2);
      return;
    }
  }
  out.code = route ? route->failure_code : errc::server_error;
}

}  // namespace

ClassifiedError classify_error(int status, [[maybe_unused]] std::string_view content_type, std::string_view body) {
  // The content type is not trusted: a proxy may label JSON as text, or the reverse; the body says.
  ClassifiedError out;
  bool string_detail = false;
  {
    internal::ParsedJson json;
    const Value* detail = nullptr;
    if (json.parse(body) && json.root().IsObject()) detail = find_member(json.root(), "detail");
    if (detail && detail->IsString() && detail->GetStringLength() > 0) {
      out.detail = string_of(*detail);
      string_detail = true;
    } else if (detail && detail->IsArray()) {
      out.detail = render_detail_list(*detail);
    }
    if (out.detail.empty()) out.detail = raw_detail(body);
  }
  split_prefix(out);

  switch (status) {
    case 400:
      out.code = string_detail && out.detail.starts_with("Invalid initialization parameters")
                     ? errc::invalid_initialization
                     : errc::invalid_request;
      break;
    case 409:
      out.code = errc::stale_allocation;
      out.rank = rank_of_stale_detail(out.cause);
      break;
    case 422:
      out.code = errc::validation_error;
      break;
    case 500:
      if (string_detail) {
        classify_500(out);
      } else {
        out.code = errc::server_error;
      }
      break;
    case 502:
    case 503:
    case 504:
      out.code = errc::unavailable;
      out.not_leader = status == 503 && string_detail && out.detail.starts_with(kNotLeaderDetailPrefix);
      break;
    default:
      out.code = errc::unexpected_status;
  }
  return out;
}

}  // namespace hf3fs_meta::protocol
