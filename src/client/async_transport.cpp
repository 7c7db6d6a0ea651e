#include "client/async_transport.hpp"

#include <algorithm>

#include "internal/endpoint_url.hpp"

namespace hf3fs_meta::internal {

std::unique_ptr<AsyncTransport> make_async_transport(boost::asio::io_context& ioc,
                                                     const std::vector<std::string>& endpoints, std::string ca_file,
                                                     std::size_t max_answer_bytes) {
  const std::string base = endpoints.empty() ? std::string() : endpoints.front();
  const bool tls = std::any_of(endpoints.begin(), endpoints.end(),
                               [](const std::string& e) { return endpoint_scheme_length(e) == 8; });  // https://
  if (tls) return make_curl_multi_transport(ioc, base, std::move(ca_file), max_answer_bytes);
  return make_asio_transport(ioc, base, std::move(ca_file), max_answer_bytes);
}

}  // namespace hf3fs_meta::internal
