#include "forward.hpp"

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
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

std::string attempts_text(int attempts) {
  return std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts");
}

// The proxy's 503: what the upstream last did, said as it was. The upstream's last status and
// detail when it answered; "no answer within N ms" only when the deadline truly passed without one;
// else what ended the call first (a connection closed with the request sent is not repeated). Then
// the attempts, the time, and the SDK's account (Error::message: why its retry loop stopped).
std::string unavailable_detail(const Error& e, std::chrono::milliseconds deadline, std::chrono::milliseconds took) {
  std::string text = "hf3fs-meta-proxy: ";
  if (e.status) {
    text += "the upstream answered " + std::to_string(*e.status);
    if (!e.detail.empty()) text += " \"" + e.detail + "\"";
    text += " to the last of " + attempts_text(e.attempts);
  } else if (took >= deadline) {
    text += "no answer from the upstream within " + std::to_string(deadline.count()) + " ms (" +
            attempts_text(e.attempts) + ")";
  } else {
    text += "no answer from the upstream (" + std::string(to_string(e.code)) + ") to the last of " +
            attempts_text(e.attempts);
  }
  text += ", " + std::to_string(took.count()) + " ms into a deadline of " + std::to_string(deadline.count()) +
          " ms: " + e.message();
  return text;
}

// A refusal or failure of the SDK's call -> what vLLM gets.
Outcome answer_error(const Error& e, std::chrono::milliseconds deadline, std::chrono::milliseconds took,
                     Reply& reply) {
  // The upstream's own answer, passed on: its status and detail, rendered as the server renders them.
  // A 502/503/504 is a failure the SDK rode out as long as it could, a timeout or a connection that
  // failed had no answer, and a protocol_error an answer the SDK could not trust: then the proxy
  // says what happened, in a 503 (vLLM repeats it).
  const bool answered = e.status && e.code != errc::unavailable && e.code != errc::timeout &&
                        e.code != errc::connection_failed && e.code != errc::protocol_error;
  if (answered) {
    reply.set_json(*e.status, protocol::encode_detail(e.detail));
    return Outcome::answered;
  }
  reply.set_json(503, protocol::encode_detail(unavailable_detail(e, deadline, took)));
  return Outcome::unavailable;
}

// One forwarded request while its upstream call runs: what its answer needs. The request's target,
// body and reply belong to the connection, which waits for `done`.
struct Forwarding {
  internal::AsyncClient& client;
  internal::AsyncTransport& transport;
  const RoutedTarget& target;
  std::string_view body;
  CallOptions call;
  Reply& reply;
  std::function<void(Outcome)> done;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  // The call failed: its answer, through answer_error.
  void failed(const Error& e) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    done(answer_error(e, call.deadline.value(), took, reply));
  }

  // Runs a call's answer: an exception there (out of memory) is answered as the server answers an
  // unhandled error, since nothing above the transport's callback would catch it.
  template <class F>
  void answer(F&& work) noexcept {
    try {
      work();
    } catch (const std::exception& e) {
      reply.set_unhandled_error();
      std::fprintf(stderr, "hf3fs-meta-proxy: %s failed: %s\n", std::string(to_string(target.route)).c_str(), e.what());
      done(Outcome::failed);
    }
  }
};
using Call = std::shared_ptr<Forwarding>;

// The body as it came, for a request the SDK refuses before sending (a duplicate key, an empty key,
// a negative page...) but the server answers with its own words: Client::raw sends it unchanged.
void forward_raw(const Call& f) {
  f->client.raw(f->transport, f->target.raw, f->body, f->call, [f](Result<RawResponse> answer) {
    f->answer([&] {
      if (!answer) return f->failed(answer.error());
      RawResponse& r = answer.value();
      set_reply(f->reply, r.status, std::move(r.content_type), std::move(r.body));
      f->done(Outcome::ok);
    });
  });
}

// What a typed call's result becomes: its 2xx rendered by `encode` (-> the body; for a void call,
// 204), an SDK refusal sent raw, any other failure through answer_error. `encode` holds what the
// call views (the decoded request) until the call ends.
template <class T, class Encode>
internal::AsyncClient::Then<T> finish(const Call& f, Encode encode) {
  return [f, encode = std::move(encode)](Result<T> result) {
    f->answer([&] {
      if (!result) {
        if (result.error().code == errc::invalid_argument) return forward_raw(f);
        return f->failed(result.error());
      }
      if constexpr (std::is_void_v<T>) {
        no_content(f->reply);
      } else {
        f->reply.set_json(200, encode(result.value()));
      }
      f->done(Outcome::ok);
    });
  };
}

// What a request's copies hold, charged to the body budget (forward): the decoded containers and
// the heap of their strings, counted from their capacities.
constexpr std::uint64_t kAllocationOverhead = 16;  // glibc's header and rounding of one allocation
// The answer's two copies (the upstream's body, the one rendered for vLLM) per key it names, where
// it names no key: [true|false], a location, a status (batch_allocate's repeats its keys: counted).
constexpr std::uint64_t kAnswerBytesPerKey = 64;
constexpr std::uint64_t kIntChars = 20;  // "-9223372036854775808"

