// A config file is vetted as text before YAML parses it: binary input is refused naming the
// offset and line of its first bad byte and never echoed, and an oversized file is refused
// before it is parsed.
#include <gtest/gtest.h>

#include <fstream>

#include "common/config.h"
#include "common/config_text.h"
#include "tests/support/temp_dir.h"

namespace moerl {
namespace {

bool printable_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7E) return false;
  return true;
}

TEST(config_text, a_binary_file_is_refused_by_offset_and_line_without_echoing_its_bytes) {
  testing::temp_dir dir("config-text");
  const std::string path = dir.path() + "/weights.bin";
  std::ofstream(path, std::ios::binary)
      << std::string("log:\n  level: info\n\x89PNG\r\n\x1a\n\0\0", 29);
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.err().code, errc::invalid_config);
  EXPECT_EQ(cfg.err().message, path +
                                   ":3: not YAML text: byte 0x89 at offset 19 is not valid UTF-8 "
                                   "(is this a config file?)");
  EXPECT_TRUE(printable_ascii(cfg.err().message)) << cfg.err().message;
}

TEST(config_text, a_control_character_is_refused_and_utf8_text_is_accepted) {
  testing::temp_dir dir("config-text");
  const std::string path = dir.path() + "/c.yaml";
  std::ofstream(path) << "log:\n  level: in\x01"
                         "fo\n";
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.err().message.find(":2: not YAML text: byte 0x01 at offset 16 is a control"),
            std::string::npos)
      << cfg.err().message;
  std::ofstream(path) << "# r\xc3\xa9glage\r\nlog:\r\n  level: info\r\n";
  EXPECT_TRUE(config::load(path, {}).ok());
}

TEST(config_text, a_file_above_the_size_limit_is_refused_before_parsing) {
  testing::temp_dir dir("config-text");
  const std::string path = dir.path() + "/huge.yaml";
  {
    std::ofstream out(path);
    std::string line = "nosuch:\n";
    for (size_t n = 0; n <= kMaxConfigFileBytes; n += line.size()) out << line;
  }
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.err().message.find("larger than " + std::to_string(kMaxConfigFileBytes)),
            std::string::npos)
      << cfg.err().message;
}

TEST(config_text, errors_echo_keys_and_values_printable_and_short) {
  EXPECT_EQ(printable_excerpt("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(printable_excerpt(std::string("a\0\x1b[31m\xff", 8)), "a\\x00\\x1B[31m\\xFF");
  EXPECT_EQ(printable_excerpt(std::string(200, 'x')), std::string(80, 'x') + "...");
  auto cfg = config::load("", {"fabric.op_timeout_ms=\x1b[2J" + std::string(500, '9')});
  ASSERT_FALSE(cfg.ok());
  EXPECT_TRUE(printable_ascii(cfg.err().message)) << cfg.err().message;
  EXPECT_LT(cfg.err().message.size(), 200u);
  auto key = config::load("", {"fabric.\x07"
                               "bell=1"});
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.err().message.find("fabric.\\x07bell"), std::string::npos) << key.err().message;
}

}  // namespace
}  // namespace moerl
