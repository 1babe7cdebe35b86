// What the expert-parallel job tests share: a small policy shape and a node config whose
// fabric is shm (required, so a missing provider fails loudly instead of falling back).
#pragma once

#include <gtest/gtest.h>

#include "common/config.h"
#include "policy/model.h"
#include "tests/support/tiny_model.h"

namespace moerl::job::testing {

inline policy::model_config small_model(uint64_t seed) {
  return ::moerl::testing::tiny_model(seed);
}

inline config node_config() {
  auto cfg = config::load(
      "", {"fabric.provider=shm", "fabric.require_provider=true", "fabric.op_timeout_ms=20000"});
  EXPECT_TRUE(cfg.ok()) << cfg.err().to_string();
  return *cfg;
}

}  // namespace moerl::job::testing
