// One populated instance of every message kind, shared by the round-trip and fuzz tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "messages/all.h"

namespace moerl::messages::examples {

inline sample make_sample(uint32_t seq) {
  sample s;
  s.work_unit = 42;
  s.attempt = 3;
  s.seq = seq;
  s.policy_version = 7;
  s.group_id = 1000 + seq / 4;
  s.index_in_group = seq % 4;
  s.prompt_tokens = {1, 2, 3, 4, 5};
  s.tokens = {9, 8, 7};
  s.logprobs = {-0.5f, -1.25f, -0.0f};
  s.reward = 1.0f;
  s.rewarded = true;
  s.worker = "rollout-1";
  return s;
}

// Name of the kind and one valid encoded frame of it.
struct example {
  kind k;
  std::string bytes;
  // Decodes bytes as this kind; returns the error (errc::ok on success).
  std::function<moerl::error(const std::string&)> decode;
};

template <class T>
example make_example(const T& msg) {
  return {kind_of<T>::value, encode(msg), [](const std::string& b) {
            auto r = decode<T>(b);
            return r ? moerl::error{} : r.err();
          }};
}

inline std::vector<example> all_examples() {
  work_unit u{17, {1, 2, 3}, 4, 99, "sort"};
  lease l{u, 2, "rollout-0", 1234567, 5, "buffer-0", "tcp://10.0.0.7:5601"};
  batch b;
  b.batch_id = 8;
  b.shard = "buffer-0";
  for (uint32_t i = 0; i < 4; ++i) b.samples.push_back(make_sample(i));
  b.handouts = {40, 41};
  weight_manifest wm{3, "ab12", 300, {{"p0", 0, 100, "aa"}, {"p1", 100, 200, "bb"}}, 55};
  admin_request req{9, "secret", "inject", {"spot", "rollout-1"}, {{"deadline", "30"}}};
  admin_reply rep{9, false, moerl::error{errc::unknown_node, "no node rollout-9"}, "{}"};
  lease_batch lb;
  for (uint64_t i = 0; i < 3; ++i) {
    lease x = l;
    x.unit.id = 17 + i;
    x.unit.task_seed = 0;  // a batch does not carry it
    x.attempt = 2 + static_cast<uint32_t>(i);
    x.shard = i == 1 ? "buffer-1" : "buffer-0";
    x.shard_endpoint = i == 1 ? "tcp://10.0.0.8:5601" : "tcp://10.0.0.7:5601";
    lb.leases.push_back(x);
  }
  ledger_events ev{{{ledger_event_kind::attempt_opened, 17, 2, 4, {1, 2, 3}},
                    {ledger_event_kind::attempt_fenced, 18, 1, 0, {}},
                    {ledger_event_kind::unit_committed, 17, 2, 0, {}}}};
  metrics_snapshot ms{"coordinator", 77, {{"moerl_samples_total", 12.5, {{"role", "rollout"}}}}};
  return {
      make_example(u),
      make_example(l),
      make_example(lease_request{"rollout-0", 2, 5}),
      make_example(unit_report{17, 2, "rollout-0", unit_status::returned, 3, "drain"}),
      make_example(make_sample(1)),
      make_example(sample_ack{17, 2, 8, 1, "duplicate", "buffer-1"}),
      make_example(credit{"trainer-0", 16}),
      make_example(batch_request{"trainer-0", 4, 3, 7, {11, 12}}),
      make_example(b),
      make_example(wm),
      make_example(heartbeat{"n1", "rollout", 123, 5, 999, "running", 2, 1, "rollout-n1", ""}),
      make_example(
          interruption_notice{"n1", interruption_source::imds_spot, 2000, 1000, "terminate"}),
      make_example(req),
      make_example(rep),
      make_example(ms),
      make_example(wire_error{moerl::error{errc::timeout, "lease request timed out"}}),
      make_example(lb),
      make_example(lease_give_back{"rollout-0/1", {{17, 2}, {19, 4}}}),
      make_example(prompt{1001, {5, 65537, 1000003, 8}}),
      make_example(ev),
      make_example(shard_ack{17, 2, "buffer-0", {1, 2}, {3}}),
      make_example(trainer_claim{"trainer-0", 1764600000000000, {{17, 2, 1, 5}}, {{16, 1, 3, 4}}}),
      make_example(trainer_claim_reply{{true, false}}),
      make_example(shard_reports{{{17, 2, "buffer-0", {1, 2}, {3}}, {18, 1, "buffer-0", {}, {4}}},
                                 {{17, 2, 1, 8, 5, 1}, {16, 1, 3, 8, 4, 2}}}),
      make_example(shard_reports_reply{{"", "unit 18: not leased"}}),
  };
}

}  // namespace moerl::messages::examples
