// Route ids on disk are the route table's wire numbers, never a row's place: a data dir's request-id
// answers keep their routes whatever rows are added, moved or removed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "durable/crc32c.hpp"
#include "durable/data_dir.hpp"
#include "durable/log_writer.hpp"
#include "durable/record.hpp"
#include "durable/snapshot.hpp"
#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta::durable {
namespace {

using ::testing::HasSubstr;

// Pinned: every file ever written holds these. They are the rows' places in bad7982's kRoutes (the
// positions format versions 1-4 were specified to write), so those files read unchanged. A change
// here changes what existing data dirs mean: give a new row a new number instead.
const std::vector<std::pair<Route, int>> kPinned = {
    {Route::initialize, 0},   {Route::batch_allocate, 1}, {Route::confirm_write, 2},
    {Route::batch_exists, 3}, {Route::get_locations, 4},  {Route::clear, 5},
    {Route::delete_keys, 6},  {Route::stats, 7},          {Route::drop_rank, 8},
    {Route::redirect, 9},     {Route::method_not_allowed, 10}, {Route::not_found, 11},
    // Namespaces: rows inserted before `redirect`, numbered after the routing outcomes.
    {Route::namespaces, 12},  {Route::drop_namespace, 13}, {Route::key_status, 14},
};

TEST(RouteWireNumbers, NoRowsNumberChanges) {
  ASSERT_EQ(kPinned.size(), kRouteCount) << "a row without a pinned number: pin the new row's number here";
  for (const auto& [route, number] : kPinned) {
    EXPECT_EQ(wire_number(route), number) << to_string(route);
  }
}

TEST(RouteWireNumbers, NoTwoRowsShareOne) {
  std::map<int, std::string_view> seen;
  for (const RouteInfo& row : kRoutes) {
    const auto [at, fresh] = seen.emplace(row.wire, row.name);
    EXPECT_TRUE(fresh) << row.name << " and " << at->second << " share wire number " << int{row.wire};
    // Each number names its own row back.
    ASSERT_TRUE(route_of_wire(row.wire).has_value()) << row.name;
    EXPECT_EQ(*route_of_wire(row.wire), row.route) << row.name;
  }
  EXPECT_FALSE(route_of_wire(200).has_value());
}

Change allocate_change() {
  static const AllocatedItem items[] = {{"x", 0, 0}};
  Change change;
  change.kind = ChangeKind::allocated;
  change.seq = 1;
  change.allocated = items;
  return change;
}

// The tag's route byte follows the kind and the flags (record.hpp).
constexpr std::size_t kRouteByte = 2;

TEST(RouteWireNumbers, AJournalRecordHoldsTheWireNumberAndANumberNoRowHasIsRefused) {
  const DedupTag tag{Route::confirm_write, "req", 1, 2};
  std::string payload;
  encode_payload(allocate_change(), &tag, payload);
  ASSERT_GT(payload.size(), kRouteByte);
  EXPECT_EQ(static_cast<unsigned char>(payload[kRouteByte]), route_info(Route::confirm_write).wire);
  const auto record = Record::decode(1, payload);
  ASSERT_TRUE(record) << record.error().message;
  EXPECT_EQ(record.value().tag()->route, Route::confirm_write);

  payload[kRouteByte] = static_cast<char>(200);
  const auto refused = Record::decode(1, payload);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::unsupported);
  EXPECT_EQ(refused.error().message, "record 1: unknown route 200 (written by a newer server?)");
}

TEST(RouteWireNumbers, ASnapshotHoldsTheWireNumberAndANumberNoRowHasIsRefused) {
  std::string body;
  put_u64(body, 0);  // seq
  put_u32(body, 0);  // ranks
  put_u64(body, 0);  // keys
  put_u32(body, 0);  // free ids
  put_u8(body, 0);   // the lifecycle's section: no clock, no draining ids, timed pages or keys
  put_u64(body, 0);
  for (int i = 0; i < 3; ++i) put_u32(body, 0);
  put_u32(body, 1);  // one request-id answer
  put_u64(body, 7);
  const std::size_t route_at = body.size();
  put_u8(body, route_info(Route::batch_allocate).wire);
  put_bytes(body, "req");
  put_u64(body, 11);
  put_u64(body, 22);
  put_u32(body, 204);
  put_u64(body, 0);
  put_u32(body, 0);
  put_bytes(body, journal_name(1));
  auto file_of = [](const std::string& b) {
    std::string file = file_header(kSnapshotMagic, kSnapshotDedupVersion) + b;
    put_u32(file, crc32c(b));
    return file;
  };
  const auto loaded = read_snapshot("snapshot-x", file_of(body));
  ASSERT_TRUE(loaded.has_value()) << loaded.error().message;
  ASSERT_EQ(loaded.value().dedup.size(), 1u);
  EXPECT_EQ(loaded.value().dedup[0].tag, (DedupTag{Route::batch_allocate, "req", 11, 22}));

  body[route_at] = static_cast<char>(200);
  const auto refused = read_snapshot("snapshot-x", file_of(body));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, Errc::unsupported);
  EXPECT_THAT(refused.error().message, HasSubstr("snapshot-x at offset "));
  EXPECT_THAT(refused.error().message, HasSubstr("unknown route 200 of request-id entry 7"));
}

}  // namespace
}  // namespace hf3fs_meta::durable