std::uint64_t heap_bytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 + kAllocationOverhead : 0;
}
std::uint64_t heap_bytes(std::string_view) { return 0; }
std::uint64_t heap_bytes(const BlockKey& k) { return heap_bytes(k.key) + heap_bytes(k.prefix_key); }
std::uint64_t heap_bytes(const Confirmation& c) { return heap_bytes(c.key); }
std::uint64_t heap_bytes(Page) { return 0; }
template <class T>
std::uint64_t heap_bytes(const std::vector<T>& v) {
  std::uint64_t n = v.capacity() == 0 ? 0 : v.capacity() * sizeof(T) + kAllocationOverhead;
  for (const T& e : v) n += heap_bytes(e);
  return n;
}

std::vector<std::string> owned(const std::vector<std::string_view>& views) {
  return std::vector<std::string>(views.begin(), views.end());
}

// The decoded key list of batch_exists, delete and key_status bodies (one decoder, as the server's).
// `decoded`: the bytes of the views and the parser's copy that decoding took (gone by the call).
std::optional<std::vector<std::string>> key_list(std::string_view body, std::uint64_t& decoded) {
  protocol::KeyListRequest views;
  if (protocol::decode_batch_exists_request(body, views)) return std::nullopt;
  decoded = heap_bytes(views.keys) + heap_bytes(views.buffer);
  return owned(views.keys);
}

// The encoder takes the state's KeyInfo, whose pages give the ranks (the answer names no page).
std::string key_status_body(const KeyStatusAnswer& answer) {
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
}

}  // namespace

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::ok: return "ok";
    case Outcome::answered: return "answered";
    case Outcome::local: return "local";
    case Outcome::unavailable: return "unavailable";
    case Outcome::failed: return "failed";
    case Outcome::busy: return "busy";
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

