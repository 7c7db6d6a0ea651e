// One vLLM request through the SDK: decoded as the server decodes it (bad input answered here, as the
// server answers it, with no round trip), sent with the typed Client call of its route, and answered
// with the status and body the server would have given, rendered by the server's own encoders.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "client/async_client.hpp"
#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/service.hpp"
#include "router.hpp"  // Reply

namespace hf3fs_meta::proxy {

// How a forwarded request ended, as /metrics counts it.
enum class Outcome : std::uint8_t {
  ok,           // the upstream's 2xx
  answered,     // the upstream's own refusal or failure (4xx, 500...), passed on as it was
  local,        // answered here without a round trip (bad input, no such route)
  unavailable,  // no answer from the upstream within the deadline: the proxy's 503
  failed,       // an error in the proxy (out of memory): the server's 500 for an unhandled error
  busy,         // the body budget had no room for the request's copies: the front's 503, nothing sent
};
std::string_view to_string(Outcome outcome) noexcept;

// The answer the server gives without looking at its state: a route it has not (404, 405, 307) and
// a request its decoders refuse (400, 422). `host` makes a 307's location absolute.
void answer_locally(const RoutedTarget& target, std::string_view body, std::string_view host, server::Reply& reply);

// `target` is routed to one of the protocol's endpoints: the call of its route, on `transport`'s
// thread, which sets `reply` and then calls `done` there (at once when answered locally). `target`,
// `body` and `reply` stay valid until then. The bytes of the copies the proxy makes of the request
// and its answer (decoded, re-encoded upstream, the answer's body and its rendering for vLLM) are
// taken from `share`, the connection's share of the front's body budget, before anything is sent:
// without room, the front's 503 (413 when they could never fit --max-inflight-body-bytes).
void forward(internal::AsyncClient& client, internal::AsyncTransport& transport, const RoutedTarget& target,
             std::string_view body, std::chrono::milliseconds deadline, server::BodyShare share,
             server::Reply& reply, std::function<void(Outcome)> done);

}  // namespace hf3fs_meta::proxy
