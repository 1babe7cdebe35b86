// Ledger + buffer shards + workers + a trainer wired together in one process, driven step
// by step (no threads, no sleeps): a shard is lost, leases expire while late samples keep
// coming, stale policies are refused; after every step the invariant holds, and at the
// end every group was trained exactly once or dropped with a reason.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "ledger/buffer_shard.h"
#include "ledger/work_ledger.h"

namespace moerl::ledger {
namespace {

constexpr uint32_t kG = 4;

// A real, verifiable work function: modular exponentiation chains per (prompt, index).
uint32_t work(group_id prompt, uint32_t idx, uint32_t step) {
  uint64_t base = (prompt * 31 + idx * 7 + step) % 1000003 + 2, r = 1, e = 65537 + step;
  while (e) {
    if (e & 1) r = r * base % 1000003;
    base = base * base % 1000003;
    e >>= 1;
  }
  return uint32_t(r);
}

struct cluster {
  ledger_options opts;
  manual_clock clk{0};
  std::unique_ptr<work_ledger> led;
  std::map<shard_id, std::unique_ptr<buffer_shard>> shards;
  std::map<std::pair<unit_id, group_id>, int> trained;  // what the trainer received
  uint64_t policy_version = 0;

  explicit cluster(std::vector<shard_id> names, uint64_t capacity) {
    opts.group_size = kG;
    opts.max_groups_per_unit = 3;
    opts.lease_timeout_ms = 100;
    opts.shard_capacity_samples = capacity;
    led = std::move(*work_ledger::open(opts, clk, nullptr));
    for (auto& n : names) {
      shard_options so;
      so.name = n;
      so.group_size = kG;
      so.capacity_samples = capacity;
      so.max_staleness = 1;
      shards[n] = std::make_unique<buffer_shard>(so);
      EXPECT_TRUE(led->add_shard(n).ok());
    }
  }
  // Delivers ledger events to the shards that still exist and acks back to the ledger.
  void route() {
    for (int round = 0; round < 4; ++round) {
      for (auto& e : led->take_events()) {
        auto it = shards.find(e.shard);
        if (it != shards.end()) it->second->apply(e);
      }
      for (auto& [name, sh] : shards)
        for (auto& ack : sh->take_acks()) (void)led->record_ack(ack);  // stale acks are refused
    }
    auto inv = led->check_invariant();
    ASSERT_TRUE(inv.ok()) << inv.err().to_string();
  }
  std::vector<messages::sample> generate(const lease& l, uint64_t version) {
    std::vector<messages::sample> out;
    uint32_t seq = 0;
    for (group_id g : l.groups)
      for (uint32_t i = 0; i < kG; ++i) {
        messages::sample s;
        s.work_unit = l.unit;
        s.attempt = l.attempt;
        s.seq = seq++;
        s.group_id = g;
        s.index_in_group = i;
        s.policy_version = version;
        s.tokens = {work(g, i, 0), work(g, i, 1), work(g, i, 2)};
        s.worker = l.worker;
        out.push_back(std::move(s));
      }
    return out;
  }
  void send(const shard_id& shard, const std::vector<messages::sample>& v) {
    auto it = shards.find(shard);
    if (it == shards.end()) return;  // the shard is gone: the samples go nowhere
    for (const auto& s : v) (void)it->second->admit(s);
  }
  // The trainer takes up to n groups from each shard and checks every sample's work.
  void train(uint32_t n) {
    for (auto& [name, sh] : shards) {
      auto b = sh->serve(n);
      for (const auto& s : b.batch.samples)
        for (uint32_t step = 0; step < 3; ++step)
          ASSERT_EQ(s.tokens[step], work(s.group_id, s.index_in_group, step));
      for (const auto& c : b.consumed) {
        ++trained[{c.unit, c.group}];
        ASSERT_TRUE(led->record_consumed(c).ok());
      }
      if (!b.consumed.empty()) {
        ++policy_version;
        for (auto& [n2, sh2] : shards) sh2->set_policy_version(policy_version);
      }
    }
  }
  // One worker runs one unit to completion.
  bool run_one(const worker_id& w) {
    auto l = led->acquire(w);
    if (!l) return false;
    route();
    send(l->shard, generate(*l, policy_version));
    (void)led->report(l->unit, l->attempt, w, l->num_samples());
    route();
    return true;
  }
};

TEST(ledger_cluster, losing_a_shard_reopens_its_unconsumed_groups_and_nothing_is_lost) {
  cluster c({"s0", "s1"}, 48);
  std::set<std::pair<unit_id, group_id>> all;
  for (unit_id u = 1; u <= 24; ++u) {
    std::vector<group_id> gs = {u * 100, u * 100 + 1, u * 100 + 2};
    auto id = c.led->add_unit(gs);
    ASSERT_TRUE(id.ok());
    for (auto g : gs) all.insert({*id, g});
  }
  // Phase 1: fill both shards, train a little.
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(c.run_one("w" + std::to_string(i % 3)));
  c.train(2);
  // A lease open on s1 at the moment it dies.
  auto open_on_s1 = c.led->acquire("w9");
  ASSERT_TRUE(open_on_s1.ok());
  if (open_on_s1->shard != "s1") {
    // round-robin put it on s0: hand it back and take the next, which goes to s1
    ASSERT_TRUE(c.led->give_back(open_on_s1->unit, open_on_s1->attempt, "w9").ok());
    open_on_s1 = c.led->acquire("w9");
    ASSERT_TRUE(open_on_s1.ok());
  }
  ASSERT_EQ(open_on_s1->shard, "s1");
  c.route();
  c.send("s1", c.generate(*open_on_s1, c.policy_version));

  // s1 dies with committed, untrained groups in it.
  uint64_t committed_before = c.led->counters().committed;
  c.shards.erase("s1");
  auto reopened = c.led->shard_lost("s1");
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(reopened->empty());
  bool partial = false;
  for (auto u : *reopened) {
    auto v = c.led->find(u);
    if (!v->trained.empty() && v->todo.size() + v->trained.size() == v->groups.size())
      partial = true;
  }
  EXPECT_TRUE(partial) << "a unit half-trained before the loss regenerates only the rest";
  c.route();
  EXPECT_LT(c.led->counters().committed, committed_before);
  EXPECT_GT(c.led->counters().dropped.at("shard_lost"), 0u);
  // The worker whose lease pointed at s1 is fenced.
  EXPECT_EQ(c.led->report(open_on_s1->unit, open_on_s1->attempt, "w9", open_on_s1->num_samples())
                .err()
                .code,
            errc::stale_attempt);
  // Later leases only go to s0 (once the trainer made room in it).
  c.train(20);
  auto next = c.led->acquire("w0");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->shard, "s0");
  ASSERT_TRUE(c.led->give_back(next->unit, next->attempt, "w0").ok());
  c.route();

