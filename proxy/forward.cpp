#include "forward.hpp"

#include <optional>
#include <utility>
#include <vector>

#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta::proxy {
namespace {

using server::Reply;

void set_reply(Reply& reply, int status, std::string content_type, std::string body) {
  reply.status = status;
  reply.content_type = std::move(content_type);
  reply.body = std::move(body);
  reply.location.clear();
  reply.allow.clear();
}

void no_content(Reply& reply) { set_reply(reply, 204, {}, {}); }

// A refusal or failure of the SDK's call -> what vLLM gets.
Outcome answer_error(const Error& e, std::chrono::milliseconds deadline, Reply& reply) {
  // The upstream's own answer, passed on: its status and detail, rendered as the server renders them.
  // A 502/503/504 is a failure the SDK rode out until the deadline, a timeout or a connection that
  // failed had no answer, and a protocol_error an answer the SDK could not trust: then the proxy
  // says why, in a 503 (vLLM repeats it).
  const bool answered = e.status && e.code != errc::unavailable && e.code != errc::timeout &&
                        e.code != errc::connection_failed && e.code != errc::protocol_error;
  if (answered) {
    reply.set_json(*e.status, protocol::encode_detail(e.detail));
    return Outcome::answered;
  }
  reply.set_json(503, protocol::encode_detail("hf3fs-meta-proxy: no answer from the upstream within the deadline of " +
                                              std::to_string(deadline.count()) + " ms: " + e.message()));
  return Outcome::unavailable;
}

// The body as it came, for a request the SDK refuses before sending (a duplicate key, an empty key,
// a negative page...) but the server answers with its own words: Client::raw sends it unchanged.
Outcome forward_raw(Client& client, const RoutedTarget& target, std::string_view body, const CallOptions& call,
                    std::chrono::milliseconds deadline, Reply& reply) {
  auto answer = client.raw(target.raw, body, call);
  if (!answer) return answer_error(answer.error(), deadline, reply);
  RawResponse& r = answer.value();
  set_reply(reply, r.status, std::move(r.content_type), std::move(r.body));
  return Outcome::ok;
}

// A typed call's result: its 2xx rendered by `encode` (-> the body; nullopt: 204), an SDK refusal
// sent raw, any other failure through answer_error.
template <class T, class Encode>
Outcome finish(Result<T> result, Encode&& encode, Client& client, const RoutedTarget& target, std::string_view body,
               const CallOptions& call, std::chrono::milliseconds deadline, Reply& reply) {
  if (!result) {
    if (result.error().code == errc::invalid_argument) return forward_raw(client, target, body, call, deadline, reply);
    return answer_error(result.error(), deadline, reply);
  }
  if constexpr (std::is_void_v<T>) {
    (void)encode;
    no_content(reply);
  } else {
    reply.set_json(200, encode(result.value()));
  }
  return Outcome::ok;
}

std::vector<std::string> owned(const std::vector<std::string_view>& views) {
  return std::vector<std::string>(views.begin(), views.end());
}

// The decoded key list of batch_exists, delete and key_status bodies (one decoder, as the server's).
std::optional<std::vector<std::string>> key_list(std::string_view body) {
  protocol::KeyListRequest views;
  if (protocol::decode_batch_exists_request(body, views)) return std::nullopt;
  return owned(views.keys);
}

}  // namespace

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::ok: return "ok";
    case Outcome::answered: return "answered";
    case Outcome::local: return "local";
    case Outcome::unavailable: return "unavailable";
  }
  return "unknown";
}

void answer_locally(const RoutedTarget& target, std::string_view body, std::string_view host, Reply& reply) {
  // Service answers these before it looks at its state: an empty one, never changed, serves them.
  static MetadataState nothing;
  ServiceAnswer answer = Service(nothing).handle(target, body);
  set_reply(reply, answer.status, std::move(answer.content_type), std::move(answer.body));
  reply.allow = std::move(answer.allow);
  if (!answer.location.empty()) {
    reply.location = "http://";
    reply.location += host;
    reply.location += answer.location;
  }
}

