#include "ha/snapshot_fetch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <curl/curl.h>

#include <memory>
#include <thread>

#include "ha/log.hpp"

namespace hf3fs_meta::server::ha {
namespace {

// Where curl's bytes go: a file, as they arrive.
struct Sink {
  int fd = -1;
  int error = 0;  // errno of a failed write
  static std::size_t on_data(char* data, std::size_t size, std::size_t n, void* user) {
    auto* sink = static_cast<Sink*>(user);
    if (const int err = durable::write_all(sink->fd, {data, size * n}); err != 0) {
      sink->error = err;
      return 0;  // curl stops: CURLE_WRITE_ERROR
    }
    return size * n;
  }
};

// GET `url` into the file `path` (made anew); the HTTP status, or why there is none.
EtcdResult<long> download(const std::string& url, const std::string& token, const std::filesystem::path& path,
                          std::chrono::milliseconds transfer_timeout) {
  Sink sink;
  sink.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (sink.fd < 0) return EtcdError{EtcdError::Kind::not_applied, 0, path.string() + ": " + durable::errno_text(errno)};
  const std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
  if (!easy) {
    ::close(sink.fd);
    return EtcdError{EtcdError::Kind::not_applied, 0, "curl_easy_init failed"};
  }
  const std::string authorization = "Authorization: Bearer " + token;
  curl_slist* headers = token.empty() ? nullptr : curl_slist_append(nullptr, authorization.c_str());
  char error[CURL_ERROR_SIZE] = {};
  CURL* e = easy.get();
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(transfer_timeout.count()));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Sink::on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(e);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  const bool synced = code == CURLE_OK && ::fsync(sink.fd) == 0;
  const int sync_error = errno;
  ::close(sink.fd);
  if (sink.error != 0) return EtcdError{EtcdError::Kind::not_applied, 0, path.string() + ": " + durable::errno_text(sink.error)};
  if (code != CURLE_OK) {
    return EtcdError{EtcdError::Kind::not_applied, 0, std::string(error[0] != 0 ? error : curl_easy_strerror(code))};
  }
  if (!synced) return EtcdError{EtcdError::Kind::not_applied, 0, path.string() + ": " + durable::errno_text(sync_error)};
  return status;
}

}  // namespace

EtcdResult<durable::FileBytes> fetch_leader_snapshot(EtcdClient& etcd, const Keys& keys,
                                                    const std::filesystem::path& dir,
                                                    const SnapshotFetchOptions& options) {
  auto leader = etcd.range({keys.leader()});
  if (!leader) return EtcdError{leader.error().kind, 0, "etcd: " + leader.error().message};
  if (leader.value().kvs.empty()) return EtcdError{EtcdError::Kind::not_applied, 0, "no leader"};
  const std::string url = leader.value().kvs.front().value + "/_ha/snapshot";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // a member's first start
  // As large as the state: downloaded to a file as it comes, and mapped; the mapping keeps the
  // bytes once the file is gone.
  const auto path = dir / durable::kFetchedSnapshotName;
  auto status = download(url, options.auth_token, path, options.transfer_timeout);
  auto mapped = status ? durable::read_file(path) : durable::Result<durable::FileBytes>(durable::FileBytes());
  ::unlink(path.c_str());
  if (!status) return EtcdError{EtcdError::Kind::not_applied, 0, url + " did not answer: " + status.error().message};
  if (!mapped) return EtcdError{EtcdError::Kind::not_applied, 0, mapped.error().message};
  if (status.value() != 200) {
    return EtcdError{EtcdError::Kind::not_applied, 0,
                     url + " answered " + std::to_string(status.value()) + " " +
                         std::string(mapped.value().bytes().substr(0, 500))};
  }
  return std::move(mapped).value();
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
    auto bytes = fetch_leader_snapshot(etcd, keys, dir, options);
    if (bytes) {
      auto installed = durable::install_snapshot(dir, bytes.value().bytes());
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
