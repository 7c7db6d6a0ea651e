// Client: validate -> encode -> Transport::post -> classify -> retry / re-initialize -> Result<T>
// (client_impl.hpp; each call prepared in prepared_calls.cpp).
#include "hf3fs_meta/client.hpp"

#include <stdexcept>
#include <utility>

#include "client/client_impl.hpp"

namespace hf3fs_meta {

namespace {

using internal::ClientImpl;

class DefaultConnection final : public Connection {
 public:
  explicit DefaultConnection(std::shared_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}

  Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role, const CallOptions& call) override {
    return impl_->run(impl_->prepare_initialize(rank, num_pages, role, call));
  }
  Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                         const CallOptions& call) override {
    return impl_->run(impl_->prepare_ensure_initialized(rank, num_pages, role, call));
  }
  void register_rank(Rank rank, std::int64_t num_pages, Role role) override {
    // Checked when the rank is restored: the restore then fails with invalid_argument.
    impl_->register_rank(rank, num_pages, role);
  }
  Result<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call) override {
    return impl_->run(impl_->prepare_allocate(rank, keys, call));
  }
  Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                             const std::vector<Page>& pages_to_release, const CallOptions& call) override {
    return impl_->run(impl_->prepare_confirm_write(rank, confirmations, pages_to_release, call));
  }
  Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call) override {
    return impl_->run(impl_->prepare_batch_exists(keys, call));
  }
  Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                         const CallOptions& call) override {
    return impl_->run(impl_->prepare_get_locations(rank, keys, call));
  }
  Result<std::vector<bool>> delete_keys(const std::vector<std::string>& keys, const CallOptions& call) override {
    return impl_->run(impl_->prepare_delete_keys(keys, call));
  }
  Result<StateStats> stats(const CallOptions& call) override { return impl_->run(impl_->prepare_stats(call)); }
  Result<void> clear(const CallOptions& call) override { return impl_->run(impl_->prepare_clear(call)); }
  Result<DropOutcome> drop_rank(Rank rank, const CallOptions& call) override {
    return impl_->run(impl_->prepare_drop_rank(rank, call));
  }
  Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call) override {
    return impl_->run(impl_->prepare_raw(path, body, call));
  }
  Result<std::vector<NamespaceSummary>> namespaces(const CallOptions& call) override {
    return impl_->run(impl_->prepare_namespaces(call));
  }
  Result<NamespaceDropOutcome> drop_namespace(std::string_view name, const CallOptions& call) override {
    return impl_->run(impl_->prepare_drop_namespace(name, call));
  }
  Result<KeyStatusAnswer> key_status(const std::vector<std::string>& keys, const CallOptions& call) override {
    return impl_->run(impl_->prepare_key_status(keys, call));
  }

 private:
  std::shared_ptr<ClientImpl> impl_;
};

}  // namespace

std::vector<std::string> split_endpoints(std::string_view list) { return internal::split_endpoint_list(list); }

std::shared_ptr<Connection> make_connection(ClientOptions options) {
  return internal::connection_over(std::make_shared<internal::ClientImpl>(std::move(options)));
}

std::shared_ptr<Connection> internal::connection_over(std::shared_ptr<ClientImpl> impl) {
  return std::make_shared<DefaultConnection>(std::move(impl));
}

Client::Client(ClientOptions options) : connection_(make_connection(std::move(options))) {}
// Refused here rather than at the first call, which would dereference it.
Client::Client(std::shared_ptr<Connection> connection) : connection_(std::move(connection)) {
  if (!connection_) throw std::invalid_argument("hf3fs_meta::Client: the connection is null");
}

}  // namespace hf3fs_meta
