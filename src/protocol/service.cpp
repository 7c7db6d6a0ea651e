// Service: routing as Starlette does it (percent-decoded path, 405 for another method, 307 for a
// trailing slash) over the route table, then decode -> MetadataState -> encode, answering as vLLM's
// FastAPI app does.
#include "hf3fs_meta/service.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf3fs_meta/protocol_server.hpp"
#include "internal/field_text.hpp"
#include "internal/namespace_name.hpp"
#include "internal/utf8.hpp"

namespace hf3fs_meta {
namespace {

constexpr std::string_view kJson = "application/json";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// As uvicorn's unquote(): %XX becomes its byte; a '%' not followed by two hex digits stays.
std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int high = hex_value(text[i + 1]);
      const int low = hex_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// Python decodes the path with errors="replace": an invalid UTF-8 sequence becomes U+FFFD, so the
// 422 body echoing it stays valid JSON.
std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0; i < text.size();) {
    if (const std::size_t length = internal::utf8_sequence_length(p + i, text.size() - i)) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

// Whether a decoded path names an endpoint's pattern; the pattern's one parameter ({rank} or {name})
// is any non-empty segment without '/' (Starlette's str convertor: validating it is the endpoint's
// job, hence 422 or 400 rather than 404).
bool matches(std::string_view pattern, std::string_view path, std::size_t& param_at, std::size_t& param_size) {
  const auto at = pattern.find('{');
  if (at == std::string_view::npos) return path == pattern;
  const std::string_view head = pattern.substr(0, at);
  const std::string_view tail = pattern.substr(pattern.find('}', at) + 1);
  if (path.size() <= head.size() + tail.size() || !path.starts_with(head) || !path.ends_with(tail)) return false;
  const std::size_t size = path.size() - head.size() - tail.size();
  if (path.substr(head.size(), size).find('/') != std::string_view::npos) return false;
  param_at = head.size();
  param_size = size;
  return true;
}

// The endpoint a decoded path names, by path alone.
const RouteInfo* match_path(std::string_view path, std::size_t& param_at, std::size_t& param_size) {
  for (const auto& row : kRoutes) {
    if (row.is_endpoint() && matches(row.name, path, param_at, param_size)) return &row;
  }
  return nullptr;
}

std::string_view strip_trailing_slashes(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  return path;
}

ServiceAnswer json_answer(int status, std::string body) {
  ServiceAnswer answer;
  answer.status = status;
  answer.content_type = kJson;
  answer.body = std::move(body);
  return answer;
}

ServiceAnswer detail_answer(int status, std::string_view detail) {
  return json_answer(status, protocol::encode_detail(detail));
}

ServiceAnswer no_content() {
  ServiceAnswer answer;
  answer.status = 204;
  return answer;
}

// The decoded keys of an exists or get_locations call: views into the body, in vectors reused by
// each thread, so that a lookup allocates no string per key (it did, and malloc/free were a third
// of the server's instructions on 1,250-key exists calls).
protocol::KeyListRequest& key_list_scratch() {
  thread_local protocol::KeyListRequest request;
  // A huge batch must not leave its memory behind for the thread's lifetime.
  constexpr std::size_t kKeep = std::size_t{1} << 16;
  if (request.keys.capacity() > kKeep) std::vector<std::string_view>{}.swap(request.keys);
  if (request.buffer.capacity() > kKeep * 32) std::string{}.swap(request.buffer);
  return request;
}

// --max-key-bytes (StateOptions::max_key_bytes; 0: no limit), checked before anything changes on
// every route that takes keys: the first key longer than the limit, as the 400 naming it (its field,
// index, and position in a pair, e.g. `keys[3][0]`), else nullopt. `key_at(i)` gives the index to
// name and the key of item i.
template <class KeyAt>
std::optional<ServiceAnswer> long_key(std::size_t limit, std::size_t count, std::string_view field,
                                      std::string_view suffix, KeyAt key_at) {
  if (limit == 0) return std::nullopt;
  for (std::size_t i = 0; i < count; ++i) {
    const auto [index, key] = key_at(i);
    if (key.size() <= limit) continue;
    return detail_answer(400, internal::indexed(field, index) + std::string(suffix) + ": a key of " +
                                  std::to_string(key.size()) + " bytes, above the limit of " + std::to_string(limit) +
                                  " (--max-key-bytes)");
  }
  return std::nullopt;
}
std::optional<ServiceAnswer> long_key(std::size_t limit, std::span<const std::string_view> keys) {
  return long_key(limit, keys.size(), "keys", "", [&](std::size_t i) { return std::pair{i, keys[i]}; });
}

std::string rank_not_initialized(Rank rank) { return "Rank " + std::to_string(rank) + " not initialized"; }

// A StateError -> the answer vLLM gives (not_initialized) or our deviation's answer (the others).
// The rank named is the request's: the state's message is not trusted for vLLM's exact texts.
ServiceAnswer state_error_answer(Route route, Rank rank, const StateError& error) {
  const RouteInfo& info = route_info(route);
  const std::string prefix = std::string(info.failure_prefix) + ": ";
  switch (error.kind) {
    case StateErrc::not_initialized:
      switch (info.missing_rank) {
        case MissingRank::plain: return detail_answer(500, rank_not_initialized(rank));
        case MissingRank::prefixed: return detail_answer(500, prefix + rank_not_initialized(rank));
        case MissingRank::key_error: return detail_answer(500, prefix + std::to_string(rank));
      }
      break;
    case StateErrc::stale:
    case StateErrc::conflict: return detail_answer(409, prefix + error.message);
    case StateErrc::invalid_initialization:
    case StateErrc::invalid_argument: break;
  }
  return detail_answer(400, error.message);
}

}  // namespace

void Service::route(std::string_view method, std::string_view target, RoutedTarget& out) {
  const auto question = target.find('?');
  out.raw = target.substr(0, question);
  out.query = question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  out.percent_decoded = out.raw.find('%') != std::string_view::npos;
  if (out.percent_decoded) {
    out.decoded = percent_decode(out.raw);
  } else {
    out.decoded.clear();
  }
  out.param_at = out.param_size = 0;
  out.endpoint = Route::not_found;
  const std::string_view path = out.path();
  if (const RouteInfo* row = match_path(path, out.param_at, out.param_size)) {
    out.endpoint = row->route;
    out.route = method == row->method ? row->route : Route::method_not_allowed;
    return;
  }
  // Starlette's redirect_slashes: any method, and only for a path that ends with '/'.
  std::size_t unused_at = 0, unused_size = 0;
  if (path.size() > 1 && path.back() == '/' && match_path(strip_trailing_slashes(path), unused_at, unused_size)) {
    out.route = Route::redirect;
    return;
  }
  out.route = Route::not_found;
}

RoutedTarget Service::route(std::string_view method, std::string_view target) {
  RoutedTarget out;
  route(method, target, out);
  return out;
}

ServiceAnswer Service::handle(std::string_view method, std::string_view target, std::string_view body,
                              std::string_view ns_name) {
  return handle(route(method, target), body, ns_name);
}

ServiceAnswer Service::handle(const RoutedTarget& target, std::string_view body, std::string_view ns_name) {
  const Route route = target.route;
  const NamespaceRef ns{ns_name};
  switch (route) {
    case Route::not_found: return detail_answer(404, "Not Found");
    case Route::method_not_allowed: {
      ServiceAnswer a = detail_answer(405, "Method Not Allowed");
      a.allow = route_info(target.endpoint).method;
      return a;
    }
    case Route::redirect: {
      ServiceAnswer a;
      a.status = 307;
      a.location = strip_trailing_slashes(target.raw);
      if (!target.query.empty()) {
        a.location += '?';
        a.location += target.query;
      }
      return a;
    }
    case Route::clear:
      state_.clear(ns);
      return no_content();
    case Route::namespaces:
    case Route::drop_namespace:
    case Route::key_status: return handle_namespaces(target, body, ns);

    case Route::initialize: {
      const std::string_view segment = target.rank_segment();
      const auto rank = protocol::parse_path_rank(segment);
      if (!rank) return json_answer(422, protocol::encode_path_rank_validation_error(sanitize_utf8(segment)));
      auto request = protocol::decode_initialize_request(body);
      if (!request) return detail_answer(400, request.error().message);
      if (request.value().role == Role::scheduler) {
        // Nothing to record for a scheduler; vLLM does not even look at num_pages.
        return json_answer(200, protocol::encode_message("Scheduler role does not require initialization"));
      }
      const std::int64_t num_pages = request.value().num_pages;
      auto result = state_.initialize(ns, *rank, num_pages, Role::worker);
      if (!result) return state_error_answer(route, *rank, result.error());
      // The requested count, even when the rank existed with another: vLLM's reply.
      ServiceAnswer a = json_answer(200, protocol::encode_message("Rank " + std::to_string(*rank) +
                                                                  " initialized with " + std::to_string(num_pages) +
                                                                  " pages"));
      const std::int64_t existing = result.value().existing_num_pages;
      if (!result.value().created && existing != num_pages) a.num_pages_kept = existing;
      return a;
    }

    case Route::drop_rank: {
      const std::string_view segment = target.rank_segment();
      const auto rank = protocol::parse_path_rank(segment);
      if (!rank) return json_answer(422, protocol::encode_path_rank_validation_error(sanitize_utf8(segment)));
      return json_answer(200, protocol::encode_drop_response(*rank, state_.drop_rank(ns, *rank)));
    }

    case Route::batch_allocate: {
      auto request = protocol::decode_allocate_request(body);
      if (!request) return detail_answer(400, request.error().message);
      const auto& r = request.value();
      const std::size_t limit = state_.options().max_key_bytes;
      const auto key = [&](std::size_t i) { return std::pair{i, std::string_view(r.keys[i].key)}; };
      const auto prefix = [&](std::size_t i) { return std::pair{i, std::string_view(r.keys[i].prefix_key)}; };
      if (auto refused = long_key(limit, r.keys.size(), "keys", "[0]", key)) return std::move(*refused);
      if (auto refused = long_key(limit, r.keys.size(), "keys", "[1]", prefix)) return std::move(*refused);
      auto pages = state_.allocate(ns, r.rank, r.keys);
      if (!pages) return state_error_answer(route, r.rank, pages.error());
      ServiceAnswer a = json_answer(200, protocol::encode_allocate_response(r.rank, r.keys, pages.value()));
      a.pages = std::move(pages).value();
      return a;
    }

    case Route::confirm_write: {
      auto request = protocol::decode_confirm_write_request(body);
      if (!request) return detail_answer(400, request.error().message);
      const auto& r = request.value();
      const std::size_t limit = state_.options().max_key_bytes;
      const auto confirmed = [&](std::size_t i) { return std::pair{i, std::string_view(r.confirmations[i].key)}; };
      const auto released = [&](std::size_t i) {
        return std::pair{r.release_keys[i].index, std::string_view(r.release_keys[i].key)};
      };
      if (auto refused = long_key(limit, r.confirmations.size(), "confirmations", "[0]", confirmed)) {
        return std::move(*refused);
      }
      if (auto refused = long_key(limit, r.release_keys.size(), "pages_to_release", "[0]", released)) {
        return std::move(*refused);
      }
      auto outcome = state_.confirm_write(ns, r.rank, r.confirmations, r.pages_to_release, r.release_keys);
      if (!outcome) return state_error_answer(route, r.rank, outcome.error());
      return no_content();
    }

    case Route::batch_exists: {
      protocol::KeyListRequest& r = key_list_scratch();
      if (auto error = protocol::decode_batch_exists_request(body, r)) return detail_answer(400, error->message);
      const std::span<const std::string_view> keys = r.keys;
      if (auto refused = long_key(state_.options().max_key_bytes, keys)) return std::move(*refused);
      return json_answer(200, protocol::encode_batch_exists_response(state_.batch_exists(ns, keys)));
    }

    case Route::delete_keys: {
      protocol::KeyListRequest& r = key_list_scratch();
      if (auto error = protocol::decode_delete_keys_request(body, r)) return detail_answer(400, error->message);
      const std::span<const std::string_view> keys = r.keys;
      if (auto refused = long_key(state_.options().max_key_bytes, keys)) return std::move(*refused);
      return json_answer(200, protocol::encode_delete_keys_response(state_.delete_keys(ns, keys)));
    }

    case Route::stats: return json_answer(200, protocol::encode_stats_response(state_.stats(ns)));

    case Route::get_locations: {
      protocol::KeyListRequest& r = key_list_scratch();
      if (auto error = protocol::decode_get_locations_request(body, r)) return detail_answer(400, error->message);
      const std::span<const std::string_view> keys = r.keys;
      if (auto refused = long_key(state_.options().max_key_bytes, keys)) return std::move(*refused);
      auto locations = state_.get_locations(ns, r.rank, keys);
      if (!locations) return state_error_answer(route, r.rank, locations.error());
      return json_answer(200, protocol::encode_get_locations_response(locations.value()));
    }
  }
  return detail_answer(404, "Not Found");
}

// The namespaces' own routes (extensions; docs/protocol.md, "Namespaces").
ServiceAnswer Service::handle_namespaces(const RoutedTarget& target, std::string_view body, NamespaceRef ns) {
  switch (target.route) {
    case Route::namespaces: {
      const std::vector<NamespaceSummary> all = state_.namespaces();
      return json_answer(200, protocol::encode_namespaces_response(all));
    }
    case Route::drop_namespace: {
      // Our extension: a bad name is 400 (not pydantic's 422), and the segment is never echoed.
      const std::string_view name = target.name_segment();
      if (!valid_namespace_name(name)) {
        return detail_answer(400, "the namespace in the path must be " + std::string(internal::kNamespaceRule));
      }
      auto outcome = state_.drop_namespace(name);  // the default one: refused, naming POST /clear
      if (!outcome) return detail_answer(400, outcome.error().message);
      return json_answer(200, protocol::encode_drop_namespace_response(name, outcome.value()));
    }
    case Route::key_status: {
      protocol::KeyListRequest& r = key_list_scratch();
      if (auto error = protocol::decode_key_status_request(body, r)) return detail_answer(400, error->message);
      const std::span<const std::string_view> keys = r.keys;
      if (auto refused = long_key(state_.options().max_key_bytes, keys)) return std::move(*refused);
      std::size_t ranks = 0;  // at the statuses' instant (one lock)
      const std::vector<std::optional<KeyInfo>> status = state_.key_status(ns, keys, &ranks);
      return json_answer(200, protocol::encode_key_status_response(ranks, status));
    }
    default: break;
  }
  return detail_answer(404, "Not Found");
}

}  // namespace hf3fs_meta
