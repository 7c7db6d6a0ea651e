// A lean HTTP/1.1 request parser: Beast's basic_parser writing into buffers that the connection owns
// and reuses, so a steady stream of requests on one connection allocates nothing per message.
// It keeps only what the server reads: method, target, Host, Authorization, X-Request-Id,
// X-Hf3fs-Namespace, Expect and the body.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include <boost/asio/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

namespace hf3fs_meta::server {

struct Request {
  boost::beast::http::verb verb = boost::beast::http::verb::unknown;
  std::string method;
  std::string target;
  std::string host;
  std::string authorization;
  std::uint8_t auth_headers = 0;  // how many Authorization fields came (more than one, with tokens on: 400)
  std::string request_id;
  std::string ns;                // X-Hf3fs-Namespace's value (unchecked: the router checks it)
  std::uint8_t ns_headers = 0;   // how many X-Hf3fs-Namespace fields came (more than one: 400)
  std::string body;
  bool expect_continue = false;
  bool keep_alive = true;

  void reset() {
    verb = boost::beast::http::verb::unknown;
    method.clear();
    target.clear();
    host.clear();
    authorization.clear();
    auth_headers = 0;
    request_id.clear();
    ns.clear();
    ns_headers = 0;
    body.clear();
    expect_continue = false;
    keep_alive = true;
  }
};

// Request body bytes held by all connections together, bounded: bytes are taken as they arrive
// (never by the declared Content-Length, which costs nothing to send) and given back once answered.
class BodyBudget {
 public:
  BodyBudget(std::atomic<std::uint64_t>& in_flight, std::uint64_t limit) : in_flight_(in_flight), limit_(limit) {}
  bool take(std::uint64_t n) noexcept {
    std::uint64_t held = in_flight_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ - std::min(held, limit_)) return false;
    } while (!in_flight_.compare_exchange_weak(held, held + n, std::memory_order_relaxed));
    return true;
  }
  void give_back(std::uint64_t n) noexcept { in_flight_.fetch_sub(n, std::memory_order_relaxed); }
  std::uint64_t limit() const noexcept { return limit_; }

 private:
  std::atomic<std::uint64_t>& in_flight_;
  std::uint64_t limit_;
};

// What a request the budget has no room for is told (503 with Retry-After: 1), by the front or by a
// backend that charges its copies of the body to the budget (the proxy).
inline std::string body_budget_full_text(std::uint64_t limit) {
  return "Server busy: request bodies in flight are at their limit of " + std::to_string(limit) +
         " bytes; nothing was applied, retry later";
}

// One connection's share of the budget: the bytes it took for the request in hand, given back
// together once that request is answered.
struct BodyShare {
  BodyBudget* budget = nullptr;
  std::uint64_t* held = nullptr;
  bool take(std::uint64_t n) noexcept {
    if (!budget->take(n)) return false;
    *held += n;
    return true;
  }
};

class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  // `held` counts the bytes this connection took from `budget`; the connection gives them back.
  RequestParser(Request& request, BodyBudget& budget, std::uint64_t& held)
      : request_(request), budget_(budget), held_(held) {
    request_.reset();
  }

  // The parse stopped because the body would go beyond the budget (answer 503).
  bool over_budget() const noexcept { return over_budget_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int /*version*/, error_code& /*ec*/) override {
    request_.verb = method;
    request_.method.assign(method_str.data(), method_str.size());
    request_.target.assign(target.data(), target.size());
  }

  void on_response_impl(int, string_view, int, error_code& ec) override {
    ec = boost::beast::http::error::bad_version;  // never called for a request parser
  }

  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& /*ec*/) override {
    using boost::beast::http::field;
    switch (name) {
      case field::host:
        request_.host.assign(value.data(), value.size());
        break;
      case field::authorization:
        request_.authorization.assign(value.data(), value.size());
        if (request_.auth_headers < 2) ++request_.auth_headers;
        break;
      case field::expect:
        request_.expect_continue = boost::beast::iequals(value, "100-continue");
        break;
      case field::unknown:
        // Only unknown names pay for these comparisons; the namespace's only when the first fails.
        if (boost::beast::iequals(name_string, "x-request-id")) {
          request_.request_id.assign(value.data(), value.size());
        } else if (boost::beast::iequals(name_string, "x-hf3fs-namespace")) {
          request_.ns.assign(value.data(), value.size());
          if (request_.ns_headers < 2) ++request_.ns_headers;
        }
        break;
      default:
        break;
    }
  }

  void on_header_impl(error_code& /*ec*/) override {}

  void on_body_init_impl(boost::optional<std::uint64_t> const& content_length, error_code& /*ec*/) override {
    // Nothing is reserved for the declared length: 200 connections declaring 16 MB and sending one
    // byte must not cost 3 GB. The body grows as it arrives, within the budget.
    declared_ = content_length.value_or(0);
  }

  std::size_t on_body_impl(string_view body, error_code& ec) override { return append(body, ec); }

  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}

  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override { return append(body, ec); }

  std::size_t append(string_view body, error_code& ec) {
    if (!budget_.take(body.size())) {
      over_budget_ = true;
      ec = boost::asio::error::no_buffer_space;
      return 0;
    }
    held_ += body.size();
    std::string& b = request_.body;
    const std::uint64_t need = b.size() + body.size();
    // Grown as std::string grows (doubling: each byte copied a bounded number of times), but never
    // past the declared length: a whole body holds its length, not up to twice the bytes counted.
    if (need > b.capacity() && need <= declared_) {
      b.reserve(std::min<std::uint64_t>(std::max<std::uint64_t>(need, 2 * b.capacity()), declared_));
    }
    b.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(error_code& /*ec*/) override {}

  Request& request_;
  BodyBudget& budget_;
  std::uint64_t& held_;
  bool over_budget_ = false;
  std::uint64_t declared_ = 0;  // Content-Length (0: none, chunked)
};

}  // namespace hf3fs_meta::server
