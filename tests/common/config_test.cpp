#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "common/config.h"

using namespace moerl;

namespace {

std::string write_temp(const std::string& body) {
  char name[] = "/tmp/moerl-config-XXXXXX.yaml";
  int fd = mkstemps(name, 5);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(name) << body;
  return name;
}

}  // namespace

TEST(config, every_key_is_section_dot_name_declared_once_with_a_meaning) {
  std::set<std::string> seen;
  for (const auto& k : config_schema()) {
    const std::string key = k.key;
    EXPECT_EQ(std::count(key.begin(), key.end(), '.'), 1) << key;
    EXPECT_TRUE(seen.insert(key).second) << "declared twice: " << key;
    EXPECT_GT(std::string(k.meaning).size(), 8u) << key;
    // The default must itself be valid.
    config c = config::defaults();
    EXPECT_TRUE(c.set(key, k.default_value, "default").ok()) << key;
  }
}

TEST(config, file_values_and_overrides_apply_in_order) {
  auto path = write_temp("log:\n  level: debug\nfabric:\n  op_timeout_ms: 250\n");
  auto cfg = config::load(path, {"fabric.op_timeout_ms=500"});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  EXPECT_EQ(cfg->get_string("log.level"), "debug");
  EXPECT_EQ(cfg->get_int("fabric.op_timeout_ms"), 500);
  std::remove(path.c_str());
}

TEST(config, unknown_key_is_an_error_naming_file_line_and_key) {
  auto path = write_temp("log:\n  level: info\nfabric:\n  provder: shm\n");
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.err().code, errc::invalid_config);
  EXPECT_NE(cfg.err().message.find(path + ":4"), std::string::npos) << cfg.err().message;
  EXPECT_NE(cfg.err().message.find("fabric.provder"), std::string::npos) << cfg.err().message;
  std::remove(path.c_str());
}

TEST(config, unknown_section_and_wrong_type_and_bad_choice_are_errors) {
  auto p1 = write_temp("nosuch:\n  x: 1\n");
  EXPECT_NE(config::load(p1, {}).err().message.find("unknown section"), std::string::npos);
  auto p2 = write_temp("fabric:\n  op_timeout_ms: soon\n");
  auto e2 = config::load(p2, {}).err().message;
  EXPECT_NE(e2.find(p2 + ":2"), std::string::npos) << e2;
  EXPECT_NE(e2.find("expected integer"), std::string::npos) << e2;
  auto p3 = write_temp("fabric:\n  provider: carrier-pigeon\n");
  EXPECT_NE(config::load(p3, {}).err().message.find("not one of"), std::string::npos);
  for (auto* p : {&p1, &p2, &p3}) std::remove(p->c_str());
}

TEST(config, yaml_syntax_error_names_the_line) {
  auto path = write_temp("log:\n  level: [unclosed\n");
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.err().message.find("YAML syntax error"), std::string::npos) << cfg.err().message;
  std::remove(path.c_str());
}

TEST(config, malformed_override_and_missing_file_are_errors) {
  EXPECT_FALSE(config::load("", {"novalue"}).ok());
  EXPECT_FALSE(config::load("", {"no.such=1"}).ok());
  auto missing = config::load("/nonexistent/moerl.yaml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("cannot open"), std::string::npos);
}

TEST(config, effective_config_renders_as_yaml_that_loads_back_identically) {
  auto cfg = config::load("", {"fabric.op_timeout_ms=1234"});
  ASSERT_TRUE(cfg.ok());
  auto path = write_temp(cfg->to_yaml());
  auto back = config::load(path, {});
  ASSERT_TRUE(back.ok()) << back.err().to_string();
  EXPECT_EQ(back->values(), cfg->values());
  std::remove(path.c_str());
}

// Secrets come from mounted files (deploy/overlays/efa-spot): K_file replaces K with the
// file's first line; an unreadable or empty file is refused naming the key and the file.
TEST(config, secret_files_replace_their_keys) {
  auto secret = write_temp("s3cr3t-operator  \nsecond line ignored\n");
  auto cfg = config::load("", {"console.operator_token_file=" + secret});
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  EXPECT_EQ(cfg->get_string("console.operator_token"), "s3cr3t-operator");
  EXPECT_EQ(cfg->get_string("console.viewer_token"), "moerl-viewer") << "untouched";

  auto missing = config::load("", {"console.token_file=/nonexistent/moerl-token"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err().code, errc::invalid_config);
  EXPECT_NE(missing.err().message.find("console.token_file: cannot read /nonexistent/moerl-token"),
            std::string::npos)
      << missing.err().message;

  auto empty = write_temp("\n");
  auto e = config::load("", {"console.viewer_token_file=" + empty});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.err().message.find("console.viewer_token_file: " + empty + " is empty"),
            std::string::npos)
      << e.err().message;
  std::remove(secret.c_str());
  std::remove(empty.c_str());
}
