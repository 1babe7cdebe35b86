// The control-plane messages that used to be hand-packed byte strings (lease batches,
// give-backs, ledger events for a shard, shard acks, prompts): every field survives a round
// trip, and bytes that are damaged or that break a message's own rules are refused by name.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "messages/all.h"
#include "messages/shard.capnp.h"
#include "messages/work.capnp.h"

using namespace moerl;
using namespace moerl::messages;

namespace {

std::vector<lease> three_leases() {
  std::vector<lease> in(3);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].unit.id = 10 + i;
    in[i].unit.group_ids = {100 + i, 200 + i};
    in[i].unit.samples_per_group = 8;
    in[i].unit.task = "modpow";
    in[i].attempt = (1u << 20) | uint32_t(i + 1);
    in[i].worker = "w/0";
    in[i].deadline_unix_ms = 1234567 + i;
    in[i].policy_version = 5;
    in[i].shard = i == 1 ? "b" : "a";
    in[i].shard_endpoint = i == 1 ? "tcp://b:1" : "tcp://a:1";
  }
  return in;
}

// A frame around a message built here with the schema directly (to write what our encoders
// never would). The header layout is messages/codec.h's.
std::string frame_of(kind k, capnp::MessageBuilder& b) {
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  std::string out = {'M',
                     'O',
                     'E',
                     1,
                     static_cast<char>(static_cast<uint16_t>(k) & 0xff),
                     static_cast<char>(static_cast<uint16_t>(k) >> 8),
                     0,
                     0};
  out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  return out;
}

}  // namespace

TEST(lease_batch_codec, every_lease_comes_back_complete_with_its_own_shard) {
  const auto in = three_leases();
  auto out = decode<lease_batch>(encode(lease_batch{in}));
  ASSERT_TRUE(out) << out.err().to_string();
  ASSERT_EQ(out->leases.size(), 3u);
  for (size_t i = 0; i < in.size(); ++i) {
    const lease& l = out->leases[i];
    EXPECT_EQ(l.unit.id, in[i].unit.id);
    EXPECT_EQ(l.unit.group_ids, in[i].unit.group_ids);
    EXPECT_EQ(l.unit.samples_per_group, 8u);
    EXPECT_EQ(l.unit.task, "modpow");
    EXPECT_EQ(l.attempt, in[i].attempt);
    EXPECT_EQ(l.worker, "w/0");
    EXPECT_EQ(l.deadline_unix_ms, in[i].deadline_unix_ms);
    EXPECT_EQ(l.policy_version, 5u);
    EXPECT_EQ(l.shard, in[i].shard);
    EXPECT_EQ(l.shard_endpoint, in[i].shard_endpoint);
  }
  auto none = decode<lease_batch>(encode(lease_batch{}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->leases.empty());
}

TEST(lease_batch_codec, every_truncation_and_trailing_words_are_refused) {
  const std::string bytes = encode(lease_batch{three_leases()});
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = decode<lease_batch>(bytes.substr(0, n));
    ASSERT_FALSE(cut) << "accepted " << n << " of " << bytes.size() << " bytes";
    const errc c = cut.err().code;
    EXPECT_TRUE(c == errc::truncated_message || c == errc::malformed_message)
        << cut.err().to_string();
  }
  auto trailing = decode<lease_batch>(bytes + std::string(8, '\0'));
  ASSERT_FALSE(trailing);
  EXPECT_NE(trailing.err().message.find("trailing"), std::string::npos) << trailing.err().message;
}

TEST(lease_batch_codec, a_lease_naming_a_missing_shard_or_no_groups_is_refused_by_name) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<schema::LeaseBatch>();
  r.setSamplesPerGroup(4);
  r.initShards(1);
  auto e = r.initLeases(1);
  e[0].setShard(1);
  e[0].initGroupIds(1).set(0, 7);
  auto bad_shard = decode<lease_batch>(frame_of(kind::lease_batch, b));
  ASSERT_FALSE(bad_shard);
  EXPECT_EQ(bad_shard.err().code, errc::malformed_message);
  EXPECT_NE(bad_shard.err().message.find("names shard 1 of 1"), std::string::npos)
      << bad_shard.err().message;
  e[0].setShard(0);
  e[0].initGroupIds(0);
  auto no_groups = decode<lease_batch>(frame_of(kind::lease_batch, b));
  ASSERT_FALSE(no_groups);
  EXPECT_NE(no_groups.err().message.find("no groups"), std::string::npos)
      << no_groups.err().message;
  e[0].initGroupIds(1).set(0, 7);
  r.setSamplesPerGroup(0);
  auto no_size = decode<lease_batch>(frame_of(kind::lease_batch, b));
  ASSERT_FALSE(no_size);
  EXPECT_NE(no_size.err().message.find("samples_per_group"), std::string::npos)
      << no_size.err().message;
}

TEST(lease_give_back_codec, pairs_round_trip_in_order) {
  lease_give_back in{"rollout-0/3", {{1ull << 40, 0xffffffffu}, {2, 1}}};
  auto out = decode<lease_give_back>(encode(in));
  ASSERT_TRUE(out) << out.err().to_string();
  EXPECT_EQ(out->worker, "rollout-0/3");
  ASSERT_EQ(out->leases.size(), 2u);
  EXPECT_EQ(out->leases[0].unit, 1ull << 40);
  EXPECT_EQ(out->leases[0].attempt, 0xffffffffu);
  EXPECT_EQ(out->leases[1].unit, 2u);
  EXPECT_EQ(out->leases[1].attempt, 1u);
}