  // Phase 2: run everything to the end; the trainer keeps up.
  for (int guard = 0; guard < 1000; ++guard) {
    bool leased = c.run_one("w" + std::to_string(guard % 3));
    c.train(3);
    c.clk.advance(10);
    c.led->expire_due();
    c.route();
    if (!leased && c.led->num_pending() == 0 && c.led->num_leased() == 0 &&
        c.shards.at("s0")->num_ready_groups() == 0)
      break;
  }
  const auto& a = c.led->counters();
  EXPECT_TRUE(c.led->check_invariant().ok()) << c.led->check_invariant().err().to_string();
  EXPECT_EQ(a.lost, 0u);
  EXPECT_EQ(a.duplicated, 0u);
  EXPECT_EQ(a.in_flight, 0u);
  // Nothing was generated under a stale policy here, so every group was trained once.
  EXPECT_EQ(a.trained, all.size() * kG);
  EXPECT_EQ(a.committed, a.trained);
  std::set<std::pair<unit_id, group_id>> got;
  for (const auto& [k, n] : c.trained) {
    EXPECT_EQ(n, 1) << "unit " << k.first << " group " << k.second;
    got.insert(k);
  }
  EXPECT_EQ(got, all);
}

TEST(ledger_cluster, an_expired_worker_keeps_sending_and_its_samples_are_fenced) {
  cluster c({"s0"}, 64);
  ASSERT_TRUE(c.led->add_unit({7, 8}).ok());
  auto slow = c.led->acquire("slow");
  ASSERT_TRUE(slow.ok());
  c.route();
  auto first_half = c.generate(*slow, 0);
  c.send("s0", std::vector<messages::sample>(first_half.begin(), first_half.begin() + 3));
  c.clk.advance(100);
  ASSERT_EQ(c.led->expire_due().size(), 1u);
  c.route();
  EXPECT_EQ(c.shards["s0"]->stats().purged, 3u);
  ASSERT_TRUE(c.run_one("fast"));
  // The slow worker wakes up and sends the rest, then reports.
  c.send("s0", std::vector<messages::sample>(first_half.begin() + 3, first_half.end()));
  EXPECT_EQ(c.shards["s0"]->stats().fenced, first_half.size() - 3);
  EXPECT_EQ(c.led->report(slow->unit, slow->attempt, "slow", 8).err().code, errc::stale_attempt);
  c.train(10);
  const auto& a = c.led->counters();
  EXPECT_EQ(a.dispatched, 16u);
  EXPECT_EQ(a.dropped.at("lease_expired"), 8u);
  EXPECT_EQ(a.committed, 8u);
  EXPECT_EQ(a.trained, 8u);
  EXPECT_TRUE(c.led->check_invariant().ok());
}

TEST(ledger_cluster, stale_samples_are_dropped_with_a_reason_and_accounted) {
  cluster c({"s0"}, 64);
  ASSERT_TRUE(c.led->add_unit({1}).ok());
  ASSERT_TRUE(c.led->add_unit({2}).ok());
  ASSERT_TRUE(c.run_one("w"));
  c.train(1);  // policy moves to 1
  c.train(1);
  c.policy_version = 5;
  c.shards["s0"]->set_policy_version(5);
  auto l = c.led->acquire("w");
  ASSERT_TRUE(l.ok());
  c.route();
  c.send("s0", c.generate(*l, 3));  // 3 + max_staleness 1 < 5
  ASSERT_TRUE(c.led->report(l->unit, l->attempt, "w", kG).ok());
  c.route();
  const auto& a = c.led->counters();
  EXPECT_EQ(a.dropped.at("stale_policy"), kG);
  EXPECT_EQ(a.committed, kG);
  EXPECT_EQ(c.led->find(l->unit)->state, unit_state::committed);
  EXPECT_TRUE(c.led->check_invariant().ok());
  EXPECT_EQ(a.to_json()["dropped"]["stale_policy"], kG);
}

}  // namespace
}  // namespace moerl::ledger
