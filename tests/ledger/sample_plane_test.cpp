// The sample plane over real ZeroMQ sockets on loopback: credit-based flow control with a
// slow trainer (memory stays bounded, nothing is lost or served twice), duplicates replayed
// through the socket, and garbage frames from a peer.
#include <gtest/gtest.h>

#include <zmq.h>

#include <map>
#include <set>

#include "ledger/sample_plane.h"
#include "messages/codec.h"

namespace moerl::ledger {
namespace {

constexpr uint32_t kG = 4;

// Deterministic, checkable "generation": the tokens a sample must carry.
std::vector<uint32_t> tokens_for(group_id g, uint32_t idx) {
  std::vector<uint32_t> t;
  uint64_t x = g * 2654435761u + idx;
  for (int i = 0; i < 6; ++i) {
    x = (x * 6364136223846793005ull + 1442695040888963407ull);
    t.push_back(uint32_t(x >> 40));
  }
  return t;
}

messages::sample make(unit_id u, attempt_t a, uint32_t seq, group_id g, uint32_t idx) {
  messages::sample s;
  s.work_unit = u;
  s.attempt = a;
  s.seq = seq;
  s.group_id = g;
  s.index_in_group = idx;
  s.policy_version = 3;
  s.tokens = tokens_for(g, idx);
  s.logprobs.assign(s.tokens.size(), -0.125f);
  s.worker = "p0";
  return s;
}

struct plane : ::testing::Test {
  void SetUp() override {
    auto c = zmq::zmq_context::create();
    ASSERT_TRUE(c.ok());
    ctx = *c;
  }
  std::unique_ptr<shard_service> bind(uint64_t capacity, uint32_t credits,
                                      const std::string& ep = "tcp://127.0.0.1:*") {
    shard_options so;
    so.name = "s0";
    so.group_size = kG;
    so.capacity_samples = capacity;
    sample_plane_options po;
    po.credits_per_producer = credits;
    auto s = shard_service::bind(ctx, ep, so, po);
    EXPECT_TRUE(s.ok()) << s.err().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::shared_ptr<zmq::zmq_context> ctx;
};

TEST_F(plane, a_slow_trainer_slows_producers_and_memory_stays_bounded) {
  constexpr uint64_t kCapacity = 16;
  constexpr int kUnits = 12;  // 2 groups each: 96 samples through a 16-sample shard
  auto svc = bind(kCapacity, 8);
  ASSERT_TRUE(svc);
  auto prod = sample_producer::connect(ctx, svc->endpoint(), "p0");
  ASSERT_TRUE(prod.ok()) << prod.err().to_string();
  auto trainer = batch_consumer::connect(ctx, svc->endpoint(), "t0");
  ASSERT_TRUE(trainer.ok());

  // What the ledger would have told the shard: every attempt, groups (u*10, u*10+1).
  std::vector<messages::sample> todo;
  for (unit_id u = 1; u <= kUnits; ++u) {
    svc->shard().apply({ledger_event::kind::attempt_opened, "s0", u, 1, {u * 10, u * 10 + 1}, kG});
    uint32_t seq = 0;
    for (group_id g : {u * 10, u * 10 + 1})
      for (uint32_t i = 0; i < kG; ++i) todo.push_back(make(u, 1, seq++, g, i));
  }
  ASSERT_TRUE((*prod)->declare_backlog(uint32_t(todo.size())).ok());
  size_t next = 0;
  std::map<group_id, int> served;  // group -> times received by the trainer
  size_t refused_for_credit = 0;
  bool asked = false;
  uint64_t max_resident_plus_credit = 0;
  // Each round: the producer sends what its credit allows; the shard pumps; the trainer
  // takes one group every 4th round (slow). The loop bound is a liveness guard only.
  for (int round = 0; round < 200000 && served.size() < 2 * kUnits; ++round) {
    ASSERT_TRUE((*prod)->poll(0).ok());
    while (next < todo.size()) {
      auto s = (*prod)->try_send(todo[next]);
      if (!s) {
        ASSERT_EQ(s.err().code, errc::capacity_exceeded);
        ++refused_for_credit;
        break;
      }
      ++next;
    }
    ASSERT_TRUE(svc->pump(1).ok());
    for (const auto& ack : svc->take_acks())
      svc->shard().apply({ledger_event::kind::unit_committed, "s0", ack.unit, ack.attempt, {}, 0});
    max_resident_plus_credit =
        std::max(max_resident_plus_credit,
                 svc->shard().stats().resident_samples + svc->credits_outstanding());
    if (!asked && round % 4 == 0) {
      ASSERT_TRUE((*trainer)->request(1).ok());
      asked = true;
    }
    auto b = (*trainer)->poll(0);
    ASSERT_TRUE(b.ok());
    if (*b) {
      asked = false;
      ASSERT_EQ((*b)->samples.size(), kG) << "one whole group per batch";
      group_id g = (*b)->samples[0].group_id;
      for (uint32_t i = 0; i < kG; ++i) {
        EXPECT_EQ((*b)->samples[i].group_id, g);
        EXPECT_EQ((*b)->samples[i].index_in_group, i);
        EXPECT_EQ((*b)->samples[i].tokens, tokens_for(g, i));
      }
      ++served[g];
    }
  }
  ASSERT_EQ(served.size(), 2u * kUnits) << "every group reached the trainer";
  for (const auto& [g, n] : served) EXPECT_EQ(n, 1) << "group " << g;
  EXPECT_EQ(svc->take_consumed().size(), 2u * kUnits);
  EXPECT_LE(max_resident_plus_credit, kCapacity);
  EXPECT_LE(svc->shard().stats().peak_samples, kCapacity);
  EXPECT_GT(refused_for_credit, 0u) << "the producer had to wait for the trainer";
  EXPECT_EQ(svc->shard().stats().rejected_full, 0u) << "credits kept the shard from overflowing";
  EXPECT_EQ((*prod)->num_sent(), todo.size());
}

TEST_F(plane, credits_are_shared_so_many_producers_cannot_overfill_the_shard) {
  constexpr uint64_t kCapacity = 12;  // three groups
  constexpr int kProducers = 3;
  auto svc = bind(kCapacity, 64);  // per-producer limit far above capacity: capacity binds
  ASSERT_TRUE(svc);
  std::vector<std::unique_ptr<sample_producer>> prods;
  std::vector<std::vector<messages::sample>> todo(kProducers);
  for (int p = 0; p < kProducers; ++p) {
    auto c = sample_producer::connect(ctx, svc->endpoint(), "p" + std::to_string(p));
    ASSERT_TRUE(c.ok());
    prods.push_back(std::move(*c));
    // Producer p owns units p+1, p+4, ...: one group each.
    for (unit_id u = p + 1; u <= 12; u += kProducers) {
      svc->shard().apply({ledger_event::kind::attempt_opened, "s0", u, 1, {u * 10}, kG});
      for (uint32_t i = 0; i < kG; ++i) todo[p].push_back(make(u, 1, i, u * 10, i));
    }
  }
  for (int p = 0; p < kProducers; ++p)
    ASSERT_TRUE(prods[p]->declare_backlog(uint32_t(todo[p].size())).ok());
  auto trainer = batch_consumer::connect(ctx, svc->endpoint(), "t0");
  ASSERT_TRUE(trainer.ok());
  std::vector<size_t> next(kProducers, 0);
  std::set<group_id> served;
  bool asked = false;
  uint64_t max_bound = 0;
  for (int round = 0; round < 200000 && served.size() < 12; ++round) {
    for (int p = 0; p < kProducers; ++p) {
      ASSERT_TRUE(prods[p]->poll(0).ok());
      while (next[p] < todo[p].size() && prods[p]->try_send(todo[p][next[p]]).ok()) ++next[p];
    }
    ASSERT_TRUE(svc->pump(1).ok());
    for (const auto& ack : svc->take_acks())
      svc->shard().apply({ledger_event::kind::unit_committed, "s0", ack.unit, ack.attempt, {}, 0});
    uint64_t granted_not_used = 0;
    for (auto& pr : prods) granted_not_used += pr->credits();
    max_bound =
        std::max(max_bound, svc->shard().stats().resident_samples + svc->credits_outstanding());
    ASSERT_LE(svc->shard().stats().resident_samples + granted_not_used, kCapacity);
    if (!asked && round % 8 == 0) {
      ASSERT_TRUE((*trainer)->request(1).ok());
      asked = true;
    }
    auto b = (*trainer)->poll(0);
    ASSERT_TRUE(b.ok());
    if (*b) {
      asked = false;
      for (const auto& smp : (*b)->samples) served.insert(smp.group_id);
    }
  }
  EXPECT_EQ(served.size(), 12u);
  EXPECT_LE(max_bound, kCapacity);
  EXPECT_EQ(svc->shard().stats().rejected_full, 0u);
}

TEST_F(plane, a_producer_that_never_declares_still_progresses_and_an_idle_one_holds_no_credit) {
  auto svc = bind(64, 16);
  ASSERT_TRUE(svc);
  auto lazy = sample_producer::connect(ctx, svc->endpoint(), "lazy");
  auto idle = sample_producer::connect(ctx, svc->endpoint(), "idle");
  ASSERT_TRUE(lazy.ok() && idle.ok());
  svc->shard().apply({ledger_event::kind::attempt_opened, "s0", 1, 1, {10}, kG});
  uint32_t next = 0;
  for (int round = 0; round < 100000 && next < kG; ++round) {
    ASSERT_TRUE((*lazy)->poll(0).ok());
    ASSERT_TRUE((*idle)->poll(0).ok());
    if ((*lazy)->try_send(make(1, 1, next, 10, next)).ok()) ++next;
    ASSERT_TRUE(svc->pump(1).ok());
  }
  EXPECT_EQ(next, kG);
  EXPECT_EQ((*idle)->credits(), 0u) << "credit goes only where it was asked for";
  for (int round = 0; round < 100000 && svc->shard().stats().received < kG; ++round)
    ASSERT_TRUE(svc->pump(1).ok());
  EXPECT_EQ(svc->shard().take_acks().size(), 1u);
  EXPECT_EQ(svc->credits_outstanding(), 0u);
}

TEST_F(plane, duplicates_and_fenced_samples_replayed_over_the_socket_are_dropped) {
  auto svc = bind(64, 64, "ipc:///tmp/moerl-ledger-test-" + std::to_string(::getpid()));
  ASSERT_TRUE(svc);
  auto prod = sample_producer::connect(ctx, svc->endpoint(), "p0");
  ASSERT_TRUE(prod.ok());
  svc->shard().apply({ledger_event::kind::attempt_opened, "s0", 1, 2, {10}, kG});
  std::vector<messages::sample> replay;
  for (uint32_t i = 0; i < kG; ++i) replay.push_back(make(1, 2, i, 10, i));
  replay.push_back(make(1, 2, 0, 10, 0));  // duplicate
  replay.push_back(make(1, 1, 0, 10, 0));  // attempt 1 is fenced by 2
  ASSERT_TRUE((*prod)->declare_backlog(uint32_t(replay.size())).ok());
  size_t next = 0;
  for (int round = 0; round < 100000 && svc->shard().stats().received < replay.size(); ++round) {
    ASSERT_TRUE((*prod)->poll(0).ok());
    while (next < replay.size() && (*prod)->try_send(replay[next]).ok()) ++next;
    ASSERT_TRUE(svc->pump(1).ok());
  }
  EXPECT_EQ(svc->shard().stats().received, replay.size());
  EXPECT_EQ(svc->shard().stats().duplicate, 1u);
  EXPECT_EQ(svc->shard().stats().fenced, 1u);
  auto acks = svc->take_acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].accepted_groups, (std::vector<group_id>{10}));
}

TEST_F(plane, garbage_frames_from_a_peer_are_counted_and_the_shard_keeps_serving) {
  auto svc = bind(64, 8);
  ASSERT_TRUE(svc);
  void* raw = zmq_socket(ctx->handle(), ZMQ_DEALER);
  ASSERT_NE(raw, nullptr);
  int zero = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &zero, sizeof zero);
  ASSERT_EQ(zmq_connect(raw, svc->endpoint().c_str()), 0);
  const std::string junk = "MOE\x01this is not capnp";
  ASSERT_EQ(zmq_send(raw, junk.data(), junk.size(), 0), int(junk.size()));
  ASSERT_EQ(zmq_send(raw, "x", 1, 0), 1);
  auto prod = sample_producer::connect(ctx, svc->endpoint(), "p0");
  ASSERT_TRUE(prod.ok());
  ASSERT_TRUE((*prod)->declare_backlog(100).ok());
  for (int round = 0; round < 100000 && (svc->num_bad_frames() < 2 || (*prod)->credits() == 0);
       ++round) {
    ASSERT_TRUE(svc->pump(1).ok());
    ASSERT_TRUE((*prod)->poll(0).ok());
  }
  EXPECT_EQ(svc->num_bad_frames(), 2u);
  EXPECT_EQ((*prod)->credits(), 8u) << "a healthy producer still gets credit";
  zmq_close(raw);
}

