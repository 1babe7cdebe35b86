// The journal and snapshot formats do not change by accident: data/format_v2/ is the store
// the ledger of an earlier version wrote for the run in format_fixture.h. Today's ledger
// must write byte-identical objects for the same run, and recover the same state from the
// old objects.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "store/local_store.h"
#include "tests/ledger/format_fixture.h"
#include "tests/support/temp_dir.h"

namespace moerl::ledger {
namespace {

namespace fs = std::filesystem;

// Every file under `root`, by path relative to it, with its bytes.
std::map<std::string, std::string> files_under(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    out[fs::relative(e.path(), root).string()].assign(std::istreambuf_iterator<char>(f), {});
  }
  return out;
}

// The journal's records, in order: the frames of every segment in key order. How records
// are grouped into segment objects depends on the store (appends or not) and is not format.
std::string journal_records(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, bytes] : files)
    if (name.rfind("ledger/journal/", 0) == 0) out += bytes;
  return out;
}

TEST(ledger_format_fixture, the_same_run_writes_the_same_journal_and_snapshot_bytes) {
  moerl::testing::temp_dir dir("ledger-format");
  auto st = store::local_store::open(dir.path(), /*durable=*/false);
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  ASSERT_TRUE(fixture::run_format_fixture(**st));
  auto written = files_under(dir.path());
  auto fixture = files_under(MOERL_LEDGER_FORMAT_FIXTURE);
  ASSERT_EQ(fixture.size(), 3u);  // one snapshot, two journal segments (written by puts)
  size_t snapshots = 0;
  for (const auto& [name, bytes] : fixture) {
    if (name.rfind("ledger/snapshot/", 0) != 0) continue;
    ++snapshots;
    ASSERT_TRUE(written.count(name)) << name;
    EXPECT_TRUE(written.at(name) == bytes) << name << " differs from the fixture";
  }
  EXPECT_EQ(snapshots, 1u);
  EXPECT_TRUE(journal_records(written) == journal_records(fixture))
      << "the journal's records differ from the fixture's";
}

TEST(ledger_format_fixture, a_store_written_by_the_earlier_version_recovers) {
  moerl::testing::temp_dir dir("ledger-format");
  // Recovery appends to the store: work on a copy.
  fs::copy(MOERL_LEDGER_FORMAT_FIXTURE, dir.path(), fs::copy_options::recursive);
  auto st = store::local_store::open(dir.path(), /*durable=*/false);
  ASSERT_TRUE(st.ok()) << st.err().to_string();
  manual_clock clk{0};
  recovery_info info;
  auto l = work_ledger::open(fixture::format_fixture_options(), clk, st->get(), &info);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  EXPECT_TRUE(info.recovered);
  EXPECT_EQ(info.epoch, 2u);
  EXPECT_EQ(info.snapshot_seq, 15u);
  EXPECT_EQ(info.records_replayed, 5u);
  EXPECT_EQ(info.torn_bytes, 0u);
  EXPECT_EQ(info.leases_expired, 1u);  // unit 4, leased to w4 at the crash
  const work_ledger& r = **l;
  EXPECT_TRUE(r.check_invariant().ok()) << r.check_invariant().err().to_string();
  const accounting& c = r.counters();
  EXPECT_EQ(c.dispatched, 16u);
  EXPECT_EQ(c.committed, 4u);
  EXPECT_EQ(c.trained, 4u);
  EXPECT_EQ(c.in_flight, 0u);
  EXPECT_EQ(c.dropped.at(drop_reason::worker_dead), 4u);
  EXPECT_EQ(c.dropped.at(drop_reason::shard_lost), 4u);
  EXPECT_EQ(c.dropped.at(drop_reason::coordinator_restart), 4u);
  ASSERT_EQ(r.num_units(), 4u);
  auto u1 = r.find(1);
  EXPECT_EQ(u1->state, unit_state::committed);
  EXPECT_EQ(u1->trained, (std::vector<group_id>{10, 11}));
  auto u2 = r.find(2);  // its shard s1 was lost before its groups were trained
  EXPECT_EQ(u2->state, unit_state::pending);
  EXPECT_EQ(u2->todo, (std::vector<group_id>{20, 21}));
  EXPECT_TRUE(u2->committed.empty());
  EXPECT_EQ(r.find(3)->state, unit_state::pending);
  EXPECT_EQ(r.find(4)->state, unit_state::pending);
  EXPECT_EQ(r.num_pending(), 3u);
}

}  // namespace
}  // namespace moerl::ledger
