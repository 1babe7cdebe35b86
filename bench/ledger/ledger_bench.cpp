#include "bench/ledger/ledger_bench.h"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "bench/support.h"
#include "common/percentile.h"
#include "ledger/sample_plane.h"
#include "ledger/work_ledger.h"
#include "provenance/provenance.h"
#include "store/local_store.h"

namespace moerl::bench {

namespace {

using namespace moerl::ledger;
using clk = bench_clock;
namespace fs = std::filesystem;

double percentile(std::vector<double> v, double fraction) {
  return percentile_of(std::move(v), fraction * 100);
}

nlohmann::json spread(const std::vector<double>& v) {
  double mn = *std::min_element(v.begin(), v.end());
  double mx = *std::max_element(v.begin(), v.end());
  return {{"median", percentile(v, 0.5)}, {"min", mn}, {"max", mx}, {"runs", v}};
}

constexpr uint32_t kGroupSize = 8;
constexpr uint32_t kGroupsPerUnit = 2;

// One full unit cycle; returns the acquire latency in microseconds.
double cycle(work_ledger& l, const std::string& worker) {
  auto t0 = clk::now();
  auto ls = need(l.acquire(worker), "acquire");
  double us = us_since(t0);
  (void)need(l.report(ls.unit, ls.attempt, worker, ls.num_samples()), "report");
  (void)need(l.record_ack({ls.unit, ls.attempt, ls.shard, ls.groups, {}}), "ack");
  for (auto g : ls.groups)
    need(l.record_consumed({ls.unit, ls.attempt, g, kGroupSize}), "consumed");
  (void)l.take_events();
  return us;
}

std::unique_ptr<work_ledger> fresh_ledger(const ledger::clock& c, store::object_store* st,
                                          int units) {
  ledger_options o;
  o.group_size = kGroupSize;
  o.max_groups_per_unit = kGroupsPerUnit;
  o.snapshot_every = 1024;
  auto l = need(work_ledger::open(o, c, st), "open ledger");
  need(l->add_shard("s0"), "add_shard");
  need(l->add_shard("s1"), "add_shard");
  for (int u = 0; u < units; ++u)
    (void)need(l->add_unit({uint64_t(2 * u), uint64_t(2 * u + 1)}), "add_unit");
  need(l->sync(), "sync");
  return l;
}

nlohmann::json bench_in_memory(const ledger_bench_options& opt) {
  steady_clock_source c;
  std::vector<double> rates, p50, p99;
  for (int r = 0; r < opt.runs; ++r) {
    auto l = fresh_ledger(c, nullptr, opt.units);
    std::vector<double> lat;
    lat.reserve(opt.units);
    auto t0 = clk::now();
    for (int u = 0; u < opt.units; ++u) lat.push_back(cycle(*l, "w" + std::to_string(u % 8)));
    rates.push_back(opt.units / seconds_since(t0));
    p50.push_back(percentile(lat, 0.5));
    p99.push_back(percentile(lat, 0.99));
    need(l->check_invariant(), "invariant");
  }
  return {{"units", opt.units},
          {"units_per_s", spread(rates)},
          {"acquire_p50_us", spread(p50)},
          {"acquire_p99_us", spread(p99)},
          {"note", "one unit cycle = acquire + report + ack + 2 consumed, each a journal record"}};
}

// The local store with its appends hidden: the journal then writes one object per sync, as it
// does on S3 and as it did everywhere before it appended (the baseline of the same run).
class whole_objects_only final : public store::object_store {
 public:
  explicit whole_objects_only(std::unique_ptr<store::object_store> s) : s_(std::move(s)) {}
  status put(const std::string& k, const std::string& b) override { return s_->put(k, b); }
  result<std::string> get(const std::string& k) const override { return s_->get(k); }
  result<std::vector<std::string>> list(const std::string& p) const override { return s_->list(p); }
  status remove(const std::string& k) override { return s_->remove(k); }
  status remove_unsynced(const std::vector<std::string>& k) override {
    return s_->remove_unsynced(k);
  }
  std::string describe() const override { return s_->describe() + " (no appends)"; }

