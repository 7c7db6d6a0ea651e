// A GoogleMock Connection, so that a user's code that takes a hf3fs_meta::Client can be unit-tested
// without a server:
//
//   auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
//   EXPECT_CALL(*mock, allocate(3, ::testing::_, ::testing::_))
//       .WillOnce(::testing::Return(std::vector<hf3fs_meta::Page>{7}));
//   hf3fs_meta::Client client(mock);
//
// A call with no expectation returns an Error saying so.
//
// examples/mock_connection_test.cpp shows a whole test. Needs gmock (link GTest::gmock).
#pragma once

#include <gmock/gmock.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/connection.hpp"

namespace hf3fs_meta_mocks {

class MockConnection : public hf3fs_meta::Connection {
 public:
  // A call nobody set up returns an error that says so (gMock cannot make a Result by itself).
  MockConnection() {
    using ::testing::Return;
    ON_CALL(*this, initialize).WillByDefault(Return(unset("initialize", hf3fs_meta::Operation::initialize)));
    ON_CALL(*this, ensure_initialized).WillByDefault(Return(unset("ensure_initialized", hf3fs_meta::Operation::initialize)));
    ON_CALL(*this, allocate).WillByDefault(Return(unset("allocate", hf3fs_meta::Operation::allocate)));
    ON_CALL(*this, confirm_write).WillByDefault(Return(unset("confirm_write", hf3fs_meta::Operation::confirm_write)));
    ON_CALL(*this, batch_exists).WillByDefault(Return(unset("batch_exists", hf3fs_meta::Operation::batch_exists)));
    ON_CALL(*this, get_locations).WillByDefault(Return(unset("get_locations", hf3fs_meta::Operation::get_locations)));
    ON_CALL(*this, delete_keys).WillByDefault(Return(unset("delete_keys", hf3fs_meta::Operation::delete_keys)));
    ON_CALL(*this, stats).WillByDefault(Return(unset("stats", hf3fs_meta::Operation::stats)));
    ON_CALL(*this, clear).WillByDefault(Return(unset("clear", hf3fs_meta::Operation::clear)));
    ON_CALL(*this, drop_rank).WillByDefault(Return(unset("drop_rank", hf3fs_meta::Operation::drop_rank)));
    ON_CALL(*this, raw).WillByDefault(Return(unset("raw", hf3fs_meta::Operation::raw)));
    ON_CALL(*this, namespaces).WillByDefault(Return(unset("namespaces", hf3fs_meta::Operation::namespaces)));
    ON_CALL(*this, drop_namespace)
        .WillByDefault(Return(unset("drop_namespace", hf3fs_meta::Operation::drop_namespace)));
    ON_CALL(*this, key_status).WillByDefault(Return(unset("key_status", hf3fs_meta::Operation::key_status)));
  }

  MOCK_METHOD(hf3fs_meta::Result<std::string>, initialize,
              (hf3fs_meta::Rank rank, std::int64_t num_pages, hf3fs_meta::Role role,
               const hf3fs_meta::CallOptions& call),
              (override));
  MOCK_METHOD(hf3fs_meta::Result<std::string>, ensure_initialized,
              (hf3fs_meta::Rank rank, std::int64_t num_pages, hf3fs_meta::Role role,
               const hf3fs_meta::CallOptions& call),
              (override));
  MOCK_METHOD(void, register_rank, (hf3fs_meta::Rank rank, std::int64_t num_pages, hf3fs_meta::Role role),
              (override));
  MOCK_METHOD(hf3fs_meta::Result<std::vector<hf3fs_meta::Page>>, allocate,
              (hf3fs_meta::Rank rank, const std::vector<hf3fs_meta::BlockKey>& keys,
               const hf3fs_meta::CallOptions& call),
              (override));
  MOCK_METHOD(hf3fs_meta::Result<void>, confirm_write,
              (hf3fs_meta::Rank rank, const std::vector<hf3fs_meta::Confirmation>& confirmations,
               const std::vector<hf3fs_meta::Page>& pages_to_release, const hf3fs_meta::CallOptions& call),
              (override));
  MOCK_METHOD(hf3fs_meta::Result<std::vector<bool>>, batch_exists,
              (const std::vector<std::string>& keys, const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<std::vector<std::optional<hf3fs_meta::Page>>>, get_locations,
              (hf3fs_meta::Rank rank, const std::vector<std::string>& keys, const hf3fs_meta::CallOptions& call),
              (override));
  MOCK_METHOD(hf3fs_meta::Result<std::vector<bool>>, delete_keys,
              (const std::vector<std::string>& keys, const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<hf3fs_meta::StateStats>, stats, (const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<void>, clear, (const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<hf3fs_meta::DropOutcome>, drop_rank,
              (hf3fs_meta::Rank rank, const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<hf3fs_meta::RawResponse>, raw,
              (std::string_view path, std::string_view body, const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<std::vector<hf3fs_meta::NamespaceSummary>>, namespaces,
              (const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<hf3fs_meta::NamespaceDropOutcome>, drop_namespace,
              (std::string_view name, const hf3fs_meta::CallOptions& call), (override));
  MOCK_METHOD(hf3fs_meta::Result<hf3fs_meta::KeyStatusAnswer>, key_status,
              (const std::vector<std::string>& keys, const hf3fs_meta::CallOptions& call), (override));

 private:
  static hf3fs_meta::Error unset(const char* method, hf3fs_meta::Operation operation) {
    hf3fs_meta::Error e;
    e.code = hf3fs_meta::errc::server_error;
    e.operation = operation;
    e.detail = std::string("MockConnection::") + method + ": no expectation or default action was set";
    return e;
  }
};

}  // namespace hf3fs_meta_mocks
