// The in-process transport: the client's requests go through Service, the very function the
// reference server wraps, so single-process users and tests see the server's exact answers.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/core/string.hpp>

#include "hf3fs_meta/in_process_transport.hpp"

#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/service.hpp"
#include "internal/namespace_name.hpp"

namespace hf3fs_meta {

namespace {

// X-Hf3fs-Namespace as the server takes it (docs/protocol.md, "Namespaces"): its value, or the 400
// detail the server answers a repeated or bad one with (the value never echoed).
struct NamespaceHeader {
  std::optional<std::string_view> value;  // nullopt: not given (the default namespace, no echo)
  std::string refusal;
};
NamespaceHeader namespace_header(const std::vector<HttpHeader>& headers) {
  NamespaceHeader out;
  for (const HttpHeader& h : headers) {
    if (!boost::beast::iequals(h.name, kNamespaceHeader)) continue;
    if (out.value) return {std::nullopt, internal::namespace_header_repeated()};
    out.value = h.value;
  }
  if (out.value && !valid_namespace_name(*out.value)) return {std::nullopt, internal::namespace_header_invalid()};
  return out;
}

class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(std::shared_ptr<MetadataState> state)
      : state_(std::move(state)), service_(*state_) {}

  // Timeouts do not apply: the call runs on this thread and cannot be abandoned halfway.
  TransportResult post(const HttpRequest& request, const AttemptTimeouts&) override {
    const NamespaceHeader ns = namespace_header(request.headers);
    ServiceAnswer answer;
    if (!ns.refusal.empty()) {
      answer.status = 400;
      answer.content_type = "application/json";
      answer.body = protocol::encode_detail(ns.refusal);
    } else {
      answer = service_.handle(request.method, request.path, request.body, ns.value.value_or(std::string_view()));
    }
    HttpResponse response;
    response.status = answer.status;
    response.content_type = std::move(answer.content_type);
    response.body = std::move(answer.body);
    if (!response.content_type.empty()) response.headers.push_back({"Content-Type", response.content_type});
    if (!answer.location.empty()) response.headers.push_back({"Location", std::move(answer.location)});
    if (!answer.allow.empty()) response.headers.push_back({"Allow", std::move(answer.allow)});
    // The echo: this answer comes from the namespace asked for (a server without namespaces sends none).
    if (ns.value) response.headers.push_back({std::string(kNamespaceHeader), std::string(*ns.value)});
    // No X-Request-Id-Dedup: Service keeps no record of request ids, so it cannot honour one.
    return response;
  }

 private:
  std::shared_ptr<MetadataState> state_;
  Service service_;
};

}  // namespace

std::shared_ptr<Transport> make_in_process_transport(std::shared_ptr<MetadataState> state) {
  if (!state) state = std::make_shared<MetadataState>();
  return std::make_shared<InProcessTransport>(std::move(state));
}

}  // namespace hf3fs_meta
