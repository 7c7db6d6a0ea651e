#include "ha/snapshot_fetch.hpp"

#include <thread>

#include "durable/data_dir.hpp"
#include "ha/log.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::server::ha {

EtcdResult<std::string> fetch_leader_snapshot(EtcdClient& etcd, const Keys& keys, const SnapshotFetchOptions& options) {
  auto leader = etcd.range({keys.leader()});
  if (!leader) return EtcdError{leader.error().kind, 0, "etcd: " + leader.error().message};
  if (leader.value().kvs.empty()) return EtcdError{EtcdError::Kind::not_applied, 0, "no leader"};
  // A snapshot is as large as the state: bounded only far above any state (curl takes the bound as
  // a signed size).
  auto transport = make_curl_transport({}, {}, std::size_t{1} << 40);
  HttpRequest request;
  request.method = "GET";
  request.path = "/_ha/snapshot";
  request.endpoint = leader.value().kvs.front().value;
  if (!options.auth_token.empty()) request.headers.push_back({"Authorization", "Bearer " + options.auth_token});
  auto got = transport->post(request, AttemptTimeouts{std::chrono::seconds(2), options.transfer_timeout});
  if (got && got.value().status == 200) return std::move(got.value().body);
  return EtcdError{EtcdError::Kind::not_applied, 0,
                   request.endpoint + (got ? " answered " + std::to_string(got.value().status) + " " + got.value().body
                                           : " did not answer: " + got.error().message)};
}

EtcdResult<std::uint64_t> fetch_snapshot_if_behind(EtcdClient& etcd, const Keys& keys, const std::filesystem::path& dir,
                                                   const SnapshotFetchOptions& options) {
  const std::uint64_t have = durable::newest_snapshot_seq(dir);
  auto read = read_log(etcd, keys, have, 1);
  if (read) return std::uint64_t{0};
  if (!read.error().needs_snapshot) return read.error();

  const auto deadline = std::chrono::steady_clock::now() + options.wait_for_leader;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto bytes = fetch_leader_snapshot(etcd, keys, options);
    if (bytes) {
      auto installed = durable::install_snapshot(dir, bytes.value());
      if (installed) return installed.value();
      last = "the leader's snapshot cannot be installed: " + installed.error().message;
    } else {
      last = bytes.error().message;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return EtcdError{EtcdError::Kind::not_applied, 0,
                   "the log no longer holds what follows change " + std::to_string(have) +
                       " of this data dir, and no snapshot came from the leader: " + last};
}

}  // namespace hf3fs_meta::server::ha
