// The error vocabulary: stable code names, the category, Error::message(), and Result<T>::value()
// throwing std::system_error with our code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <system_error>

#include "hf3fs_meta/error.hpp"

namespace hf3fs_meta {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr std::pair<errc, std::string_view> kNames[] = {
    {errc::invalid_argument, "invalid_argument"},
    {errc::invalid_request, "invalid_request"},
    {errc::invalid_initialization, "invalid_initialization"},
    {errc::rank_not_initialized, "rank_not_initialized"},
    {errc::allocation_failed, "allocation_failed"},
    {errc::confirmation_failed, "confirmation_failed"},
    {errc::existence_check_failed, "existence_check_failed"},
    {errc::location_lookup_failed, "location_lookup_failed"},
    {errc::stale_allocation, "stale_allocation"},
    {errc::validation_error, "validation_error"},
    {errc::server_error, "server_error"},
    {errc::unavailable, "unavailable"},
    {errc::unexpected_status, "unexpected_status"},
    {errc::connection_failed, "connection_failed"},
    {errc::timeout, "timeout"},
    {errc::protocol_error, "protocol_error"},
};

TEST(ErrcTest, NamesAreTheEnumeratorNamesAndRoundTrip) {
  for (const auto& [code, name] : kNames) {
    EXPECT_EQ(to_string(code), name);
    EXPECT_EQ(errc_from_string(name), code) << name;
  }
  EXPECT_EQ(errc_from_string("no_such_code"), std::nullopt);
  EXPECT_EQ(errc_from_string(""), std::nullopt);
  EXPECT_EQ(errc_from_string("Timeout"), std::nullopt);
}

TEST(ErrcTest, CategoryNameAndMessages) {
  EXPECT_STREQ(error_category().name(), "hf3fs_meta");
  std::set<std::string> messages;
  for (const auto& [code, name] : kNames) {
    const std::error_code ec = make_error_code(code);
    EXPECT_EQ(&ec.category(), &error_category());
    EXPECT_EQ(ec.value(), static_cast<int>(code));
    EXPECT_FALSE(ec.message().empty()) << name;
    messages.insert(ec.message());
  }
  EXPECT_EQ(messages.size(), std::size(kNames)) << "each code has its own message";
  EXPECT_THAT(error_category().message(999), HasSubstr("999"));
}

TEST(ErrcTest, ErrorCodesCompareWithErrc) {
  const std::error_code ec = errc::timeout;  // is_error_code_enum
  EXPECT_EQ(ec, errc::timeout);
  EXPECT_NE(ec, errc::unavailable);
  EXPECT_NE(ec, std::make_error_code(std::errc::timed_out));
}

TEST(OperationTest, Names) {
  EXPECT_EQ(to_string(Operation::initialize), "initialize");
  EXPECT_EQ(to_string(Operation::allocate), "allocate");
  EXPECT_EQ(to_string(Operation::confirm_write), "confirm_write");
  EXPECT_EQ(to_string(Operation::batch_exists), "batch_exists");
  EXPECT_EQ(to_string(Operation::get_locations), "get_locations");
  EXPECT_EQ(to_string(Operation::clear), "clear");
  EXPECT_EQ(to_string(Operation::raw), "raw");
}

Error rank_error() {
  Error e;
  e.code = errc::rank_not_initialized;
  e.operation = Operation::allocate;
  e.status = 500;
  e.detail = "Allocation failed: Rank 3 not initialized";
  e.cause = "Rank 3 not initialized";
  e.rank = 3;
  e.sent = true;
  e.attempts = 1;
  return e;
}

TEST(ErrorMessageTest, RankNotInitializedSaysWhatToDo) {
  const Error e = rank_error();
  EXPECT_THAT(e.message(),
              AllOf(StartsWith("rank 3 is not initialized on the server (Allocation failed: Rank 3 not "
                               "initialized); initialize it, or register it with ensure_initialized"),
                    HasSubstr("500")));
}

TEST(ErrorMessageTest, RankUnknownStillReadable) {
  Error e = rank_error();
  e.rank.reset();
  e.detail = "Allocation failed: Rank 99999999999999999999 not initialized";
  EXPECT_THAT(e.message(), AllOf(StartsWith("the rank is not initialized on the server"),
                                 HasSubstr("Rank 99999999999999999999 not initialized")));
}

TEST(ErrorMessageTest, ReinitializedSaysAllocateAgain) {
  Error e = rank_error();
  e.operation = Operation::confirm_write;
  e.detail = "Confirmation failed: 3";
  e.reinitialized = true;
  EXPECT_THAT(e.message(), AllOf(HasSubstr("rank 3 was re-initialized"), HasSubstr("lost state"),
                                 HasSubstr("allocate again"), HasSubstr("(Confirmation failed: 3)"),
                                 Not(HasSubstr("ensure_initialized"))));
}

TEST(ErrorMessageTest, StopReasonComposesTheLastError) {
  Error e;
  e.code = errc::unavailable;
  e.status = 503;
  e.detail = "Service Unavailable";
  e.stop_reason = "retry policy exhausted after 4 attempts in 0.4 s";
  EXPECT_THAT(e.message(),
              AllOf(HasSubstr("unavailable (Service Unavailable)"),
                    HasSubstr("; retry policy exhausted after 4 attempts in 0.4 s; last error: unavailable (503)")));
}

TEST(ErrorMessageTest, StopReasonWithoutAnAnswer) {
  Error e;
  e.code = errc::connection_failed;
  e.detail = "Connection refused";
  e.sent = false;
  e.stop_reason = "retry policy exhausted after 4 attempts in 0.2 s";
  EXPECT_THAT(e.message(), AllOf(HasSubstr("Connection refused"), HasSubstr("did not reach the server"),
                                 HasSubstr("last error: connection_failed (no answer)")));
}

TEST(ErrorMessageTest, TimeoutSaysWhetherSent) {
  Error e;
  e.code = errc::timeout;
  e.detail = "Operation timed out after 5000 ms";
  e.sent = true;
  EXPECT_THAT(e.message(), AllOf(HasSubstr("did not answer in time"), HasSubstr("Operation timed out after 5000 ms"),
                                 HasSubstr("may have reached the server")));
}

TEST(ErrorMessageTest, EveryCodeCarriesDetailAndStatus) {
  for (const auto& [code, name] : kNames) {
    Error e;
    e.code = code;
    e.status = 418;
    e.detail = "the server's own words";
    e.request_id = "req-42";
    const std::string text = e.message();
    EXPECT_THAT(text, HasSubstr("(the server's own words)")) << name;
    EXPECT_THAT(text, HasSubstr("418")) << name;
    EXPECT_THAT(text, HasSubstr("req-42")) << name;
  }
}

TEST(ErrorMessageTest, NoEmptyParenthesesWithoutDetail) {
  Error e;
  e.code = errc::server_error;
  e.status = 500;
  EXPECT_THAT(e.message(), AllOf(Not(HasSubstr("()")), HasSubstr("internal error"), HasSubstr("500")));
}

TEST(ErrorMessageTest, SpecificAdvicePerCode) {
  Error e;
  e.code = errc::invalid_initialization;
  e.status = 400;
  e.detail = "Invalid initialization parameters";
  EXPECT_THAT(e.message(), HasSubstr("num_pages"));
  e.code = errc::stale_allocation;
  e.status = 409;
  e.detail = "Confirmation failed: page 5 of key k is not allocated on rank 0";
  EXPECT_THAT(e.message(), AllOf(HasSubstr("allocate again"), HasSubstr("page 5 of key k")));
  e.code = errc::unexpected_status;
  e.status = 404;
  e.detail = "Not Found";
  EXPECT_THAT(e.message(), AllOf(HasSubstr("base URL"), HasSubstr("404")));
}

TEST(ErrorCodeHookTest, MakeErrorCodeOfError) {
  const Error e = rank_error();
  EXPECT_EQ(make_error_code(e), errc::rank_not_initialized);
  EXPECT_EQ(e.error_code(), errc::rank_not_initialized);
}

TEST(ResultTest, ValueOnAnErrorThrowsSystemErrorWithOurCode) {
  Result<int> r = rank_error();
  ASSERT_FALSE(r);
  try {
    (void)r.value();
    FAIL() << "value() did not throw";
  } catch (const std::system_error& ex) {
    EXPECT_EQ(ex.code(), errc::rank_not_initialized);
    EXPECT_EQ(&ex.code().category(), &error_category());
    EXPECT_THAT(ex.what(), HasSubstr("rank 3 is not initialized on the server"));
  }
}

TEST(ResultTest, VoidResultThrowsToo) {
  Error e;
  e.code = errc::stale_allocation;
  e.status = 409;
  Result<void> r = e;
  try {
    r.value();
    FAIL() << "value() did not throw";
  } catch (const std::system_error& ex) {
    EXPECT_EQ(ex.code(), errc::stale_allocation);
  }
}

TEST(ThrowHookTest, ThrowsWithMessage) {
  const Error e = rank_error();
  try {
    outcome_throw_as_system_error_with_payload(e);
  } catch (const std::system_error& ex) {
    EXPECT_EQ(ex.code(), errc::rank_not_initialized);
    EXPECT_THAT(ex.what(), HasSubstr(e.message()));
    return;
  }
  FAIL() << "did not throw";
}

}  // namespace
}  // namespace hf3fs_meta
