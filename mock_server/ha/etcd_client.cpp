#include "ha/etcd_client.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "hf3fs_meta/transport.hpp"
#include "internal/endpoint_url.hpp"

namespace hf3fs_meta::server::ha {

namespace {

// The largest answer read from etcd: a range of the log is cut by its limit well below this.
constexpr std::size_t kMaxAnswerBytes = std::size_t{256} << 20;

// No attempt is begun with less of a call's time left than this: no answer could come in it.
constexpr std::chrono::milliseconds kLeastAttempt{10};

// Whether an error answer says the request certainly did not take effect. etcd's refusals (a bad
// request, a lease not found, a revision compacted, a precondition, the space quota) are checked
// before anything is proposed; so is "no leader". Anything else, above all a proposal that timed
// out (etcd answers 500 "context deadline exceeded" with code 2 Unknown, or 503 "request timed out"
// with 14 Unavailable, after its own 7 s) or an answer that is not etcd's, may yet be applied.
bool certainly_not_applied(const GatewayError& error) {
  switch (error.code) {
    case 3:   // InvalidArgument
    case 5:   // NotFound
    case 6:   // AlreadyExists
    case 7:   // PermissionDenied
    case 8:   // ResourceExhausted: the space quota
    case 9:   // FailedPrecondition
    case 11:  // OutOfRange: compacted, or a future revision
    case 12:  // Unimplemented
    case 16:  // Unauthenticated
      return true;
    case kGrpcUnavailable:
      return error.message.find("no leader") != std::string::npos;
    default:
      return false;
  }
}

// A 200's body decoded, or the call's error. A 200 we cannot read: the request was applied (a
// write) or answered, and what it said is lost.
template <class T>
EtcdResult<T> answer(EtcdResult<std::string> body, Decoded<T> (*decode)(std::string_view), std::string_view path) {
  if (!body) return body.error();
  auto value = decode(body.value());
  if (value) return std::move(value).value();
  return EtcdError{EtcdError::Kind::unknown, 0,
                   std::string("etcd's answer to ").append(path).append(" is unreadable: ").append(value.error().message)};
}

}  // namespace

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), transport_(make_curl_transport({}, {}, kMaxAnswerBytes)) {}

EtcdClient::~EtcdClient() = default;

const std::string& EtcdClient::current_endpoint() const noexcept {
  return options_.endpoints[current_.load(std::memory_order_relaxed)];
}

void EtcdClient::pass_over(std::size_t at) {
  std::size_t expected = at;
  current_.compare_exchange_strong(expected, (at + 1) % options_.endpoints.size(), std::memory_order_relaxed);
}

EtcdResult<std::string> EtcdClient::call(std::string_view path, std::string body, Retry retry) {
  return call(path, std::move(body), retry, std::chrono::steady_clock::now() + options_.call_timeout,
              options_.request_timeout);
}

EtcdResult<std::string> EtcdClient::call(std::string_view path, std::string body, Retry retry, Deadline deadline,
                                         std::chrono::milliseconds attempt) {
  using std::chrono::milliseconds;
  HttpRequest request;
  request.path = path;
  request.body = std::move(body);
  const std::size_t n = options_.endpoints.size();
  const std::size_t first = current_.load(std::memory_order_relaxed);
  std::string tried;  // what each member did, for the error
  EtcdError last{EtcdError::Kind::not_applied, 0, "no time was left to send it"};
  for (std::size_t i = 0; i < n; ++i) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left < kLeastAttempt) break;  // the budget is spent: not sent again
    const std::size_t at = (first + i) % n;
    request.endpoint = options_.endpoints[at];
    const AttemptTimeouts timeouts{std::min(options_.connect_timeout, left), std::min(attempt, left)};
    TransportResult result = transport_->post(request, timeouts);
    bool certain = false;  // the request certainly did not take effect on this member
    if (result && result.value().status == 200) {
      current_.store(at, std::memory_order_relaxed);
      return std::move(result.value().body);
    }
    if (result) {
      const GatewayError error = decode_error(result.value().body);
      certain = certainly_not_applied(error);
      if (certain && error.code != kGrpcUnavailable) {
        // etcd's refusal: every member would say the same.
        current_.store(at, std::memory_order_relaxed);
        return EtcdError{EtcdError::Kind::not_applied, error.code,
                         std::string("etcd refused ").append(path).append(" (HTTP ")
                             .append(std::to_string(result.value().status)).append(", code ")
                             .append(std::to_string(error.code)).append("): ").append(error.message)};
      }
      last.code = error.code;
      last.message = std::string(options_.endpoints[at]).append(" answered HTTP ")
                         .append(std::to_string(result.value().status)).append(": ").append(error.message);
    } else {
      certain = !result.error().sent;
      last.code = 0;
      last.message = result.error().message;
    }
    pass_over(at);
    last.kind = certain ? EtcdError::Kind::not_applied : EtcdError::Kind::unknown;
    if (!tried.empty()) tried += "; ";
    tried += last.message;
    if (!certain && retry == Retry::writes) break;  // sent: repeating it elsewhere could apply it twice
  }
  if (tried.empty()) tried = last.message;
  last.message = std::string("no etcd member answered ").append(path).append(": ").append(tried);
  return last;
}

