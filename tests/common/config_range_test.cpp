// Generated from the schema: every declared range and every rule between keys is checked at
// both ends, through a config file (the error names file, line and key) and through --set, so
// a range added to config_schema.cpp is tested without writing a test for it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "common/config.h"
#include "tests/support/temp_dir.h"

namespace moerl {
namespace {

// A value as the config would be given it: integers exactly, numbers round-tripping.
std::string text_of(double v, key_type t) {
  if (t == key_type::integer) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "section:\n  name: value\n": the key on line 2.
std::string yaml_for(const std::string& key, const std::string& value) {
  const auto dot = key.find('.');
  return key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + value + "\n";
}

// How far inside an exclusive bound of a number key a value is taken to be accepted: small,
// but a normal double (config refuses denormals as underflow).
constexpr double kInside = 1e-6;

struct boundary {
  double value;
  bool accepted;
};

// The values at and just past each finite end of the range.
std::vector<boundary> boundaries(const key_range& r, key_type t) {
  std::vector<boundary> out;
  const double step = 1;  // out by one; numbers step in by kInside
  if (std::isfinite(r.min)) {
    out.push_back({r.min - step, false});
    if (r.min_exclusive) {
      out.push_back({r.min, false});
      out.push_back({t == key_type::integer ? r.min + 1 : r.min + kInside, true});
    } else {
      out.push_back({r.min, true});
    }
  }
  if (std::isfinite(r.max)) {
    out.push_back({r.max + step, false});
    if (r.max_exclusive) {
      out.push_back({r.max, false});
      out.push_back({t == key_type::integer ? r.max - 1 : r.max - kInside, true});
    } else {
      out.push_back({r.max, true});
    }
  }
  return out;
}

TEST(config_range, every_bounded_key_refuses_just_outside_and_accepts_its_ends) {
  testing::temp_dir dir("config-range");
  const std::string path = dir.path() + "/c.yaml";
  size_t num_checked = 0;
  for (const auto& k : config_schema()) {
    if (!k.range.bounded()) continue;
    ASSERT_TRUE(k.type == key_type::integer || k.type == key_type::number) << k.key;
    for (const auto& b : boundaries(k.range, k.type)) {
      const std::string v = text_of(b.value, k.type);
      SCOPED_TRACE(std::string(k.key) + " = " + v);
      // set() checks the range alone; the rules between keys are load()'s.
      auto cfg = config::defaults();
      const status st = cfg.set(k.key, v, "test");
      EXPECT_EQ(st.ok(), b.accepted) << (st.ok() ? "" : st.err().message);
      if (b.accepted) continue;
      ++num_checked;
      EXPECT_EQ(st.err().code, errc::invalid_config);
      EXPECT_NE(st.err().message.find(std::string("key '") + k.key + "'"), std::string::npos)
          << st.err().message;
      EXPECT_NE(st.err().message.find("must be " + k.range.describe(k.type)), std::string::npos)
          << st.err().message;

      std::ofstream(path) << yaml_for(k.key, v);
      auto from_file = config::load(path, {});
      ASSERT_FALSE(from_file.ok());
      EXPECT_EQ(from_file.err().message.rfind(path + ":2: key '" + k.key + "'", 0), 0u)
          << from_file.err().message;
      auto from_set = config::load("", {std::string(k.key) + "=" + v});
      ASSERT_FALSE(from_set.ok());
      EXPECT_EQ(from_set.err().message.rfind(std::string("--set: key '") + k.key + "'", 0), 0u)
          << from_set.err().message;
    }
  }
  EXPECT_GT(num_checked, 50u);  // the schema declares ranges; an empty loop tests nothing
}

TEST(config_range, defaults_satisfy_every_rule_and_every_rule_names_declared_integer_keys) {
  EXPECT_TRUE(config::defaults().check_rules().ok());
  for (const auto& r : config_rules()) {
    const key_spec* k = find_key(r.key);
    ASSERT_NE(k, nullptr) << r.key;
    EXPECT_EQ(k->type, key_type::integer) << r.key;
    if (r.relation != key_relation::within) {
      const key_spec* o = find_key(r.other);
      ASSERT_NE(o, nullptr) << r.other;
      EXPECT_EQ(o->type, key_type::integer) << r.other;
    }
  }
}

// A value of `r.key` that breaks the rule while the other key keeps its default.
int64_t breaking_value(const key_rule& r, int64_t other) {
  switch (r.relation) {
    case key_relation::at_most: return other + 1;
    case key_relation::at_least: return other - 1;
    case key_relation::greater_than: return other;
    case key_relation::divides: return other + 1;
    case key_relation::within: return static_cast<int64_t>(r.range.max) + 1;
  }
  return 0;
}

// The overrides that make the rule apply ("job.kind=grpo"), or make it not apply.
std::vector<std::string> condition(const key_rule& r, bool applies) {
  const std::string when = r.when;
  if (when.empty()) return {};
  if (applies) return {when};
  const auto eq = when.find('=');
  const key_spec* k = find_key(when.substr(0, eq));
  std::string choices = k->choices;
  for (size_t pos = 0; pos <= choices.size();) {
    const auto bar = std::min(choices.find('|', pos), choices.size());
    const std::string choice = choices.substr(pos, bar - pos);
    if (choice != when.substr(eq + 1)) return {when.substr(0, eq) + "=" + choice};
    pos = bar + 1;
  }
  ADD_FAILURE() << "no other value of " << when;
  return {};
}

TEST(config_range, every_rule_refuses_a_breaking_value_naming_key_rule_and_origin) {
  std::set<std::string> constrained;  // keys of the rules seen so far
  for (const auto& r : config_rules()) {
    // The error names the first rule the value breaks, which is this one unless an earlier
    // rule constrains the same key (job.rollout_ep_ranks has two).
    const bool first_rule_of_key = constrained.insert(r.key).second;
    const auto defaults = config::defaults();
    const int64_t other = r.relation == key_relation::within ? 0 : defaults.get_int(r.other);
    const std::string bad = std::string(r.key) + "=" + std::to_string(breaking_value(r, other));
    SCOPED_TRACE(bad + " (" + describe_rule(r) + ")");
    auto overrides = condition(r, true);
    overrides.push_back(bad);
    auto cfg = config::load("", overrides);
    ASSERT_FALSE(cfg.ok());
    EXPECT_EQ(cfg.err().code, errc::invalid_config);
    const std::string& msg = cfg.err().message;
    EXPECT_EQ(msg.rfind(std::string("--set: key '") + r.key + "'", 0), 0u) << msg;
    if (first_rule_of_key && r.relation != key_relation::within) {
      EXPECT_NE(msg.find(r.other), std::string::npos) << msg;
    }
    if (*r.when) {
      auto elsewhere = condition(r, false);
      elsewhere.push_back(bad);
      auto other_kind = config::load("", elsewhere);
      EXPECT_TRUE(other_kind.ok()) << other_kind.err().message;
    }
  }
}

TEST(config_range, a_rule_broken_by_the_other_key_names_that_keys_line) {
  testing::temp_dir dir("config-rule");
  const std::string path = dir.path() + "/c.yaml";
  std::ofstream(path) << "log:\n  level: info\nledger:\n  max_groups_per_unit: 1\n";
  auto cfg = config::load(path, {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.err().message,
            path +
                ":4: key 'actors.groups_per_unit': must be <= ledger.max_groups_per_unit (1), "
                "got 2 (its default)");
}

TEST(config_range, the_values_the_issue_reported_are_refused_with_exit_2s_error) {
  // Issue 11, case 6: `moerl config check` accepted each of these.
  for (const char* ov :
       {"ledger.lease_timeout_ms=-1", "actors.units_per_iteration=0", "ledger.group_size=0",
        "actors.groups_per_unit=9", "node.heartbeat_interval_ms=0", "buffer.capacity_samples=1"}) {
    auto cfg = config::load("", {ov});
    ASSERT_FALSE(cfg.ok()) << ov;
    EXPECT_EQ(cfg.err().code, errc::invalid_config) << ov;
    const std::string key = std::string(ov).substr(0, std::string(ov).find('='));
    EXPECT_NE(cfg.err().message.find("key '" + key + "'"), std::string::npos) << cfg.err().message;
  }
}

}  // namespace
}  // namespace moerl
