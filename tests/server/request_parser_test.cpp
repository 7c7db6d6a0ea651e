// The request parser's X-Hf3fs-Namespace and Authorization: the value, how often each came (capped
// at 2), in any case of its name, and nothing of it left over for the next request on the same connection.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>

#include "request_parser.hpp"

namespace hf3fs_meta::server {
namespace {

// Parses `input` as the server does on one connection: one parser per request, the Request reused.
// Each parsed request is copied out.
std::vector<Request> parse_all(std::string_view input) {
  std::vector<Request> parsed;
  Request request;
  std::atomic<std::uint64_t> in_flight{0};
  BodyBudget budget(in_flight, 1 << 20);
  std::uint64_t held = 0;
  while (!input.empty()) {
    RequestParser parser(request, budget, held);
    parser.eager(true);
    boost::beast::error_code ec;
    const auto used = parser.put(boost::asio::buffer(input.data(), input.size()), ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(parser.is_done());
    if (ec || !parser.is_done()) break;
    input.remove_prefix(used);
    parsed.push_back(request);
    budget.give_back(held);
    held = 0;
  }
  return parsed;
}

TEST(RequestParserNamespaceTest, KeepsTheValueAndCountsTheFields) {
  const auto parsed = parse_all(
      "POST /clear HTTP/1.1\r\nHost: x\r\nX-Hf3fs-Namespace: model-a\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nx-hf3fs-namespace: a\r\nX-HF3FS-NAMESPACE: b\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nX-Hf3fs-Namespace: a\r\nX-Hf3fs-Namespace: a\r\nX-Hf3fs-Namespace: a\r\n"
      "Content-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nX-Request-Id: r1\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nX-Hf3fs-Namespace:\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nX-Hf3fs-Namespace: bad\xC3\xA9 byte\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(parsed.size(), 6u);
  EXPECT_EQ(parsed[0].ns, "model-a");
  EXPECT_EQ(parsed[0].ns_headers, 1);
  EXPECT_EQ(parsed[1].ns_headers, 2);
  EXPECT_EQ(parsed[2].ns_headers, 2);  // capped: "more than one" is all the router asks
  // The request after them, on the same connection, carried none: nothing of theirs is left.
  EXPECT_EQ(parsed[3].ns, "");
  EXPECT_EQ(parsed[3].ns_headers, 0);
  EXPECT_EQ(parsed[3].request_id, "r1");
  // An empty value came (and is refused by the router), which is not the same as none.
  EXPECT_EQ(parsed[4].ns, "");
  EXPECT_EQ(parsed[4].ns_headers, 1);
  // The raw bytes are kept unchecked: the router refuses them without echoing them.
  EXPECT_EQ(parsed[5].ns, "bad\xC3\xA9 byte");
  EXPECT_EQ(parsed[5].ns_headers, 1);
}

TEST(RequestParserAuthorizationTest, CountsTheFieldsInAnyCaseAndForgetsThemForTheNextRequest) {
  const auto parsed = parse_all(
      "POST /clear HTTP/1.1\r\nAuthorization: Bearer a\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nauthorization: Bearer a\r\nAUTHORIZATION: Bearer b\r\nContent-Length: 0\r\n\r\n"
      "POST /clear HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0].authorization, "Bearer a");
  EXPECT_EQ(parsed[0].auth_headers, 1);
  EXPECT_EQ(parsed[1].auth_headers, 2);
  EXPECT_EQ(parsed[2].authorization, "");
  EXPECT_EQ(parsed[2].auth_headers, 0);
}

TEST(RequestParserNamespaceTest, ResetForgetsTheHeader) {
  Request request;
  request.ns = "model-a";
  request.ns_headers = 2;
  request.reset();
  EXPECT_TRUE(request.ns.empty());
  EXPECT_EQ(request.ns_headers, 0);
}

}  // namespace
}  // namespace hf3fs_meta::server
