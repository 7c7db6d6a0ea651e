// The server's HTTP/1.1 request parser (Beast's basic_parser with our callbacks) on raw bytes, fed
// as the server feeds it: the input arrives in pieces (the first byte sets the piece size) and
// several requests may follow one another on a connection.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <boost/asio/buffer.hpp>

#include "fuzz_support.hpp"
#include "request_parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hf3fs_meta::server;
  namespace http = boost::beast::http;
  if (size == 0) return 0;
  const std::size_t piece = std::size_t{data[0]} + 1;
  std::string_view input = hf3fs_meta::fuzz::as_text(data + 1, size - 1);

  Request request;
  // A budget as the server's, small enough that some inputs reach it (the parse then stops).
  std::atomic<std::uint64_t> in_flight{0};
  BodyBudget budget(in_flight, 1 << 15);
  std::uint64_t held = 0;
  std::optional<RequestParser> parser;
  std::string pending;  // the connection's buffer: received, not yet parsed
  for (;;) {
    while (!pending.empty()) {
      if (!parser) {
        parser.emplace(request, budget, held);
        parser->eager(true);
        parser->header_limit(4096);
        parser->body_limit(1 << 16);
      }
      boost::beast::error_code ec;
      const auto used = parser->put(boost::asio::buffer(pending), ec);
      HF3FS_FUZZ_CHECK(used <= pending.size());
      pending.erase(0, used);
      if (ec == http::error::need_more) break;
      if (ec) return 0;  // the server answers 400 and closes
      if (parser->is_done()) {
        HF3FS_FUZZ_CHECK(!request.method.empty() && request.body.size() <= (1 << 16));
        HF3FS_FUZZ_CHECK(held == request.body.size() && in_flight.load() == held);
        // X-Hf3fs-Namespace: counted up to 2 (the router refuses more than one), none leaves no value.
        HF3FS_FUZZ_CHECK(request.ns_headers <= 2 && (request.ns_headers != 0 || request.ns.empty()));
        budget.give_back(std::exchange(held, 0));  // answered, as the server does
        parser.reset();
      } else if (used == 0) {
        break;
      }
    }
    if (input.empty()) break;
    const std::size_t take = std::min(piece, input.size());
    pending.append(input.substr(0, take));
    input.remove_prefix(take);
  }
  return 0;
}
