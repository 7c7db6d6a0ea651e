// The checks before sending (src/client/validation.hpp) on their own: each refusal is
// invalid_argument, marked not sent, for the right operation, and names the field and index of the
// first thing wrong. Both ways of finding a repeat are covered: pairwise for short batches, a hash
// map past 16 items (and past 256 confirmation x release pairs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "client/validation.hpp"

namespace hf3fs_meta::internal {
namespace {

// A refusal of `operation` whose detail is exactly `detail`.
void expect_refused(const std::optional<Error>& e, Operation operation, const std::string& detail) {
  ASSERT_TRUE(e.has_value()) << "expected a refusal: " << detail;
  EXPECT_EQ(e->code, errc::invalid_argument);
  EXPECT_EQ(e->operation, operation);
  EXPECT_FALSE(e->sent);
  EXPECT_EQ(e->detail, detail);
}

// "k<i>", built in steps: GCC 12 warns falsely (-Wrestrict) on "k" + std::to_string(i).
std::string key_named(std::size_t i) {
  std::string key = "k";
  key += std::to_string(i);
  return key;
}

std::vector<BlockKey> numbered_keys(std::size_t n) {
  std::vector<BlockKey> keys;
  for (std::size_t i = 0; i < n; ++i) keys.emplace_back(key_named(i));
  return keys;
}

std::vector<Confirmation> numbered_confirmations(std::size_t n) {
  std::vector<Confirmation> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back({key_named(i), static_cast<Page>(i)});
  return out;
}

TEST(ValidationTest, InitializeNeedsPagesForAWorkerOnly) {
  EXPECT_FALSE(check_initialize(3, 8, Role::worker).has_value());
  EXPECT_FALSE(check_initialize(3, 0, Role::scheduler).has_value());
  expect_refused(check_initialize(3, 0, Role::worker), Operation::initialize,
                 "num_pages: must be positive for a worker, got 0");
  expect_refused(check_initialize(3, -5, Role::worker), Operation::initialize,
                 "num_pages: must be positive for a worker, got -5");
}

TEST(ValidationTest, AllocateRefusesAnEmptyKeyNamingItsIndex) {
  EXPECT_FALSE(check_allocate({"a", "b"}).has_value());
  EXPECT_FALSE(check_allocate({}).has_value());
  expect_refused(check_allocate({"a", "", ""}), Operation::allocate, "keys[1]: empty key");
}

TEST(ValidationTest, AllocateRefusesARepeatedKeyNamingBothIndexes) {
  expect_refused(check_allocate({"a", "b", "a"}), Operation::allocate, "keys[2]: duplicate key 'a' (also keys[0])");
  // The prefix key does not make a repeated key distinct: the server keys pages by key alone.
  expect_refused(check_allocate({BlockKey("a", "p"), BlockKey("a", "q")}), Operation::allocate,
                 "keys[1]: duplicate key 'a' (also keys[0])");
}

TEST(ValidationTest, ALongBatchFindsTheFirstRepeatLikeAShortOne) {
  auto keys = numbered_keys(100);  // past the pairwise limit: the hash map path
  EXPECT_FALSE(check_allocate(keys).has_value());
  keys[70] = BlockKey("k12");
  keys[90] = BlockKey("k3");
  expect_refused(check_allocate(keys), Operation::allocate, "keys[70]: duplicate key 'k12' (also keys[12])");
}

TEST(ValidationTest, LookupsAllowRepeatsButNotEmptyKeys) {
  EXPECT_FALSE(check_lookup(Operation::batch_exists, {"a", "a"}).has_value());
  expect_refused(check_lookup(Operation::get_locations, {"a", ""}), Operation::get_locations, "keys[1]: empty key");
  expect_refused(check_lookup(Operation::batch_exists, {""}), Operation::batch_exists, "keys[0]: empty key");
}

TEST(ValidationTest, ConfirmRefusesNegativeRepeatedOrSharedPages) {
  EXPECT_FALSE(check_confirm_write({{"a", 0}, {"b", 1}}, {2, 3}).has_value());
  EXPECT_FALSE(check_confirm_write({}, {}).has_value());
  constexpr auto op = Operation::confirm_write;
  expect_refused(check_confirm_write({{"a", 0}, {"b", -1}}, {}), op, "confirmations[1]: negative page -1");
  expect_refused(check_confirm_write({{"a", 0}, {"", 1}}, {}), op, "confirmations[1]: empty key");
  expect_refused(check_confirm_write({{"a", 0}, {"a", 1}}, {}), op,
                 "confirmations[1]: duplicate key 'a' (also confirmations[0])");
  expect_refused(check_confirm_write({{"a", 4}, {"b", 4}}, {}), op,
                 "confirmations[1]: page 4 of key 'b' is also named by key 'a' (confirmations[0])");
  expect_refused(check_confirm_write({}, {1, -2}), op, "pages_to_release[1]: negative page -2");
  expect_refused(check_confirm_write({}, {1, 2, 1}), op, "pages_to_release[2]: duplicate page 1 (also pages_to_release[0])");
  expect_refused(check_confirm_write({{"a", 0}, {"b", 7}}, {5, 7}), op,
                 "pages_to_release[1]: page 7 is also confirmed for key 'b' (confirmations[1])");
}

TEST(ValidationTest, ConfirmChecksLongBatchesTheSameWay) {
  // 20 x 20 = 400 pairs: past the pairwise limit for confirmations against releases.
  auto confirmations = numbered_confirmations(20);
  std::vector<Page> releases;
  for (Page p = 100; p < 120; ++p) releases.push_back(p);
  EXPECT_FALSE(check_confirm_write(confirmations, releases).has_value());

  releases[15] = 17;
  expect_refused(check_confirm_write(confirmations, releases), Operation::confirm_write,
                 "pages_to_release[15]: page 17 is also confirmed for key 'k17' (confirmations[17])");

  releases[15] = 115;
  confirmations[18].page = 2;
  expect_refused(check_confirm_write(confirmations, releases), Operation::confirm_write,
                 "confirmations[18]: page 2 of key 'k18' is also named by key 'k2' (confirmations[2])");

  confirmations[18].page = 18;
  releases[19] = 101;
  expect_refused(check_confirm_write(confirmations, releases), Operation::confirm_write,
                 "pages_to_release[19]: duplicate page 101 (also pages_to_release[1])");
}

TEST(ValidationTest, TheFirstProblemInCheckingOrderIsNamed) {
  // A negative page is reported before an empty key that comes earlier: pages are checked first.
  expect_refused(check_confirm_write({{"", 0}, {"b", -3}}, {}), Operation::confirm_write,
                 "confirmations[1]: negative page -3");
  // Confirmations are checked before releases.
  expect_refused(check_confirm_write({{"a", 0}, {"a", 1}}, {-1}), Operation::confirm_write,
                 "confirmations[1]: duplicate key 'a' (also confirmations[0])");
}

// A namespace name to send in a path (drop_namespace) follows namespace_problem's rule,
// named "name"; its bad byte is located, never echoed.
TEST(ValidationTest, NamespaceNamesFollowTheHeadersRule) {
  EXPECT_EQ(check_namespace_name(Operation::drop_namespace, "m1"), std::nullopt);
  EXPECT_EQ(check_namespace_name(Operation::drop_namespace, "A-z_0.9"), std::nullopt);
  EXPECT_EQ(check_namespace_name(Operation::drop_namespace, std::string(64, 'n')), std::nullopt);
  const std::string rule = ": a namespace name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'";
  expect_refused(check_namespace_name(Operation::drop_namespace, ""), Operation::drop_namespace,
                 "name is empty" + rule);
  expect_refused(check_namespace_name(Operation::drop_namespace, std::string(65, 'n')), Operation::drop_namespace,
                 "name is 65 bytes" + rule);
  expect_refused(check_namespace_name(Operation::drop_namespace, "m1/../x"), Operation::drop_namespace,
                 "name has byte 0x2F at offset 2" + rule);
  expect_refused(check_namespace_name(Operation::drop_namespace, std::string("a\0b", 3)), Operation::drop_namespace,
                 "name has byte 0x00 at offset 1" + rule);
}

}  // namespace
}  // namespace hf3fs_meta::internal
