// The protocol library's JSON internals: the writer (which cannot write past its buffer, whatever
// bound it is given), the one check of a body's text, and the one UTF-8 check.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "internal/json.hpp"
#include "internal/utf8.hpp"

namespace hf3fs_meta::internal {
namespace {

std::size_t utf8_length(std::string_view s) {
  return utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

// Bounds from nothing to exact: the output is the same, and (under ASan) no write passes the end.
TEST(JsonWriterTest, AnyBoundGivesTheSameTextWithinTheBuffer) {
  // (append, not operator+ on a temporary string: GCC 12 warns falsely on that, -Warray-bounds)
  const std::string escaped_input = std::string(40, '"').append("\x01\n").append(20, '\\');
  std::string want;
  for (std::size_t bound : {0, 1, 7, 64, 4096}) {
    std::string out = "prefix:";
    JsonWriter w(out, bound);
    w.raw("{\"k\":[");
    w.integer(-9223372036854775807 - 1);
    w.ch(',');
    w.string("caf\xC3\xA9");
    w.ch(',');
    w.string(escaped_input);
    for (int i = 0; i < 50; ++i) w.raw(",false");
    w.raw("]}");
    w.finish();
    if (want.empty()) want = out;
    EXPECT_EQ(out, want) << "bound " << bound;
  }
  EXPECT_TRUE(want.starts_with("prefix:{\"k\":[-9223372036854775808,\"caf\xC3\xA9\",\"\\\"\\\""));
  EXPECT_NE(want.find("\\u0001\\n\\\\\\\\"), std::string::npos);
  EXPECT_TRUE(want.ends_with(",false]}"));
}

TEST(JsonWriterTest, EscapesAsPythonJsonDumps) {
  std::string out;
  append_json_string(out, std::string("a\"b\\c\b\f\n\r\t\x1f\x7f\xC3\xA9", 14));
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u001f\x7f\xC3\xA9\"");
  // Runs longer than one 16-byte block, escapes at and across block edges.
  const std::string long_run = std::string(15, 'x').append("\"").append(16, 'y').append("\n");
  out.clear();
  append_json_string(out, long_run);
  EXPECT_EQ(out, "\"" + std::string(15, 'x') + "\\\"" + std::string(16, 'y') + "\\n\"");
}

TEST(JsonTextTest, ControlBytesOtherThanTabLfCrAreRefused) {
  for (int byte = 0; byte < 0x20; ++byte) {
    for (std::size_t offset : {0, 7, 8, 9, 16, 33}) {
      const std::string text = std::string(offset, ' ') + static_cast<char>(byte) + "{}";
      const std::string error = check_json_text(text);
      if (byte == '\t' || byte == '\n' || byte == '\r') {
        EXPECT_EQ(error, "") << byte;
      } else if (byte == 0) {
        EXPECT_EQ(error, "NUL byte at offset " + std::to_string(offset));
      } else {
        EXPECT_EQ(error, "control character at offset " + std::to_string(offset)) << byte;
      }
    }
  }
  EXPECT_EQ(check_json_text(""), "");
  EXPECT_EQ(check_json_text(std::string_view()), "");
  EXPECT_EQ(check_json_text("{\"k\":\"caf\xC3\xA9 \xF0\x9F\x98\x80 \x7f\"}"), "");
}

TEST(JsonTextTest, InvalidUtf8IsRefusedWithItsOffset) {
  EXPECT_EQ(check_json_text("\"0123456789\xC3\""), "invalid UTF-8 at offset 11");
  EXPECT_EQ(check_json_text("\"\xED\xA0\x80\""), "invalid UTF-8 at offset 1");      // a surrogate
  EXPECT_EQ(check_json_text("[\"\xC0\xAF\"]"), "invalid UTF-8 at offset 2");         // overlong
  EXPECT_EQ(check_json_text("\"\xF4\x90\x80\x80\""), "invalid UTF-8 at offset 1");  // above U+10FFFF
  EXPECT_EQ(check_json_text("\"\xE2\x82\""), "invalid UTF-8 at offset 1");          // cut short
}

TEST(Utf8Test, SequenceLengths) {
  EXPECT_EQ(utf8_length("a"), 1u);
  EXPECT_EQ(utf8_length("\xC3\xA9"), 2u);
  EXPECT_EQ(utf8_length("\xE2\x82\xAC"), 3u);
  EXPECT_EQ(utf8_length("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(utf8_length("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
  EXPECT_EQ(utf8_length("\xEF\xBF\xBD"), 3u);      // U+FFFD
  for (std::string_view bad : {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xF0\x8F\xBF\xBF",
                               "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xC3", "\xE2\x82", "\xE2\x28\xA1"}) {
    EXPECT_EQ(utf8_length(bad), 0u) << testing::PrintToString(bad);
  }
}

}  // namespace
}  // namespace hf3fs_meta::internal