EtcdResult<RangeResponse> EtcdClient::range(const RangeRequest& request) {
  constexpr std::string_view kPath = "/v3/kv/range";
  return answer(call(kPath, encode(request), Retry::reads), decode_range, kPath);
}

EtcdResult<RangeResponse> EtcdClient::range_large(const RangeRequest& request) {
  constexpr std::string_view kPath = "/v3/kv/range";
  const auto each = options_.call_timeout;
  const auto deadline = std::chrono::steady_clock::now() + each * static_cast<int>(options_.endpoints.size());
  return answer(call(kPath, encode(request), Retry::reads, deadline, each), decode_range, kPath);
}

EtcdResult<PutResponse> EtcdClient::put(const PutRequest& request) {
  constexpr std::string_view kPath = "/v3/kv/put";
  return answer(call(kPath, encode(request), Retry::writes), decode_put, kPath);
}

EtcdResult<DeleteResponse> EtcdClient::delete_range(const DeleteRequest& request) {
  constexpr std::string_view kPath = "/v3/kv/deleterange";
  return answer(call(kPath, encode(request), Retry::writes), decode_delete, kPath);
}

EtcdResult<TxnResponse> EtcdClient::txn(const TxnRequest& request) {
  return txn(request, std::chrono::steady_clock::now() + options_.call_timeout);
}

EtcdResult<TxnResponse> EtcdClient::txn(const TxnRequest& request, Deadline deadline) {
  constexpr std::string_view kPath = "/v3/kv/txn";
  deadline = std::min(deadline, std::chrono::steady_clock::now() + options_.call_timeout);
  return answer(call(kPath, encode(request), Retry::writes, deadline, options_.request_timeout), decode_txn, kPath);
}

EtcdResult<LeaseGrant> EtcdClient::lease_grant(std::int64_t ttl_seconds) {
  // A grant repeated on another member makes a second lease, which nobody renews: it expires.
  constexpr std::string_view kPath = "/v3/lease/grant";
  return answer(call(kPath, encode_lease_grant(ttl_seconds), Retry::reads), decode_lease_grant, kPath);
}

EtcdResult<std::int64_t> EtcdClient::lease_keepalive(std::int64_t id) {
  constexpr std::string_view kPath = "/v3/lease/keepalive";
  return answer(call(kPath, encode_lease_id(id), Retry::reads), decode_lease_keepalive, kPath);
}

EtcdResult<void> EtcdClient::lease_revoke(std::int64_t id) {
  auto body = call("/v3/lease/revoke", encode_lease_id(id), Retry::reads);
  if (!body) return body.error();
  return boost::outcome_v2::success();
}

EtcdResult<std::int64_t> EtcdClient::compact(std::int64_t revision) {
  constexpr std::string_view kPath = "/v3/kv/compaction";
  auto body = call(kPath, encode_compaction(revision), Retry::reads);
  // Already compacted there (a repeat of one whose answer was lost, or another's): done. Its
  // answer says no revision: the one asked for stands in.
  if (!body && body.error().code == kGrpcOutOfRange &&
      body.error().message.find("has been compacted") != std::string::npos) {
    return revision;
  }
  return answer(std::move(body), decode_header_revision, kPath);
}

boost::outcome_v2::result<std::vector<std::string>, std::string, boost::outcome_v2::policy::terminate>
parse_etcd_endpoints(std::string_view list) {
  std::vector<std::string> endpoints = internal::split_endpoint_list(list);
  if (auto problem = internal::endpoint_list_problem(endpoints, "--ha-etcd")) return *std::move(problem);
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (internal::endpoint_scheme_length(endpoints[i]) != 7) {  // the gateway is spoken without TLS here
      return "--ha-etcd: \"" + endpoints[i] + "\" is not an http:// URL (etcd's JSON gateway over TLS is not supported)";
    }
    endpoints[i] = internal::normalized_endpoint(endpoints[i]);
  }
  return endpoints;
}

}  // namespace hf3fs_meta::server::ha