TEST_F(plane, a_group_goes_as_one_message_as_far_as_the_credit_allows_and_acks_whole) {
  auto svc = bind(64, 3);  // 3 credits per producer: a group of 4 needs two messages
  ASSERT_TRUE(svc);
  auto prod = sample_producer::connect(ctx, svc->endpoint(), "p0");
  ASSERT_TRUE(prod.ok());
  svc->shard().apply({ledger_event::kind::attempt_opened, "s0", 1, 1, {10, 11}, kG});
  std::vector<messages::sample> group;
  for (uint32_t i = 0; i < kG; ++i) group.push_back(make(1, 1, i, 10, i));
  // No credit yet: nothing goes, and the whole rest is declared as the backlog.
  auto none = (*prod)->try_send_some(group, 0);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err().code, errc::capacity_exceeded);
  size_t sent = 0;
  for (int round = 0; round < 100000 && sent < group.size(); ++round) {
    ASSERT_TRUE(svc->pump(1).ok());
    ASSERT_TRUE((*prod)->poll(0).ok());
    auto n = (*prod)->try_send_some(group, sent);
    if (n) {
      EXPECT_LE(*n, 3u) << "never more than the credit";
      sent += *n;
    }
  }
  ASSERT_EQ(sent, group.size());
  EXPECT_EQ((*prod)->num_sent(), kG);
  // The second group in one call once credit is back; then the unit is acked whole.
  std::vector<messages::sample> second;
  for (uint32_t i = 0; i < kG; ++i) second.push_back(make(1, 1, kG + i, 11, i));
  for (size_t done = 0, round = 0; round < 100000 && done < second.size(); ++round) {
    ASSERT_TRUE(svc->pump(1).ok());
    ASSERT_TRUE((*prod)->poll(0).ok());
    if (auto n = (*prod)->try_send_some(second, done)) done += *n;
  }
  std::vector<shard_ack> acks;
  for (int round = 0; round < 100000 && acks.empty(); ++round) {
    ASSERT_TRUE(svc->pump(1).ok());
    acks = svc->take_acks();
  }
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].unit, 1u);
  EXPECT_EQ(acks[0].accepted_groups, (std::vector<group_id>{10, 11}));
  EXPECT_EQ(svc->shard().stats().resident_samples, 2 * kG);
  EXPECT_EQ(svc->num_bad_frames(), 0u);
}

