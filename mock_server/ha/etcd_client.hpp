// EtcdClient: etcd v3's unary calls (range, put, delete, txn, leases, compaction) over its JSON
// gateway, with the members' client URLs as endpoints (the SDK's CurlTransport, each request sent to
// its member by HttpRequest::endpoint); EtcdWatch (etcd_watch.hpp) streams a watch.
//
// What a failure means matters more than the failure: a Txn whose answer never came may still
// commit (etcd applies a proposal once a quorum has it, whether or not the member that took it
// answers), so a write's error says whether it certainly did not happen.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/outcome/result.hpp>

#include "ha/etcd_codec.hpp"

namespace hf3fs_meta {
class Transport;
}

namespace hf3fs_meta::server::ha {

struct EtcdError {
  enum class Kind : std::uint8_t {
    not_applied,  // no member took the request, or one refused it: it did not happen
    unknown,      // it was sent and no answer says what became of it: a write may yet be applied
  };
  Kind kind = Kind::not_applied;
  int code = 0;  // etcd's gRPC status code, when etcd answered (5: not found, e.g. a lease)
  std::string message;
  // The log (log.hpp) no longer holds what the reader needs: it was compacted past it.
  bool needs_snapshot = false;
};

template <class T>
using EtcdResult = boost::outcome_v2::result<T, EtcdError, boost::outcome_v2::policy::terminate>;

// gRPC status codes that etcd answers and that the HA code tells apart.
inline constexpr int kGrpcNotFound = 5;
inline constexpr int kGrpcOutOfRange = 11;  // a revision already compacted
inline constexpr int kGrpcUnavailable = 14;

// How long a call waits, as etcd's own clients do it: a member that does not answer in a short
// while is passed for the next, and the call as a whole has a budget. A stopped member (SIGSTOP, a
// hung disk) still has its connections accepted by the kernel, so only its silence tells it from a
// slow one; a healthy etcd answers a call in milliseconds, so a second is plenty, and a call that
// moves on costs that second rather than the whole budget.
struct EtcdOptions {
  std::vector<std::string> endpoints;  // client URLs, "http://127.0.0.1:2379"
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds request_timeout{1000};  // per attempt: one member's time to answer
  std::chrono::milliseconds call_timeout{3000};     // a call's, across members
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  using Deadline = std::chrono::steady_clock::time_point;

  // Reads go to another member when one does not answer; writes only when one certainly did not
  // take them (not connected), since a write sent twice may be applied twice: a caller whose write
  // is safe to repeat (a Txn whose compare lets one copy commit at most: log.hpp) repeats it, and
  // the repeat starts at the next member. A member that failed an attempt is passed over by the
  // calls that follow, until another fails too.
  EtcdResult<RangeResponse> range(const RangeRequest& request);
  // A range whose answer may be tens of MiB (the log's entries): etcd takes a while to encode it,
  // so each member gets the call's whole timeout to answer.
  EtcdResult<RangeResponse> range_large(const RangeRequest& request);
  EtcdResult<PutResponse> put(const PutRequest& request);
  EtcdResult<DeleteResponse> delete_range(const DeleteRequest& request);
  EtcdResult<TxnResponse> txn(const TxnRequest& request);
  // Given up at `deadline` if that comes before the call's own timeout: a budget that several
  // calls share.
  EtcdResult<TxnResponse> txn(const TxnRequest& request, Deadline deadline);

  EtcdResult<LeaseGrant> lease_grant(std::int64_t ttl_seconds);
  // One renewal: the lease's TTL in seconds from now; 0 when the lease is gone (expired, revoked).
  EtcdResult<std::int64_t> lease_keepalive(std::int64_t id);
  EtcdResult<void> lease_revoke(std::int64_t id);
  // Drops the history below `revision` (etcd keeps every old revision unless asked); answers the
  // store's revision.
  EtcdResult<std::int64_t> compact(std::int64_t revision);

  const std::vector<std::string>& endpoints() const noexcept { return options_.endpoints; }
  const EtcdOptions& options() const noexcept { return options_; }
  // The endpoint the next call tries first: the last one that answered, or the one after the last
  // that failed.
  const std::string& current_endpoint() const noexcept;

 private:
  enum class Retry : std::uint8_t { reads, writes };
  // POSTs `body` to `path`, from the current endpoint on, each attempt at most `attempt` and none
  // begun after `deadline`; the body of a 200.
  EtcdResult<std::string> call(std::string_view path, std::string body, Retry retry, Deadline deadline,
                               std::chrono::milliseconds attempt);
  EtcdResult<std::string> call(std::string_view path, std::string body, Retry retry);
  // Attempt `at` failed: the calls that follow start at the next member, unless one has moved on already.
  void pass_over(std::size_t at);

  EtcdOptions options_;
  std::shared_ptr<Transport> transport_;  // one for all members: each request names its endpoint
  std::atomic<std::size_t> current_{0};
};

// Validates --ha-etcd's list: http:// URLs, comma separated. The error names the bad entry.
boost::outcome_v2::result<std::vector<std::string>, std::string, boost::outcome_v2::policy::terminate>
parse_etcd_endpoints(std::string_view list);

}  // namespace hf3fs_meta::server::ha
