// The environment plane's two faces (env/ENV.md). An env node hosts `environment`s, one
// per episode, made by the job; a rollout's work reaches them through an `env_link`, which
// keeps each episode's session on one env node and spreads new sessions over the live env
// nodes by load. Tokens are the policy's vocabulary ids, as in samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::env {

// An environment's answer to a reset or a step.
struct env_observation {
  std::vector<uint32_t> tokens;  // what the policy reads next (reset: the episode's prompt)
  float reward = 0;              // the episode's reward, final when done
  bool done = false;
  uint32_t latency_us = 0;  // filled by env_link: round trip of the request, microseconds
};

// One episode's environment on an env node. Used by one thread at a time. A malformed
// action is errc::invalid_argument naming it, and leaves the episode as it was.
class environment {
 public:
  virtual ~environment() = default;
  virtual result<env_observation> reset(uint64_t episode_seed) = 0;
  virtual result<env_observation> step(const std::vector<uint32_t>& action) = 0;
};

// The rollout side. Episodes are numbered 0..n-1 by the last reset(); a failed episode
// (its env node dead or silent past env.step_timeout_ms, its environment restarted, its
// action refused) stays failed until the next reset. Used by one thread.
class env_link {
 public:
  virtual ~env_link() = default;
  // Ends the episodes of the previous reset and opens one per seed.
  virtual std::vector<result<env_observation>> reset(const std::string& task,
                                                     const std::vector<uint64_t>& seeds) = 0;
  // One step per listed episode, sent together and answered together.
  virtual std::vector<result<env_observation>> step(
      const std::vector<size_t>& episodes, const std::vector<std::vector<uint32_t>>& actions) = 0;
  // Ends every open episode (their sessions are released on the env nodes).
  virtual void close_all() = 0;
};

}  // namespace moerl::env