TEST_F(plane, a_message_of_too_many_bodies_is_dropped_whole_and_counted) {
  auto svc = bind(4096, 4096);
  ASSERT_TRUE(svc);
  svc->shard().apply({ledger_event::kind::attempt_opened, "s0", 1, 1, {10}, kG});
  void* raw = zmq_socket(ctx->handle(), ZMQ_DEALER);
  ASSERT_NE(raw, nullptr);
  int zero = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &zero, sizeof zero);
  ASSERT_EQ(zmq_connect(raw, svc->endpoint().c_str()), 0);
  const std::string one = messages::encode(make(1, 1, 0, 10, 0));
  for (size_t i = 0; i <= kMaxSamplesPerMessage; ++i)  // one body over the limit
    ASSERT_EQ(zmq_send(raw, one.data(), one.size(), i < kMaxSamplesPerMessage ? ZMQ_SNDMORE : 0),
              int(one.size()));
  for (int round = 0; round < 100000 && svc->num_bad_frames() == 0; ++round)
    ASSERT_TRUE(svc->pump(1).ok());
  EXPECT_EQ(svc->num_bad_frames(), 1u);
  EXPECT_EQ(svc->shard().stats().resident_samples, 0u) << "none of its samples was taken";
  zmq_close(raw);
}

TEST_F(plane, bad_endpoints_and_names_are_clear_errors) {
  shard_options so;
  so.name = "s0";
  auto bad = shard_service::bind(ctx, "nonsense://x", so);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("nonsense://x"), std::string::npos) << bad.err().message;
  EXPECT_NE(bad.err().message.find("zmq_bind"), std::string::npos) << bad.err().message;
  auto noname = sample_producer::connect(ctx, "tcp://127.0.0.1:1", "");
  ASSERT_FALSE(noname.ok());
  EXPECT_EQ(noname.err().code, errc::invalid_argument);
}

}  // namespace
}  // namespace moerl::ledger
