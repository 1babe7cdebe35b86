#include "messages/detail/frame.h"
#include "messages/sample.capnp.h"
#include "messages/sample.h"

namespace moerl::messages {
using namespace detail;

namespace {

void write_sample(schema::Sample::Builder b, const sample& m) {
  b.setWorkUnit(m.work_unit);
  b.setAttempt(m.attempt);
  b.setSeq(m.seq);
  b.setPolicyVersion(m.policy_version);
  b.setGroupId(m.group_id);
  b.setIndexInGroup(m.index_in_group);
  fill(b.initPromptTokens(m.prompt_tokens.size()), m.prompt_tokens);
  fill(b.initTokens(m.tokens.size()), m.tokens);
  fill(b.initLogprobs(m.logprobs.size()), m.logprobs);
  b.setReward(m.reward);
  b.setRewarded(m.rewarded);
  b.setWorker(text(m.worker));
  b.setGenerateUs(m.generate_us);
  b.setRewardUs(m.reward_us);
  fill(b.initFromEnv(m.from_env.size()), m.from_env);
  b.setEnvUs(m.env_us);
  b.setEnvSteps(m.env_steps);
}

status read_sample(schema::Sample::Reader r, sample& m) {
  m.work_unit = r.getWorkUnit();
  m.attempt = r.getAttempt();
  m.seq = r.getSeq();
  m.policy_version = r.getPolicyVersion();
  m.group_id = r.getGroupId();
  m.index_in_group = r.getIndexInGroup();
  copy(m.prompt_tokens, r.getPromptTokens());
  copy(m.tokens, r.getTokens());
  copy(m.logprobs, r.getLogprobs());
  m.reward = r.getReward();
  m.rewarded = r.getRewarded();
  m.worker = str(r.getWorker());
  m.generate_us = r.getGenerateUs();
  m.reward_us = r.getRewardUs();
  copy(m.from_env, r.getFromEnv());
  m.env_us = r.getEnvUs();
  m.env_steps = r.getEnvSteps();
  if (!m.from_env.empty() && m.from_env.size() != m.tokens.size())
    return error{errc::malformed_message, "sample: " + std::to_string(m.from_env.size()) +
                                              " from_env flags for " +
                                              std::to_string(m.tokens.size()) + " tokens"};
  if (m.logprobs.size() != m.tokens.size())
    return error{errc::malformed_message, "sample: " + std::to_string(m.logprobs.size()) +
                                              " logprobs for " + std::to_string(m.tokens.size()) +
                                              " tokens"};
  return {};
}

}  // namespace

template <>
std::string encode(const sample& m) {
  capnp::MallocMessageBuilder b;
  write_sample(b.initRoot<schema::Sample>(), m);
  return frame(kind::sample, b);
}
template <>
result<sample> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Sample, sample>(kind::sample, data, size, lim, read_sample);
}

template <>
std::string encode(const sample_ack& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::SampleAck>();
  r.setWorkUnit(m.work_unit);
  r.setAttempt(m.attempt);
  r.setAccepted(m.accepted);
  r.setDropped(m.dropped);
  r.setDropReason(text(m.drop_reason));
  r.setShard(text(m.shard));
  return frame(kind::sample_ack, b);
}
template <>
result<sample_ack> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::SampleAck, sample_ack>(
      kind::sample_ack, data, size, lim, [](schema::SampleAck::Reader r, sample_ack& m) -> status {
        m.work_unit = r.getWorkUnit();
        m.attempt = r.getAttempt();
        m.accepted = r.getAccepted();
        m.dropped = r.getDropped();
        m.drop_reason = str(r.getDropReason());
        m.shard = str(r.getShard());
        return {};
      });
}

template <>
std::string encode(const credit& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::Credit>();
  r.setConsumer(text(m.consumer));
  r.setCredits(m.credits);
  return frame(kind::credit, b);
}
template <>
result<credit> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Credit, credit>(kind::credit, data, size, lim,
                                              [](schema::Credit::Reader r, credit& m) -> status {
                                                m.consumer = str(r.getConsumer());
                                                m.credits = r.getCredits();
                                                return {};
                                              });
}

template <>
std::string encode(const batch_request& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::BatchRequest>();
  r.setTrainer(text(m.trainer));
  r.setNumGroups(m.num_groups);
  r.setMinPolicyVersion(m.min_policy_version);
  r.setIncarnation(m.incarnation);
  fill(r.initConfirmedBatches(static_cast<unsigned>(m.confirmed_batches.size())),
       m.confirmed_batches);
  return frame(kind::batch_request, b);
}
template <>
result<batch_request> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::BatchRequest, batch_request>(
      kind::batch_request, data, size, lim,
      [](schema::BatchRequest::Reader r, batch_request& m) -> status {
        m.trainer = str(r.getTrainer());
        m.num_groups = r.getNumGroups();
        m.min_policy_version = r.getMinPolicyVersion();
        m.incarnation = r.getIncarnation();
        copy(m.confirmed_batches, r.getConfirmedBatches());
        return {};
      });
}

template <>
std::string encode(const batch& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::Batch>();
  r.setBatchId(m.batch_id);
  auto list = r.initSamples(m.samples.size());
  for (unsigned i = 0; i < m.samples.size(); ++i) write_sample(list[i], m.samples[i]);
  r.setShard(text(m.shard));
  fill(r.initHandouts(static_cast<unsigned>(m.handouts.size())), m.handouts);
  return frame(kind::batch, b);
}
template <>
result<batch> decode(const void* data, size_t size, const decode_limits& lim) {
  return decode_frame<schema::Batch, batch>(
      kind::batch, data, size, lim, [](schema::Batch::Reader r, batch& m) -> status {
        m.batch_id = r.getBatchId();
        auto list = r.getSamples();
        m.samples.resize(list.size());
        for (unsigned i = 0; i < list.size(); ++i)
          if (auto st = read_sample(list[i], m.samples[i]); !st) return st;
        m.shard = str(r.getShard());
        copy(m.handouts, r.getHandouts());
        return {};
      });
}

}  // namespace moerl::messages