TEST(ledger_events_codec, events_round_trip_in_order) {
  ledger_events in{
      {{ledger_event_kind::attempt_opened, 1ull << 40, (3u << 20) | 7u, 8, {11, 12, ~0ull}},
       {ledger_event_kind::attempt_fenced, 2, 1, 0, {}},
       {ledger_event_kind::unit_committed, 3, 0xffffffffu, 0, {}}}};
  auto out = decode<ledger_events>(encode(in));
  ASSERT_TRUE(out) << out.err().to_string();
  ASSERT_EQ(out->events.size(), in.events.size());
  for (size_t i = 0; i < in.events.size(); ++i) {
    EXPECT_EQ(out->events[i].what, in.events[i].what);
    EXPECT_EQ(out->events[i].unit, in.events[i].unit);
    EXPECT_EQ(out->events[i].attempt, in.events[i].attempt);
    EXPECT_EQ(out->events[i].group_size, in.events[i].group_size);
    EXPECT_EQ(out->events[i].groups, in.events[i].groups);
  }
  auto none = decode<ledger_events>(encode(ledger_events{}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->events.empty());
}

TEST(ledger_events_codec, an_unknown_event_kind_is_refused_by_name) {
  capnp::MallocMessageBuilder b;
  auto list = b.initRoot<schema::LedgerEvents>().initEvents(2);
  list[1].setKind(static_cast<schema::LedgerEvent::Kind>(9));
  auto r = decode<ledger_events>(frame_of(kind::ledger_events, b));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, errc::malformed_message);
  EXPECT_NE(r.err().message.find("ledger event 1: unknown kind 9"), std::string::npos)
      << r.err().message;
}

TEST(shard_ack_and_prompt_codec, group_lists_and_tokens_round_trip) {
  shard_ack a{7, 3, "buffer-2", {1, ~0ull}, {5}};
  auto back = decode<shard_ack>(encode(a));
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->unit, 7u);
  EXPECT_EQ(back->attempt, 3u);
  EXPECT_EQ(back->shard, "buffer-2");
  EXPECT_EQ(back->accepted_groups, a.accepted_groups);
  EXPECT_EQ(back->stale_groups, a.stale_groups);
  prompt p{99, {1, 0xffffffffu, 3}};
  auto pb = decode<prompt>(encode(p));
  ASSERT_TRUE(pb) << pb.err().to_string();
  EXPECT_EQ(pb->group_id, 99u);
  EXPECT_EQ(pb->tokens, p.tokens);
}

TEST(shard_reports_codec, acks_steps_and_per_item_errors_round_trip_in_order) {
  shard_reports r{{{7, 3, "buffer-2", {1, ~0ull}, {5}}, {8, 1, "buffer-2", {}, {}}},
                  {{7, 3, ~0ull, 8, 41, 4}, {6, 2, 9, 8, 12, 0}}};
  auto back = decode<shard_reports>(encode(r));
  ASSERT_TRUE(back) << back.err().to_string();
  ASSERT_EQ(back->acks.size(), 2u);
  EXPECT_EQ(back->acks[0].accepted_groups, r.acks[0].accepted_groups);
  EXPECT_EQ(back->acks[0].stale_groups, r.acks[0].stale_groups);
  EXPECT_EQ(back->acks[1].unit, 8u);
  ASSERT_EQ(back->consumed.size(), 2u);
  EXPECT_EQ(back->consumed[0].group, ~0ull);
  EXPECT_EQ(back->consumed[0].handout, 41u);
  EXPECT_EQ(back->consumed[0].step, 4u);
  EXPECT_EQ(back->consumed[1].unit, 6u);
  EXPECT_EQ(back->consumed[1].num_samples, 8u);
  auto none = decode<shard_reports>(encode(shard_reports{}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->acks.empty() && none->consumed.empty());
  auto rep = decode<shard_reports_reply>(encode(shard_reports_reply{{"", "refused", ""}}));
  ASSERT_TRUE(rep) << rep.err().to_string();
  EXPECT_EQ(rep->errors, (std::vector<std::string>{"", "refused", ""}));
}

TEST(trainer_claim_codec, claims_confirmations_and_grants_round_trip) {
  trainer_claim c{"trainer-0", ~0ull, {{7, 3, 1, 40}, {7, 3, ~0ull, 41}}, {{6, 2, 9, 12}}};
  auto back = decode<trainer_claim>(encode(c));
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_EQ(back->consumer, "trainer-0");
  EXPECT_EQ(back->incarnation, ~0ull);
  ASSERT_EQ(back->claims.size(), 2u);
  EXPECT_EQ(back->claims[1].unit, 7u);
  EXPECT_EQ(back->claims[1].attempt, 3u);
  EXPECT_EQ(back->claims[1].group, ~0ull);
  EXPECT_EQ(back->claims[1].handout, 41u);
  ASSERT_EQ(back->confirmed.size(), 1u);
  EXPECT_EQ(back->confirmed[0].handout, 12u);
  auto none = decode<trainer_claim>(encode(trainer_claim{}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->claims.empty());
  auto rep = decode<trainer_claim_reply>(encode(trainer_claim_reply{{true, false, true}}));
  ASSERT_TRUE(rep) << rep.err().to_string();
  EXPECT_EQ(rep->granted, (std::vector<bool>{true, false, true}));
  batch b;
  b.handouts = {5, 6};
  auto bb = decode<batch>(encode(b));
  ASSERT_TRUE(bb);
  EXPECT_EQ(bb->handouts, b.handouts);
}
