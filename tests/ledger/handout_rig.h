// A real buffer shard and a real work ledger wired together and driven step by step, as the
// buffer node and the coordinator do: the tests of groups handed to trainers share it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ledger/buffer_shard.h"
#include "ledger/work_ledger.h"

namespace moerl::ledger {

constexpr uint32_t kG = 2;  // group size

struct rig {
  manual_clock clk{0};
  ledger_options lopts;
  std::unique_ptr<work_ledger> led;
  std::unique_ptr<buffer_shard> shard;   // s0
  std::unique_ptr<buffer_shard> second;  // s1, once add_second_shard() made it

  explicit rig(store::object_store* store = nullptr) {
    lopts.group_size = kG;
    lopts.max_groups_per_unit = 2;
    lopts.snapshot_every = 4;
    led = std::move(*work_ledger::open(lopts, clk, store));
    shard = make_shard("s0");
    EXPECT_TRUE(led->add_shard("s0").ok());
  }

  static std::unique_ptr<buffer_shard> make_shard(const std::string& name) {
    shard_options so;
    so.name = name;
    so.group_size = kG;
    so.capacity_samples = 64;
    so.max_staleness = 1;
    return std::make_unique<buffer_shard>(so);
  }

  // A second shard (s1): where the ledger leases re-opened units once s0 is lost.
  void add_second_shard() {
    second = make_shard("s1");
    ASSERT_TRUE(led->add_shard("s1").ok());
  }

  buffer_shard& shard_named(const std::string& name) { return name == "s1" ? *second : *shard; }

  // Ledger events to the shards (each applies only its own) and their acks back.
  void route() {
    auto deliver = [&] {
      ASSERT_TRUE(led->sync().ok());
      for (auto& e : led->take_events()) {
        shard->apply(e);
        if (second) second->apply(e);
      }
    };
    deliver();
    for (auto* s : {shard.get(), second.get()}) {
      if (!s) continue;
      for (auto& a : s->take_acks()) ASSERT_TRUE(led->record_ack(a).ok());
    }
    deliver();
  }

  // One committed unit of `groups`, its samples made at policy `version`.
  void commit_unit(std::vector<group_id> groups, uint64_t version) {
    ASSERT_TRUE(led->add_unit(groups).ok());
    commit_next(version);
  }

  // The next pending unit (a new one, or one the ledger re-opened) leased and committed.
  void commit_next(uint64_t version) {
    auto l = led->acquire("w");
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    route();
    uint32_t seq = 0;
    for (group_id g : l->groups)
      for (uint32_t i = 0; i < kG; ++i) {
        messages::sample s;
        s.work_unit = l->unit;
        s.attempt = l->attempt;
        s.seq = seq++;
        s.group_id = g;
        s.index_in_group = i;
        s.policy_version = version;
        s.tokens = {uint32_t(g), i};
        s.worker = "w";
        ASSERT_TRUE(shard_named(l->shard).admit(s).ok());
      }
    ASSERT_TRUE(led->report(l->unit, l->attempt, "w", l->num_samples()).ok());
    route();
  }

  // Forwards the shard's steps to the ledger, as the buffer node does; each must be accepted.
  void record(const std::vector<consumption>& steps) {
    for (const auto& c : steps) {
      auto st = led->record_handout(c);
      ASSERT_TRUE(st.ok()) << handout_step_name(c.step) << ": " << st.err().to_string();
    }
    check();
  }

  void check() {
    auto inv = led->check_invariant();
    ASSERT_TRUE(inv.ok()) << inv.err().to_string();
    const accounting& a = led->counters();
    EXPECT_EQ(a.committed, a.trained + a.handed + a.buffered());
    EXPECT_EQ(a.lost, 0u);
    EXPECT_EQ(a.duplicated, 0u);
  }
};

}  // namespace moerl::ledger
