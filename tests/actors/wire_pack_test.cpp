// The integer lists and ledger-event batches that CAF messages carry between nodes: they
// round-trip exactly, and bytes from a peer that do not decode are refused with an error
// that names the problem, never read past their end.
#include <gtest/gtest.h>

#include <set>

#include "actors/wire_pack.h"

using namespace moerl;
using namespace moerl::actors;

namespace {

std::vector<ledger::ledger_event> some_events() {
  std::vector<ledger::ledger_event> v(3);
  v[0].what = ledger::ledger_event::kind::attempt_opened;
  v[0].unit = 1ull << 40;
  v[0].attempt = (3u << 20) | 7u;
  v[0].groups = {11, 12, ~0ull};
  v[0].group_size = 8;
  v[1].what = ledger::ledger_event::kind::attempt_fenced;
  v[1].unit = 2;
  v[1].attempt = 1;
  v[2].what = ledger::ledger_event::kind::unit_committed;
  v[2].unit = 3;
  v[2].attempt = 0xffffffffu;
  return v;
}

}  // namespace

TEST(WirePack, ledger_events_round_trip_in_order_and_take_the_receivers_shard_name) {
  auto in = some_events();
  auto out = unpack_ledger_events(pack_ledger_events(in), "buffer-7");
  ASSERT_TRUE(out) << out.err().to_string();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ((*out)[i].what, in[i].what);
    EXPECT_EQ((*out)[i].unit, in[i].unit);
    EXPECT_EQ((*out)[i].attempt, in[i].attempt);
    EXPECT_EQ((*out)[i].groups, in[i].groups);
    EXPECT_EQ((*out)[i].group_size, in[i].group_size);
    EXPECT_EQ((*out)[i].shard, "buffer-7");
  }
  auto none = unpack_ledger_events("", "s");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(WirePack, every_truncation_of_an_event_batch_is_refused) {
  const std::string full = pack_ledger_events(some_events());
  // Cuts at event boundaries decode to a prefix; every other cut is an error.
  std::set<size_t> boundaries{0, full.size()};
  {
    std::vector<ledger::ledger_event> prefix;
    for (auto& e : some_events()) {
      prefix.push_back(e);
      boundaries.insert(pack_ledger_events(prefix).size());
    }
  }
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    auto r = unpack_ledger_events(full.substr(0, cut), "s");
    if (boundaries.count(cut)) {
      EXPECT_TRUE(r) << "cut " << cut;
    } else {
      ASSERT_FALSE(r) << "cut " << cut;
      EXPECT_EQ(r.err().code, errc::malformed_message);
      EXPECT_NE(r.err().message.find("truncated"), std::string::npos) << r.err().message;
    }
  }
}

TEST(WirePack, unknown_kinds_and_absurd_group_counts_are_refused) {
  std::string bad = pack_ledger_events(some_events());
  bad[0] = 9;  // kind of the first event
  auto r = unpack_ledger_events(bad, "s");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("unknown kind 9"), std::string::npos) << r.err().message;
  // A header that claims 2^32-1 groups with none behind it must not allocate or over-read.
  std::string huge = pack_ledger_events({some_events()[1]});
  for (int i = 0; i < 4; ++i) huge[huge.size() - 1 - i] = '\xff';
  auto h = unpack_ledger_events(huge, "s");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.err().code, errc::malformed_message);
}

TEST(WirePack, u64_lists_round_trip_and_refuse_ragged_lengths) {
  std::vector<uint64_t> v{0, 1, ~0ull, 1ull << 63};
  auto back = unpack_u64s(pack_u64s(v));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, v);
  auto ragged = unpack_u64s(std::string(12, 'x'));
  ASSERT_FALSE(ragged);
  EXPECT_EQ(ragged.err().code, errc::malformed_message);
}
