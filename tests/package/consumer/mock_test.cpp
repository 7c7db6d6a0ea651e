// A user's unit test built against the installed package: the installed MockConnection header,
// GoogleMock from the system, no server.
#include <memory>
#include <string_view>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hf3fs_meta/client.hpp>
#include <hf3fs_meta/mocks/mock_connection.hpp>

TEST(InstalledMockConnection, ServesAClient) {
  auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
  EXPECT_CALL(*mock, allocate(0, ::testing::ElementsAre(hf3fs_meta::BlockKey("block")), ::testing::_))
      .WillOnce(::testing::Return(std::vector<hf3fs_meta::Page>{5}));
  hf3fs_meta::Client client(mock);
  auto allocated = client.allocate(0, {"block"});
  ASSERT_TRUE(allocated);
  EXPECT_EQ(allocated.value(), std::vector<hf3fs_meta::Page>{5});
  EXPECT_FALSE(client.clear());  // nobody expected it: an error, not a crash
  // The namespace calls are mocked too, with the same default.
  EXPECT_CALL(*mock, drop_namespace(std::string_view("m1"), ::testing::_))
      .WillOnce(::testing::Return(hf3fs_meta::NamespaceDropOutcome{true, 2, 16, 5}));
  auto dropped = client.drop_namespace("m1");
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped.value().ranks, 2u);
  auto unset = client.key_status({"k"});
  ASSERT_FALSE(unset);
  EXPECT_EQ(unset.error().operation, hf3fs_meta::Operation::key_status);
  EXPECT_FALSE(client.namespaces());
}