 private:
  std::unique_ptr<store::object_store> s_;
};

nlohmann::json bench_journaled(const ledger_bench_options& opt, const fs::path& dir, bool fsync,
                               bool appends) {
  steady_clock_source c;
  std::vector<double> rates, sync_p50, sync_p99, recover_s;
  uint64_t records = 0;
  for (int r = 0; r < opt.runs; ++r) {
    fs::remove_all(dir);
    std::unique_ptr<store::object_store> st =
        need(store::local_store::open(dir.string(), fsync), "open store");
    if (!appends) st = std::make_unique<whole_objects_only>(std::move(st));
    auto l = fresh_ledger(c, st.get(), opt.journaled_units);
    std::vector<double> syncs;
    auto t0 = clk::now();
    for (int u = 0; u < opt.journaled_units; ++u) {
      cycle(*l, "w" + std::to_string(u % 8));
      auto ts = clk::now();
      need(l->sync(), "sync");
      syncs.push_back(us_since(ts));
    }
    rates.push_back(opt.journaled_units / seconds_since(t0));
    sync_p50.push_back(percentile(syncs, 0.5));
    sync_p99.push_back(percentile(syncs, 0.99));
    l.reset();
    ledger_options o;
    o.group_size = kGroupSize;
    o.max_groups_per_unit = kGroupsPerUnit;
    o.snapshot_every = 1024;
    recovery_info info;
    auto t1 = clk::now();
    auto back = need(work_ledger::open(o, c, st.get(), &info), "recover");
    recover_s.push_back(seconds_since(t1));
    records = info.records_replayed;
    need(back->check_invariant(), "invariant after recovery");
  }
  fs::remove_all(dir);
  return {{"units", opt.journaled_units},
          {"fsync", fsync},
          {"journal", appends ? "appended to one segment per snapshot period"
                              : "one object per sync (S3's way; everywhere before 5 Dec 2026)"},
          {"units_per_s", spread(rates)},
          {"sync_p50_us", spread(sync_p50)},
          {"sync_p99_us", spread(sync_p99)},
          {"recovery_s", spread(recover_s)},
          {"recovery_records_replayed", records},
          {"note",
           "sync() after every unit cycle: one group commit per unit (a local store "
           "appends it to the open journal segment)"}};
}

// What the coordinator's 100 ms tick asks the ledger, against the ledger's size: a run keeps
// every unit it created, and these queries once walked all of them (issue 28). N units, all
// trained but 64 leased; the time of expire_due (nothing due) + num_pending + num_leased, and
// of check_invariant (still a walk over every unit: it recomputes the books from them).
nlohmann::json bench_tick(const ledger_bench_options& opt) {
  steady_clock_source c;
  nlohmann::json rows = nlohmann::json::array();
  for (int n : opt.tick_units) {
    auto l = fresh_ledger(c, nullptr, n);
    constexpr int kOpen = 64;
    for (int u = 0; u + kOpen < n; ++u) cycle(*l, "w" + std::to_string(u % 8));
    for (int u = 0; u < kOpen && u < n; ++u) (void)need(l->acquire("open"), "acquire");
    std::vector<double> queries, invariant;
    for (int r = 0; r < 50; ++r) {
      auto t0 = clk::now();
      auto ended = l->expire_due();
      size_t seen = l->num_pending() + l->num_leased() + ended.size();
      queries.push_back(us_since(t0));
      if (seen != size_t(std::min(n, kOpen))) throw std::runtime_error("tick: wrong lease count");
    }
    for (int r = 0; r < 5; ++r) {
      auto t0 = clk::now();
      need(l->check_invariant(), "invariant");
      invariant.push_back(us_since(t0));
    }
    rows.push_back({{"units", n},
                    {"open_leases", std::min(n, kOpen)},
                    {"tick_queries_us", spread(queries)},
                    {"check_invariant_us", spread(invariant)}});
  }
  return rows;
}

nlohmann::json bench_sample_plane(const ledger_bench_options& opt) {
  constexpr uint64_t kCapacity = 4096;
  std::vector<double> rates, mbps;
  uint64_t peak = 0, bytes_per_sample = 0;
  for (int r = 0; r < opt.runs; ++r) {
    auto ctx = need(zmq::zmq_context::create(), "zmq context");
    shard_options so;
    so.name = "s0";
    so.group_size = kGroupSize;
    so.capacity_samples = kCapacity;
    sample_plane_options po;
    po.credits_per_producer = 512;
    auto svc = need(shard_service::bind(ctx, "tcp://127.0.0.1:*", so, po), "bind");
    const int per_unit = kGroupSize * kGroupsPerUnit;
    const int num_units = opt.samples / per_unit;
    const int total = num_units * per_unit;
    // The ledger's side is played by the shard thread: every unit's lease is known up
    // front, and each ack is committed at once.
    for (int u = 0; u < num_units; ++u)
      svc->shard().apply({ledger_event::kind::attempt_opened,
                          "s0",
                          uint64_t(u + 1),
                          1,
                          {uint64_t(2 * u), uint64_t(2 * u + 1)},
                          kGroupSize});
    messages::sample proto;
    proto.prompt_tokens.assign(64, 7);
    proto.tokens.assign(256, 11);
    proto.logprobs.assign(256, -0.5f);
    proto.worker = "p0";
    bytes_per_sample = messages::encode(proto).size();
    std::atomic<bool> failed{false};
    std::string failure;
    std::mutex failure_mu;
    auto fail = [&](const std::string& what) {
      std::lock_guard<std::mutex> g(failure_mu);
      failure = what;
      failed = true;
    };
    std::atomic<int> received{0};
    auto t0 = clk::now();
    // Producer and trainer each own their socket on their own thread, as in a cluster.
    std::thread producer([&] {
      auto prod = sample_producer::connect(ctx, svc->endpoint(), "p0");
      if (!prod) return fail(prod.err().to_string());
      if (auto d = (*prod)->declare_backlog(uint32_t(total)); !d) return fail(d.err().to_string());
      messages::sample s = proto;
      for (int i = 0; i < total && !failed;) {
        if (auto p = (*prod)->poll((*prod)->credits() ? 0 : 5); !p)
          return fail(p.err().to_string());
        while (i < total && (*prod)->credits() > 0) {
          s.work_unit = uint64_t(i / per_unit + 1);
          s.attempt = 1;
          s.seq = uint32_t(i % per_unit);
          s.group_id = uint64_t(2 * (i / per_unit) + s.seq / kGroupSize);
          s.index_in_group = s.seq % kGroupSize;
          if (auto st = (*prod)->try_send(s); !st)
            return fail("producer (sent " + std::to_string((*prod)->num_sent()) + ", credits " +
                        std::to_string((*prod)->credits()) + "): " + st.err().to_string());
          ++i;
        }
      }
      // Linger is 0: closing the socket now would discard samples still queued locally.
      while (received < total && !failed) (void)(*prod)->poll(5);
    });
    std::thread trainer([&] {
      auto t = batch_consumer::connect(ctx, svc->endpoint(), "t0");
      if (!t) return fail(t.err().to_string());
      bool asked = false;
      while (received < total && !failed) {
        if (!asked) {
          if (auto st = (*t)->request(64); !st) return fail("trainer: " + st.err().to_string());
          asked = true;
        }
        auto b = (*t)->poll(5);
        if (!b) return fail(b.err().to_string());
        if (*b) {
          received += int((*b)->samples.size());
          asked = false;
        }
      }
    });
    // A benchmark must not hang: no progress for 10 s is a failure with the state.
    int last_received = -1;
    auto last_progress = clk::now();
    while (received < total && !failed) {
      if (received != last_received) {
        last_received = received;
        last_progress = clk::now();
      } else if (seconds_since(last_progress) > 10) {
        fail("no progress for 10 s: received " + std::to_string(received) + " of " +
             std::to_string(total) + ", shard " + svc->shard().stats().to_json().dump() +
             ", ready groups " + std::to_string(svc->shard().num_ready_groups()) +
             ", credits outstanding " + std::to_string(svc->credits_outstanding()));
        break;
      }
      auto p = svc->pump(1);
      if (!p) {
        fail(p.err().to_string());
        break;
      }
      for (const auto& a : svc->take_acks())
        svc->shard().apply({ledger_event::kind::unit_committed, "s0", a.unit, a.attempt, {}, 0});
      (void)svc->take_consumed();
    }
    producer.join();
    trainer.join();
    if (failed) throw std::runtime_error("sample plane: " + failure);
    double secs = seconds_since(t0);
    rates.push_back(total / secs);
    mbps.push_back(total * double(bytes_per_sample) / secs / 1e6);
    peak = std::max(peak, svc->shard().stats().peak_samples);
  }
  return {{"samples", opt.samples},
          {"sample_bytes", bytes_per_sample},
          {"capacity_samples", kCapacity},
          {"peak_resident_samples", peak},
          {"samples_per_s", spread(rates)},
          {"mb_per_s", spread(mbps)},
          {"transport",
           "tcp://127.0.0.1; producer, shard and trainer on three threads; "
           "trainer asks for 64 groups at a time"}};
}

}  // namespace

nlohmann::json run_ledger_bench(const ledger_bench_options& opt) {
  fs::path dir = opt.scratch.empty() ? fs::temp_directory_path() /
                                           ("moerl-ledger-bench-" + std::to_string(::getpid()))
                                     : fs::path(opt.scratch);
  nlohmann::json out;
  out["benchmark"] = "ledger";
  out["config"] = {{"units", opt.units},          {"journaled_units", opt.journaled_units},
                   {"samples", opt.samples},      {"runs", opt.runs},
                   {"group_size", kGroupSize},    {"groups_per_unit", kGroupsPerUnit},
                   {"tick_units", opt.tick_units}};
  out["lease_cycle_in_memory"] = bench_in_memory(opt);
  // Object per sync and appends alternate, so that both see the same machine.
  out["lease_cycle_journaled_nofsync_objects"] = bench_journaled(opt, dir, false, false);
  out["lease_cycle_journaled_nofsync"] = bench_journaled(opt, dir, false, true);
  out["lease_cycle_journaled_fsync_objects"] = bench_journaled(opt, dir, true, false);
  out["lease_cycle_journaled_fsync"] = bench_journaled(opt, dir, true, true);
  out["sample_plane"] = bench_sample_plane(opt);
  out["coordinator_tick"] = bench_tick(opt);
  out["provenance"] = collect_provenance();
  return out;
}

}  // namespace moerl::bench
