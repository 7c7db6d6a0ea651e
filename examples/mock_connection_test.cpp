// How to unit-test your own worker code without a server: give its Client a MockConnection
// (<hf3fs_meta/mocks/mock_connection.hpp>, installed with the package; link GTest::gmock_main).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/outcome/try.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/mocks/mock_connection.hpp"

namespace {

using hf3fs_meta::BlockKey;
using hf3fs_meta::CallOptions;
using hf3fs_meta::Client;
using hf3fs_meta::Confirmation;
using hf3fs_meta::Page;
using hf3fs_meta::Rank;
using hf3fs_meta::Result;
using ::testing::_;
using ::testing::ElementsAre;
using ::testing::Return;

// ---- The code under test: what a worker might write ----

// Allocates a page per block, writes each block that got one, confirms those written and gives back
// the page of each write that failed. Returns how many blocks were stored.
Result<std::size_t> store_blocks(Client& client, Rank rank, const std::vector<BlockKey>& blocks,
                                 const std::function<bool(const BlockKey&, Page)>& write) {
  BOOST_OUTCOME_TRY(auto pages, client.allocate(rank, blocks));
  std::vector<Confirmation> written;
  std::vector<Page> failed;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (pages[i] == hf3fs_meta::kNoPage) continue;
    if (write(blocks[i], pages[i])) {
      written.push_back(Confirmation{blocks[i].key, pages[i]});
    } else {
      failed.push_back(pages[i]);
    }
  }
  if (written.empty() && failed.empty()) return std::size_t{0};
  BOOST_OUTCOME_TRY(client.confirm_write(rank, written, failed));
  return written.size();
}

// ---- Its tests ----

TEST(StoreBlocksTest, ConfirmsTheWrittenAndReleasesTheFailed) {
  auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
  EXPECT_CALL(*mock, allocate(3, ElementsAre(BlockKey("a"), BlockKey("b"), BlockKey("c")), _))
      .WillOnce(Return(std::vector<Page>{4, hf3fs_meta::kNoPage, 6}));
  EXPECT_CALL(*mock, confirm_write(3, ElementsAre(Confirmation{"a", 4}), ElementsAre(6), _))
      .WillOnce(Return(boost::outcome_v2::success()));
  Client client(mock);

  auto stored = store_blocks(client, 3, {"a", "b", "c"}, [](const BlockKey& b, Page) { return b.key != "c"; });
  ASSERT_TRUE(stored) << stored.error().message();
  EXPECT_EQ(stored.value(), 1u);
}

TEST(StoreBlocksTest, AnAllocateErrorIsReturnedAndNothingIsConfirmed) {
  auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
  hf3fs_meta::Error unavailable;
  unavailable.code = hf3fs_meta::errc::unavailable;
  unavailable.status = 503;
  EXPECT_CALL(*mock, allocate).WillOnce(Return(unavailable));
  EXPECT_CALL(*mock, confirm_write).Times(0);
  Client client(mock);

  auto stored = store_blocks(client, 3, {"a"}, [](const BlockKey&, Page) { return true; });
  ASSERT_FALSE(stored);
  EXPECT_EQ(stored.error().code, hf3fs_meta::errc::unavailable);
}

TEST(StoreBlocksTest, ACallNobodyExpectedFailsLoudlyInsteadOfCrashing) {
  // NiceMock: no warning for the unexpected call, and MockConnection's default answer is an error.
  auto mock = std::make_shared<::testing::NiceMock<hf3fs_meta_mocks::MockConnection>>();
  Client client(mock);
  auto stored = store_blocks(client, 3, {"a"}, [](const BlockKey&, Page) { return true; });
  ASSERT_FALSE(stored);
  EXPECT_THAT(stored.error().detail, ::testing::HasSubstr("MockConnection"));
}

}  // namespace
