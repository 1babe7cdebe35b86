// Failures that take state with them: a buffer shard killed, the coordinator killed and
// restarted (the ledger recovers from its journal), and duplicate and stale samples replayed
// at the shards. In each the invariant holds and nothing is lost or duplicated.
#include <csignal>

#include "job/modpow_work.h"
#include "ledger/sample_plane.h"
#include "ledger/types.h"
#include "tests/actors/cluster_fixture.h"

using namespace moerl::test;
using namespace moerl;

TEST_F(cluster_test, buffer_shard_killed_mid_run_reopens_its_units_and_loses_nothing) {
  // Long enough that the kill lands mid-run: with the base's 4 iterations the whole job
  // (384 samples) could end between two status polls, before the kill (seen once in a full
  // run: the report was written before buffer-0 died).
  start({"actors.iterations=16"});
  wait_joined("buffer-0");
  auto before = c_->wait_status(
      [](const json& s) { return s["accounting"].value("committed", 0u) >= 32; }, 30000);
  ASSERT_TRUE(before);
  ASSERT_FALSE((*before).value("done", false)) << "the job ended before the kill";
  ASSERT_TRUE(c_->signal("buffer-0", SIGKILL));
  ASSERT_TRUE(WIFSIGNALED(c_->wait_exit("buffer-0", 5000)));
  auto report = wait_done(60000);
  expect_clean_books(report);
  const json buffer0 = node_of(report, "buffer-0");  // from the report: see node_of
  EXPECT_EQ(buffer0.value("state", ""), "dead") << buffer0.dump();
  // Whatever buffer-0 held that no trainer had received was dropped as shard_lost and
  // regenerated elsewhere; leases that targeted it expired.
  auto dropped = report["accounting"]["dropped"];
  EXPECT_EQ(report["accounting"].value("lost", 1u), 0u);
  std::cerr << "dropped after shard loss: " << dropped.dump() << "\n";
}

// Once flaky: nodes asking the restarted coordinator for `nodes` before every shard had
// re-joined wrote live shards off for good, and consumptions re-sent after the crash were
// counted as duplicates. Both are fixed (known_gone/look-again in service_roles.cpp, hand-out ids).
TEST_F(cluster_test, coordinator_killed_and_restarted_recovers_the_ledger_and_finishes) {
  // Long enough that every node can re-join before the job ends: a node whose register
  // request reached the dying coordinator waits out node.request_timeout_ms (5 s) before it
  // tries again, and with 5 iterations the job once ended 1.2 s after the restart, with
  // rollout-0 still waiting (6 of 7 nodes in the report).
  start({"actors.iterations=40"});
  wait_all_joined();  // so that the 7 in the report are nodes that re-joined
  auto before = c_->wait_status(
      [](const json& s) { return s["accounting"].value("committed", 0u) >= 48; }, 30000);
  ASSERT_TRUE(before);
  ASSERT_TRUE(c_->signal("coordinator", SIGKILL));
  ASSERT_TRUE(WIFSIGNALED(c_->wait_exit("coordinator", 5000)));
  ASSERT_TRUE(c_->restart("coordinator"));
  auto after =
      c_->wait_status([](const json& s) { return s.value("ledger_epoch", 0u) >= 2; }, 20000);
  ASSERT_TRUE(after) << after.err().to_string();
  // What was committed before the crash is still committed (or trained) after recovery.
  EXPECT_GE((*after)["accounting"].value("committed", 0u),
            (*before)["accounting"].value("committed", 0u));
  auto report = wait_done(60000);
  expect_clean_books(report);
  EXPECT_EQ(report["nodes"].size(), 7u) << "every node re-joined the restarted coordinator";
  for (auto& n : report["nodes"]) EXPECT_EQ(n.value("state", ""), "running") << n.dump();
}

TEST_F(cluster_test, duplicate_and_stale_samples_replayed_at_the_shards_are_refused) {
  start();
  for (auto* name : {"buffer-0", "buffer-1"}) wait_joined(name);
  c_->wait_status([](const json& s) { return s["accounting"].value("committed", 0u) >= 48; },
                  30000);
  auto refused = [&] {
    uint64_t n = 0;
    for (auto* name : {"buffer-0", "buffer-1"}) {
      auto st = node(name).value("stats", json::object());
      for (auto* k : {"duplicate", "fenced", "invalid", "stale_policy"}) n += st.value(k, 0ull);
    }
    return n;
  };
  auto received = [&] {
    uint64_t n = 0;
    for (auto* name : {"buffer-0", "buffer-1"})
      n += node(name).value("stats", json::object()).value("received", 0ull);
    return n;
  };
  uint64_t received_before = received();
  uint64_t refused_before = refused();
  // Replay unit 1's samples as generated (a duplicate delivery) and again under an attempt
  // of epoch 0 (a stale attempt from before the ledger's first epoch) at both shards.
  auto zmq = zmq::zmq_context::create();
  ASSERT_TRUE(zmq);
  job::modpow_work work;
  int sent = 0;
  for (auto* name : {"buffer-0", "buffer-1"}) {
    std::string ep;
    for (int i = 0; i < 50 && ep.empty(); ++i)
      ep = node(name).value("endpoint", "");  // console may be slow
    ASSERT_FALSE(ep.empty()) << name << " has no endpoint";
    auto p = ledger::sample_producer::connect(*zmq, ep, "replayer");
    ASSERT_TRUE(p) << p.err().to_string();
    for (uint32_t attempt : {(1u << ledger::kAttemptCounterBits) | 1u, 1u}) {
      for (uint32_t seq = 0; seq < 4; ++seq) {
        uint64_t group = 1 + seq / 8;
        auto g = work.generate(job::modpow_prompt(group, 0, 1500), 0, seq % 8, 0);
        ASSERT_TRUE(g);
        messages::sample s;
        s.work_unit = 1;
        s.attempt = attempt;
        s.seq = seq;
        s.group_id = group;
        s.index_in_group = seq % 8;
        s.prompt_tokens = g->prompt;
        s.tokens = g->tokens;
        s.logprobs = g->logprobs;
        s.rewarded = true;
        s.worker = "replayer";
        for (int tries = 0; tries < 200; ++tries) {
          auto st = (*p)->try_send(s);
          if (st) {
            ++sent;
            break;
          }
          ASSERT_EQ(st.err().code, errc::capacity_exceeded) << st.err().to_string();
          ASSERT_TRUE((*p)->poll(50));
        }
      }
    }
  }
  ASSERT_EQ(sent, 16);
  auto report = wait_done(60000);
  expect_clean_books(report);
  // The shards saw the replays and refused at least the 8 of the pre-epoch attempt; none of
  // them reached a trainer (the books above), whatever the shard did with the rest.
  uint64_t refused_after = refused_before;
  for (int i = 0; i < 50 && refused_after < refused_before + 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // shard stats period
    refused_after = refused();
  }
  EXPECT_GE(refused_after, refused_before + 8);
  EXPECT_GE(received(), received_before + 16);
}
