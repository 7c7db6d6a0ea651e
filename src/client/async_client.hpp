// The SDK's typed calls without blocking, for a program that runs I/O loops (hf3fs-meta-proxy): each
// call starts on the thread of the AsyncTransport it is given and answers there, through `then`,
// with the Result<T> the Client's call of the same name returns. The calls share one state with
// client() (its ranks, endpoints, budget, deduplication window) and run the same retry loop
// (retry_loop.hpp: RetryLoop, drive_async). A rank the server forgot is restored by a call that
// blocks, on one of this client's own threads; the loop then goes on on the transport's thread.
// Arguments are viewed, not copied: they stay valid until `then` runs. `then` may run before the
// call returns when nothing is sent (the input refused).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "client/async_transport.hpp"
#include "client/client_impl.hpp"

namespace hf3fs_meta::internal {

class AsyncClient {
 public:
  template <class T>
  using Then = std::function<void(Result<T>)>;

  explicit AsyncClient(ClientOptions options, std::size_t restore_threads = 1)
      : impl_(std::make_shared<ClientImpl>(std::move(options))), client_(connection_over(impl_)),
        restores_(restore_threads) {}
  // Waits for the restores in flight.
  ~AsyncClient() { restores_.join(); }

  // The same calls, blocking.
  Client& client() { return client_; }

  // The ranks registered by ensure_initialized are no longer restored when the server says it
  // forgot them: for a caller that cleared them (a /clear or a drop it forwarded) on purpose.
  void forget_ranks() { impl_->ranks.clear(); }
  void forget_rank(Rank rank) { impl_->unregister_rank(rank); }

  void ensure_initialized(AsyncTransport& t, Rank rank, std::int64_t num_pages, Role role, const CallOptions& call,
                          Then<std::string> then) {
    start(t, impl_->prepare_ensure_initialized(rank, num_pages, role, call), std::move(then));
  }
  void allocate(AsyncTransport& t, Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call,
                Then<std::vector<Page>> then) {
    start(t, impl_->prepare_allocate(rank, keys, call), std::move(then));
  }
  void confirm_write(AsyncTransport& t, Rank rank, const std::vector<Confirmation>& confirmations,
                     const std::vector<Page>& pages_to_release, const CallOptions& call, Then<void> then) {
    start(t, impl_->prepare_confirm_write(rank, confirmations, pages_to_release, call), std::move(then));
  }
  void batch_exists(AsyncTransport& t, const std::vector<std::string>& keys, const CallOptions& call,
                    Then<std::vector<bool>> then) {
    start(t, impl_->prepare_batch_exists(keys, call), std::move(then));
  }
  void get_locations(AsyncTransport& t, Rank rank, const std::vector<std::string>& keys, const CallOptions& call,
                     Then<std::vector<std::optional<Page>>> then) {
    start(t, impl_->prepare_get_locations(rank, keys, call), std::move(then));
  }
  void delete_keys(AsyncTransport& t, const std::vector<std::string>& keys, const CallOptions& call,
                   Then<std::vector<bool>> then) {
    start(t, impl_->prepare_delete_keys(keys, call), std::move(then));
  }
  void stats(AsyncTransport& t, const CallOptions& call, Then<StateStats> then) {
    start(t, impl_->prepare_stats(call), std::move(then));
  }
  void clear(AsyncTransport& t, const CallOptions& call, Then<void> then) {
    start(t, impl_->prepare_clear(call), std::move(then));
  }
  void drop_rank(AsyncTransport& t, Rank rank, const CallOptions& call, Then<DropOutcome> then) {
    start(t, impl_->prepare_drop_rank(rank, call), std::move(then));
  }
  void raw(AsyncTransport& t, std::string_view path, std::string_view body, const CallOptions& call,
           Then<RawResponse> then) {
    start(t, impl_->prepare_raw(path, body, call), std::move(then));
  }
  void namespaces(AsyncTransport& t, const CallOptions& call, Then<std::vector<NamespaceSummary>> then) {
    start(t, impl_->prepare_namespaces(call), std::move(then));
  }
  void drop_namespace(AsyncTransport& t, std::string_view name, const CallOptions& call,
                      Then<NamespaceDropOutcome> then) {
    start(t, impl_->prepare_drop_namespace(name, call), std::move(then));
  }
  void key_status(AsyncTransport& t, const std::vector<std::string>& keys, const CallOptions& call,
                  Then<KeyStatusAnswer> then) {
    start(t, impl_->prepare_key_status(keys, call), std::move(then));
  }

 private:
  template <class T>
  void start(AsyncTransport& t, Prepared<T> p, Then<T> then) {
    AsyncCall<T>::start(impl_, std::move(p), t, restores_, std::move(then));
  }

  std::shared_ptr<ClientImpl> impl_;
  Client client_;
  boost::asio::thread_pool restores_;
};

}  // namespace hf3fs_meta::internal
