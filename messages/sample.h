// Sample-plane messages (schema: messages/sample.capnp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.h"

namespace moerl::messages {

struct sample {
  uint64_t work_unit = 0;
  uint32_t attempt = 0;
  uint32_t seq = 0;
  uint64_t policy_version = 0;
  uint64_t group_id = 0;
  uint32_t index_in_group = 0;
  std::vector<uint32_t> prompt_tokens;
  std::vector<uint32_t> tokens;
  std::vector<float> logprobs;  // one per entry of `tokens` (decode enforces it)
  float reward = 0.0f;
  bool rewarded = false;
  std::string worker;
  // Timing, for the report's per-iteration t_generate / t_reward: the sample is the only
  // thing that travels from the rollout and reward nodes to the trainer that closes an
  // iteration. Saturates at ~71 minutes.
  uint32_t generate_us = 0;
  uint32_t reward_us = 0;
  // Multi-turn episodes (env/ENV.md): 1 where tokens[i] came from the environment (its
  // logprob is 0 and the trainer skips it), 0 where the policy sampled it. Empty for a
  // single-turn sample: every token is the policy's. Decode enforces one entry per token.
  std::vector<uint8_t> from_env;
  uint32_t env_us = 0;     // time the rollout waited on the episode's environment steps
  uint32_t env_steps = 0;  // steps of the episode (0: single-turn)
};

struct sample_ack {
  uint64_t work_unit = 0;
  uint32_t attempt = 0;
  uint32_t accepted = 0;
  uint32_t dropped = 0;
  std::string drop_reason;
  std::string shard;
};

struct credit {
  std::string consumer;
  uint32_t credits = 0;
};

struct batch_request {
  std::string trainer;
  uint32_t num_groups = 0;  // 0: only confirms
  uint64_t min_policy_version = 0;
  uint64_t incarnation = 0;                 // 0: never confirms (sample.capnp)
  std::vector<uint64_t> confirmed_batches;  // trained into a policy version
};

struct batch {
  uint64_t batch_id = 0;
  std::vector<sample> samples;
  std::string shard;
  std::vector<uint64_t> handouts;  // per group, in sample order (sample.capnp)
};

MOERL_MESSAGE_KIND(sample, kind::sample);
MOERL_MESSAGE_KIND(sample_ack, kind::sample_ack);
MOERL_MESSAGE_KIND(credit, kind::credit);
MOERL_MESSAGE_KIND(batch_request, kind::batch_request);
MOERL_MESSAGE_KIND(batch, kind::batch);

}  // namespace moerl::messages