void forward(internal::AsyncClient& client, internal::AsyncTransport& transport, const RoutedTarget& target,
             std::string_view body, std::chrono::milliseconds deadline, server::BodyShare share, Reply& reply,
             std::function<void(Outcome)> done) {
  const auto f = std::make_shared<Forwarding>(Forwarding{client, transport, target, body, CallOptions{deadline},
                                                         reply, std::move(done)});
  const CallOptions& call = f->call;
  const auto refused = [&] {
    answer_locally(target, body, {}, reply);
    f->done(Outcome::local);
  };
  // Takes the bytes of the request's copies, `decoded` and its answer's, from the body budget, with
  // the SDK's re-encoding of the body (as long as it, or shorter): false when answered for want of room.
  const auto afford = [&](std::uint64_t decoded, std::uint64_t answer) {
    const std::uint64_t copies = decoded + body.size() + answer;
    if (share.take(copies)) return true;
    const std::uint64_t limit = share.budget->limit();
    if (body.size() + copies > limit) {  // never: waiting makes no room for it
      reply.set_json(413, protocol::encode_detail(
                              "Request body too large: with the copies hf3fs-meta-proxy makes of it and its answer, it "
                              "would hold " + std::to_string(body.size() + copies) +
                              " bytes, over --max-inflight-body-bytes " + std::to_string(limit)));
      f->done(Outcome::local);
    } else {
      reply.set_json(503, protocol::encode_detail(server::body_budget_full_text(limit)));
      reply.retry_after = "1";
      f->done(Outcome::busy);
    }
    return false;
  };
  const auto key_lists = [&](const std::vector<std::string>& keys, const auto& decoded) {
    return afford(heap_bytes(keys) + decoded, kAnswerBytesPerKey * keys.size());
  };
  // Each decoded request is held by the shared_ptr its encoder keeps, since the call views it.
  switch (target.route) {
    case Route::initialize: {
      const auto rank = protocol::parse_path_rank(target.rank_segment());
      auto request = protocol::decode_initialize_request(body);
      if (!rank || !request) return refused();
      const auto message = [](const std::string& m) { return protocol::encode_message(m); };
      // A worker's rank is registered, so that the SDK initializes it again when the upstream forgets it.
      return client.ensure_initialized(transport, *rank, request.value().num_pages, request.value().role, call,
                                       finish<std::string>(f, message));
    }
    case Route::batch_allocate: {
      auto request = protocol::decode_allocate_request(body);
      if (!request) return refused();
      const auto r = std::make_shared<protocol::AllocateRequest>(std::move(request).value());
      std::uint64_t answer = 0;  // [key, page] a key, twice, and the pages
      for (const BlockKey& k : r->keys) answer += 2 * (k.key.size() + 2 + kIntChars + 4) + sizeof(Page);
      if (!afford(heap_bytes(r->keys), answer)) return;
      return client.allocate(transport, r->rank, r->keys, call,
                             finish<std::vector<Page>>(f, [r](const std::vector<Page>& pages) {
                               return protocol::encode_allocate_response(r->rank, r->keys, pages);
                             }));
    }
    case Route::confirm_write: {
      auto request = protocol::decode_confirm_write_request(body);
      if (!request) return refused();
      const auto r = std::make_shared<protocol::ConfirmWriteRequest>(std::move(request).value());
      if (!r->release_keys.empty()) {
        // The proxy does not advertise kKeyedReleaseHeader: vLLM sends bare pages only.
        reply.set_json(400, protocol::encode_detail(
                                "pages_to_release[" + std::to_string(r->release_keys.front().index) +
                                "]: hf3fs-meta-proxy takes bare pages only (keyed releases are not forwarded)"));
        return f->done(Outcome::local);
      }
      if (!afford(heap_bytes(r->confirmations) + heap_bytes(r->pages_to_release), 0)) return;
      return client.confirm_write(transport, r->rank, r->confirmations, r->pages_to_release, call,
                                  finish<void>(f, [r](auto&&...) { return std::string(); }));
    }
    case Route::batch_exists: {
      std::uint64_t decoded = 0;
      auto keys = key_list(body, decoded);
      if (!keys) return refused();
      const auto k = std::make_shared<std::vector<std::string>>(std::move(*keys));
      if (!key_lists(*k, decoded)) return;
      return client.batch_exists(transport, *k, call, finish<std::vector<bool>>(f, [k](const std::vector<bool>& e) {
                                   return protocol::encode_batch_exists_response(e);
                                 }));
    }
    case Route::get_locations: {
      protocol::KeyListRequest views;
      if (protocol::decode_get_locations_request(body, views)) return refused();
      const Rank rank = views.rank;
      const auto k = std::make_shared<std::vector<std::string>>(owned(views.keys));
      if (!key_lists(*k, heap_bytes(views.keys) + heap_bytes(views.buffer))) return;
      return client.get_locations(transport, rank, *k, call,
                                  finish<std::vector<std::optional<Page>>>(
                                      f, [k](const std::vector<std::optional<Page>>& l) {
                                        return protocol::encode_get_locations_response(l);
                                      }));
    }
    case Route::clear: {
      // As vLLM's server, the proxy then knows no rank: one that is not initialized again gets the
      // server's "not initialized" instead of the SDK's re-initialization.
      auto then = finish<void>(f, [](auto&&...) { return std::string(); });
      return client.clear(transport, call, [&client, then = std::move(then)](Result<void> cleared) {
        if (cleared) client.forget_ranks();
        then(std::move(cleared));
      });
    }
    case Route::delete_keys: {
      std::uint64_t decoded = 0;
      auto keys = key_list(body, decoded);
      if (!keys) return refused();
      const auto k = std::make_shared<std::vector<std::string>>(std::move(*keys));
      if (!key_lists(*k, decoded)) return;
      return client.delete_keys(transport, *k, call, finish<std::vector<bool>>(f, [k](const std::vector<bool>& d) {
                                  return protocol::encode_delete_keys_response(d);
                                }));
    }
    case Route::stats:
      return client.stats(transport, call, finish<StateStats>(f, [](const StateStats& stats) {
                            return protocol::encode_stats_response(stats);
                          }));
    case Route::drop_rank: {
      const auto rank = protocol::parse_path_rank(target.rank_segment());
      if (!rank) return refused();
      auto then = finish<DropOutcome>(f, [rank = *rank](const DropOutcome& o) {
        return protocol::encode_drop_response(rank, o);
      });
      return client.drop_rank(transport, *rank, call,
                              [&client, rank = *rank, then = std::move(then)](Result<DropOutcome> dropped) {
                                if (dropped) client.forget_rank(rank);  // as for a /clear, that rank
                                then(std::move(dropped));
                              });
    }
    case Route::namespaces:
      return client.namespaces(transport, call,
                               finish<std::vector<NamespaceSummary>>(f, [](const std::vector<NamespaceSummary>& all) {
                                 return protocol::encode_namespaces_response(all);
                               }));
    case Route::drop_namespace: {
      const auto name = std::make_shared<std::string>(target.name_segment());
      if (!valid_namespace_name(*name)) return refused();
      return client.drop_namespace(transport, *name, call,
                                   finish<NamespaceDropOutcome>(f, [name](const NamespaceDropOutcome& o) {
                                     return protocol::encode_drop_namespace_response(*name, o);
                                   }));
    }
    case Route::key_status: {
      std::uint64_t decoded = 0;
      auto keys = key_list(body, decoded);
      if (!keys) return refused();
      const auto k = std::make_shared<std::vector<std::string>>(std::move(*keys));
      if (!key_lists(*k, decoded)) return;
      return client.key_status(transport, *k, call, finish<KeyStatusAnswer>(f, [k](const KeyStatusAnswer& answer) {
                                 return key_status_body(answer);
                               }));
    }
    case Route::redirect:
    case Route::method_not_allowed:
    case Route::not_found:
      break;
  }
  refused();
}

}  // namespace hf3fs_meta::proxy
