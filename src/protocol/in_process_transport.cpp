// The in-process transport: the client's requests go through Service, the very function the
// reference server wraps, so single-process users and tests see the server's exact answers.
#include <memory>
#include <utility>

#include "hf3fs_meta/in_process_transport.hpp"

#include "hf3fs_meta/service.hpp"

namespace hf3fs_meta {

namespace {

class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(std::shared_ptr<MetadataState> state)
      : state_(std::move(state)), service_(*state_) {}

  // Timeouts do not apply: the call runs on this thread and cannot be abandoned halfway.
  TransportResult post(const HttpRequest& request, const AttemptTimeouts&) override {
    ServiceAnswer answer = service_.handle(request.method, request.path, request.body);
    HttpResponse response;
    response.status = answer.status;
    response.content_type = std::move(answer.content_type);
    response.body = std::move(answer.body);
    if (!response.content_type.empty()) response.headers.push_back({"Content-Type", response.content_type});
    if (!answer.location.empty()) response.headers.push_back({"Location", std::move(answer.location)});
    if (!answer.allow.empty()) response.headers.push_back({"Allow", std::move(answer.allow)});
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
