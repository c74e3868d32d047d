// Bytes in JSON views: UTF-8 stays text, anything else is base64 with its
// encoding named, and both forms read back to the same bytes.
#include <gtest/gtest.h>

#include "common/json_bytes.hpp"

using namespace dueq;

TEST(JsonBytes, Utf8IsRecognisedStrictly) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("plain ascii"));
  EXPECT_TRUE(is_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // 2, 3 and 4 bytes
  EXPECT_TRUE(is_utf8(std::string("nul\0inside", 10)));
  EXPECT_TRUE(is_utf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF
  EXPECT_FALSE(is_utf8("\xff"));
  EXPECT_FALSE(is_utf8("\x80"));              // a continuation byte alone
  EXPECT_FALSE(is_utf8("\xc3"));              // cut short
  EXPECT_FALSE(is_utf8("\xe2\x82"));          // cut short
  EXPECT_FALSE(is_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_utf8("\xe0\x80\xaf"));      // overlong, 3 bytes
  EXPECT_FALSE(is_utf8("\xf0\x80\x80\xaf"));  // overlong, 4 bytes
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));      // a surrogate, U+D800
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_utf8("\xc3\x28"));          // a lead byte without its continuation
}

TEST(JsonBytes, Base64IsRfc4648WithPadding) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe\x00", 3)), "//4A");
  EXPECT_EQ(base64_decode("Zm9vYg=="), "foob");
  EXPECT_EQ(base64_decode("Zm9vYmE="), "fooba");
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("Zg="), std::nullopt);     // not a multiple of 4
  EXPECT_EQ(base64_decode("Z==="), std::nullopt);    // three pads
  EXPECT_EQ(base64_decode("Zg==Zg=="), std::nullopt);  // padding inside
  EXPECT_EQ(base64_decode("Zm9v!A=="), std::nullopt);  // not in the alphabet
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(base64_decode(base64_encode(all)), all);
}

TEST(JsonBytes, ViewsCarryAnyBytesExactly) {
  EXPECT_EQ(bytes_json("text"), "text");
  const std::string bytes("\xff\xfe\x00ok", 5);
  const nlohmann::json value = bytes_json(bytes);
  EXPECT_EQ(value, (nlohmann::json{{"encoding", "base64"}, {"data", "//4Ab2s="}}));
  const std::string text = dump_json({{"payload", value}, {"name", bytes_json("ok")}});
  const auto parsed = nlohmann::json::parse(text);
  EXPECT_EQ(bytes_from_json(parsed["payload"]), bytes);
  EXPECT_EQ(bytes_from_json(parsed["name"]), "ok");
  EXPECT_EQ(bytes_from_json(nlohmann::json{{"encoding", "hex"}, {"data", "00"}}), std::nullopt);
  EXPECT_EQ(bytes_from_json(nlohmann::json(3)), std::nullopt);
  EXPECT_EQ(bytes_json(std::map<std::string, std::string>{{"p", bytes}, {"id", "j1"}}),
            (nlohmann::json{{"p", value}, {"id", "j1"}}));
}

TEST(JsonBytes, DumpNeverThrowsOnAKeyThatIsNotUtf8) {
  nlohmann::json bad = nlohmann::json::object();
  bad[std::string("k\xff")] = 1;
  EXPECT_NO_THROW((void)dump_json(bad));
  EXPECT_EQ(dump_json(bad), "{\"k\xef\xbf\xbd\":1}");
}