Outcome forward(Client& client, const RoutedTarget& target, std::string_view body, std::chrono::milliseconds deadline,
                Reply& reply) {
  const CallOptions call{deadline};
  const auto refused = [&] {
    answer_locally(target, body, {}, reply);
    return Outcome::local;
  };
  const auto done = [&](auto result, auto&& encode) {
    return finish(std::move(result), encode, client, target, body, call, deadline, reply);
  };
  switch (target.route) {
    case Route::initialize: {
      const auto rank = protocol::parse_path_rank(target.rank_segment());
      auto request = protocol::decode_initialize_request(body);
      if (!rank || !request) return refused();
      const auto message = [](const std::string& m) { return protocol::encode_message(m); };
      // A worker's rank is registered, so that the SDK initializes it again when the upstream forgets it.
      return done(client.ensure_initialized(*rank, request.value().num_pages, request.value().role, call), message);
    }
    case Route::batch_allocate: {
      auto request = protocol::decode_allocate_request(body);
      if (!request) return refused();
      const auto& r = request.value();
      return done(client.allocate(r.rank, r.keys, call),
                  [&](const std::vector<Page>& pages) { return protocol::encode_allocate_response(r.rank, r.keys, pages); });
    }
    case Route::confirm_write: {
      auto request = protocol::decode_confirm_write_request(body);
      if (!request) return refused();
      const auto& r = request.value();
      if (!r.release_keys.empty()) {
        // The proxy does not advertise kKeyedReleaseHeader: vLLM sends bare pages only.
        reply.set_json(400, protocol::encode_detail(
                                "pages_to_release[" + std::to_string(r.release_keys.front().index) +
                                "]: hf3fs-meta-proxy takes bare pages only (keyed releases are not forwarded)"));
        return Outcome::local;
      }
      return done(client.confirm_write(r.rank, r.confirmations, r.pages_to_release, call), 0);
    }
    case Route::batch_exists: {
      auto keys = key_list(body);
      if (!keys) return refused();
      return done(client.batch_exists(*keys, call),
                  [](const std::vector<bool>& exists) { return protocol::encode_batch_exists_response(exists); });
    }
    case Route::get_locations: {
      protocol::KeyListRequest views;
      if (protocol::decode_get_locations_request(body, views)) return refused();
      const Rank rank = views.rank;
      return done(client.get_locations(rank, owned(views.keys), call), [](const std::vector<std::optional<Page>>& l) {
        return protocol::encode_get_locations_response(l);
      });
    }
    case Route::clear:
      return done(client.clear(call), 0);
    case Route::delete_keys: {
      auto keys = key_list(body);
      if (!keys) return refused();
      return done(client.delete_keys(*keys, call),
                  [](const std::vector<bool>& deleted) { return protocol::encode_delete_keys_response(deleted); });
    }
    case Route::stats:
      return done(client.stats(call), [](const StateStats& stats) { return protocol::encode_stats_response(stats); });
    case Route::drop_rank: {
      const auto rank = protocol::parse_path_rank(target.rank_segment());
      if (!rank) return refused();
      return done(client.drop_rank(*rank, call),
                  [&](const DropOutcome& outcome) { return protocol::encode_drop_response(*rank, outcome); });
    }
    case Route::namespaces:
      return done(client.namespaces(call), [](const std::vector<NamespaceSummary>& all) {
        return protocol::encode_namespaces_response(all);
      });
    case Route::drop_namespace: {
      const std::string name(target.name_segment());
      if (!valid_namespace_name(name)) return refused();
      return done(client.drop_namespace(name, call), [&](const NamespaceDropOutcome& outcome) {
        return protocol::encode_drop_namespace_response(name, outcome);
      });
    }
    case Route::key_status: {
      auto keys = key_list(body);
      if (!keys) return refused();
      return done(client.key_status(*keys, call), [](const KeyStatusAnswer& answer) {
        // The encoder takes the state's KeyInfo, whose pages give the ranks (the answer names no page).
        std::vector<std::optional<KeyInfo>> status;
        status.reserve(answer.status.size());
        for (const auto& s : answer.status) {
          if (!s) {
            status.emplace_back();
            continue;
          }
          KeyInfo info{s->tp_world_size, {}, s->complete};
          for (const Rank rank : s->ranks) info.pages.emplace_back(rank, 0);
          status.emplace_back(std::move(info));
        }
        return protocol::encode_key_status_response(answer.ranks_initialized, status);
      });
    }
    case Route::redirect:
    case Route::method_not_allowed:
    case Route::not_found:
      break;
  }
  return refused();
}

}  // namespace hf3fs_meta::proxy
