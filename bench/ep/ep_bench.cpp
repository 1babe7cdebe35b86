#include "bench/ep/ep_bench.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bench/ep/mpi_peer_run.h"
#include "bench/support.h"
#include "common/percentile.h"
#include "common/status_try.h"
#include "fabric/bootstrap.h"
#include "fabric/ep_group.h"
#include "fabric/ep_workload.h"
#include "fabric/transport.h"
#include "provenance/provenance.h"

namespace moerl::bench {

using namespace moerl::fabric;

namespace {

constexpr int kExperts = 256;
constexpr int kTopk = 8;

workload_params workload_of(const ep_bench_options& o) {
  workload_params p;
  p.num_ranks = o.ranks;
  p.num_experts = kExperts;
  p.hidden = o.hidden;
  p.topk = kTopk;
  p.dtype = ep_dtype::bf16;
  p.tokens_per_rank = o.shape == "prefill" ? 4096 : 128;
  p.routing = o.routing;
  p.seed = 2024;
  return p;
}

int iterations_of(const ep_bench_options& o) {
  if (o.iterations > 0) return o.iterations;
  return o.shape == "prefill" ? 4 : 20;
}

transport_options transport_of(const ep_bench_options& o, int rank, bool shim,
                               const std::string& paths) {
  transport_options t;
  t.paths = paths;
  t.provider = o.provider;
  t.require_provider = true;
  t.reorder_shim = shim;
  t.shim_seed = 99 + static_cast<uint64_t>(rank);
  return t;
}

status barrier(bootstrap& b) {
  auto r = b.allgather(all_members(b), "", 600000);
  if (!r) return r.err();
  return {};
}

// Raw write bandwidth: `total` bytes in writes of `message` bytes, each with an immediate,
// that the receiver acknowledges once it counted them all. paths "fabric": libfabric RMA
// writes; "auto": the same-host path (a copy into the peer's mapping). One pair (every_rank
// false): rank 0 writes to rank 1 while the others sleep. every_rank: all ranks at once, rank r
// to rank r + 1 (mod n), the contention a dispatch runs under when ranks outnumber cores; the
// figure is per rank, total / the slowest rank's time. Rank 0 returns it (others 0).
result<double> raw_write_gbps(bootstrap& b, const ep_bench_options& o, size_t message, size_t total,
                              const std::string& paths, bool every_rank) {
  const std::vector<int> members = every_rank ? all_members(b) : std::vector<int>{0, 1};
  const int n = static_cast<int>(members.size());
  if (b.rank() >= n) return 0.0;
  const int me = b.rank(), dest = (me + 1) % n, src = (me + n - 1) % n;
  const bool sends = every_rank || me == 0, receives = every_rank || me == 1;
  constexpr uint32_t kData = 1, kAck = 2;
  ASSIGN_OR_RETURN(auto t, open_transport(transport_of(o, me, false, paths)));
  // [0, total) data, then the acknowledgement
  ASSIGN_OR_RETURN(auto reg, t->allocate_region(total + 64));
  char* data = static_cast<char*>(reg.ptr);
  std::memset(data, 1, total + 64);
  std::string mine = t->address();
  mine.append(reinterpret_cast<const char*>(&reg.remote), sizeof(remote_region));
  ASSIGN_OR_RETURN(auto all, b.allgather(members, mine, 60000));
  std::vector<std::string> addrs;
  std::vector<remote_region> regions(n);
  for (int r = 0; r < n; ++r) {
    const std::string& e = all[r];
    addrs.push_back(e.substr(0, e.size() - sizeof(remote_region)));
    std::memcpy(&regions[r], e.data() + e.size() - sizeof(remote_region), sizeof(remote_region));
  }
  if (auto st = t->set_peers(addrs); !st) return st.err();
  if (auto r = b.allgather(members, "", 60000); !r) return r.err();
  const size_t count = total / message;
  const int64_t deadline = now_ns() + o.op_timeout_ms * 1000000;
  std::vector<uint32_t> imms;
  auto drain = [&]() -> status {
    while (t->outstanding() > 0) {
      imms.clear();
      if (auto st = t->progress(imms); !st) return st;
    }
    return {};
  };
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    if (auto r = b.allgather(members, "", 60000); !r) return r.err();
    const auto t0 = bench_clock::now();
    if (sends)
      for (size_t i = 0; i < count; ++i)
        if (auto st = t->write(dest, reg, data + i * message, message, regions[dest], i * message,
                               kData, deadline);
            !st)
          return st.err();
    size_t seen = 0;
    bool acked = !sends, answered = !receives;
    double my_us = 0;
    while (!acked || !answered) {
      imms.clear();
      if (auto st = t->progress(imms); !st) return st.err();
      if (imms.empty()) t->idle_wait(1000000);
      for (uint32_t imm : imms) {
        if (imm == kAck) {
          acked = true;
          my_us = us_since(t0);
        } else {
          ++seen;
        }
      }
      if (!answered && seen >= count) {
        if (auto st = t->write(src, reg, data, 64, regions[src], total, kAck, deadline); !st)
          return st.err();
        answered = true;
      }
      if (now_ns() > deadline)
        return error{errc::timeout, acked ? "raw write: writes missing" : "raw write: no ack"};
    }
    if (auto st = drain(); !st) return st.err();
    // The slowest sender's time: every rank's (0 where it does not send), gathered.
    ASSIGN_OR_RETURN(auto times, b.allgather(members, std::to_string(my_us), 60000));
    double slowest = 0;
    for (const std::string& v : times) slowest = std::max(slowest, std::stod(v));
    best = std::max(best, static_cast<double>(count * message) / (slowest * 1e3));
  }
  if (auto r = b.allgather(members, "", 60000); !r) return r.err();
  return me == 0 ? best : 0.0;
}

double memcpy_gbps() {
  const size_t n = size_t(256) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = bench_clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, static_cast<double>(n) / (us_since(t0) * 1e3));
    a[rep] = b[n - 1 - rep];  // keep the copies observable
  }
  return best;
}

// The largest (source, destination) entry count of the workload: the padded block a
// generic all-to-all must size its buffers for.
int64_t max_pair_entries(const workload_params& p, const std::vector<rank_inputs>& all) {
  const int le = p.num_experts / p.num_ranks;
  int64_t worst = 1;
  for (const rank_inputs& in : all) {
    std::vector<int64_t> per(p.num_ranks, 0);
    for (int64_t e : in.topk_idx)
      if (e >= 0) ++per[e / le];
    worst = std::max(worst, *std::max_element(per.begin(), per.end()));
  }
  return worst;
}

struct mode_samples {
  std::vector<double> dispatch_us, combine_us, total_us;
};

// One mode on one process start: timed iterations, then one checked iteration.
// Returns rank 0's JSON record of the slowest rank per iteration.
result<nlohmann::json> run_mode(bootstrap& b, const ep_bench_options& o, ep_mode mode,
                                const workload_params& p, const std::vector<rank_inputs>& all) {
  ep_config cfg;
  cfg.mode = mode;
  cfg.num_experts = p.num_experts;
  cfg.hidden = p.hidden;
  cfg.topk = p.topk;
  cfg.dtype = p.dtype;
  cfg.max_tokens_per_rank = p.tokens_per_rank;
  cfg.chunk_bytes = o.chunk_bytes;
  cfg.op_timeout_ms = o.op_timeout_ms;
  cfg.ll_entries_per_write = o.ll_entries_per_write;
  if ((mode == ep_mode::low_latency && o.ll_memory == "host_split") ||
      (mode == ep_mode::normal && o.normal_memory == "host_split"))
    cfg.memory = ep_memory::host_split;
  // Receive slots sized to this workload's largest (source, destination) entry count:
  // the worst case (every token on every rank) does not fit in a dev box's memory.
  if (mode != ep_mode::normal) cfg.rows_per_peer = max_pair_entries(p, all);
  ASSIGN_OR_RETURN(auto g, ep_group::create(transport_of(o, b.rank(), o.reorder, o.paths), b,
                                            all_members(b), cfg));
  ep_group& grp = *g;
  const rank_inputs& in = all[grp.rank()];
  std::vector<char> y(std::max<size_t>(in.x.size(), 1));
  const int iters = iterations_of(o);
  std::vector<double> mine;          // dispatch, combine per timed iteration
  std::vector<char> own_expert_out;  // --io-buffers own
  // The step's tokens, where the layer before would have written them (untimed).
  auto tokens = [&]() -> const void* {
    if (o.io_buffers == "own") return in.x.data();
    void* x = grp.dispatch_buffer();
    if (x && !in.x.empty()) std::memcpy(x, in.x.data(), in.x.size());
    return x;
  };
  auto expert_out_of = [&](const dispatch_output& d) -> void* {
    if (o.io_buffers != "own") return grp.combine_buffer();
    own_expert_out.resize(std::max<size_t>(
        static_cast<size_t>(d.num_recv_rows * p.hidden * ep_dtype_size(p.dtype)), 1));
    return own_expert_out.data();
  };
  ep_step_bytes bytes;
  for (int it = 0; it < o.warmup + iters; ++it) {
    const void* x = tokens();
    if (!x) return error{errc::internal, "ep bench: no dispatch buffer after combine"};
    if (auto st = barrier(b); !st) return st.err();
    const auto t0 = bench_clock::now();
    ASSIGN_OR_RETURN(auto d,
                     grp.dispatch(x, in.topk_idx.data(), in.topk_weights.data(), in.num_tokens));
    const double dispatch_us = us_since(t0);
    // Identity experts while timing, untimed like any expert: each writes its output (the
    // received rows) into combine_buffer() (or its own memory, --io-buffers own), as a real
    // expert's last GEMM would (every mode: the same expert work before every combine).
    void* expert_out = expert_out_of(*d);
    if (!expert_out) return error{errc::internal, "ep bench: no combine buffer after dispatch"};
    std::memcpy(expert_out, d->recv_x,
                static_cast<size_t>(d->num_recv_rows * p.hidden * ep_dtype_size(p.dtype)));
    if (auto st = barrier(b); !st) return st.err();
    const auto t2 = bench_clock::now();
    if (auto st = grp.combine(*d, expert_out, y.data()); !st) return st.err();
    const double combine_us = us_since(t2);
    bytes = grp.last_step_bytes();
    if (it >= o.warmup) {
      mine.push_back(dispatch_us);
      mine.push_back(combine_us);
    }
  }
  // The checked iteration: reference rows, stand-in experts, bitwise combine.
  std::string check = "pass", detail;
  {
    const void* x = tokens();
    if (!x) return error{errc::internal, "ep bench: no dispatch buffer after combine"};
    if (auto st = barrier(b); !st) return st.err();
    ASSIGN_OR_RETURN(auto d,
                     grp.dispatch(x, in.topk_idx.data(), in.topk_weights.data(), in.num_tokens));
    if (auto st = check_dispatch(p, all, grp.rank(), *d); !st) {
      check = "fail";
      detail = st.err().to_string();
    }
    std::vector<char> eo;
    apply_experts(p, grp.rank() * grp.num_local_experts(), *d, eo);
    void* expert_out = expert_out_of(*d);
    if (!expert_out) return error{errc::internal, "ep bench: no combine buffer after dispatch"};
    std::memcpy(expert_out, eo.data(), eo.size());
    if (auto st = grp.combine(*d, expert_out, y.data()); !st) return st.err();
    const std::vector<char> want = reference_combine(p, all, grp.rank(), mode);
    if (check == "pass" && !in.x.empty() && std::memcmp(y.data(), want.data(), in.x.size()) != 0) {
      check = "fail";
      detail = "rank " + std::to_string(grp.rank()) + ": combine differs from the reference";
    }
  }
  // Gather: per-iteration times, wire bytes and check results from every rank.
  nlohmann::json mine_j = {{"t", mine},
                           {"dispatch_wire", bytes.dispatch_wire},
                           {"combine_wire", bytes.combine_wire},
                           {"dispatch_writes", bytes.dispatch_writes},
                           {"combine_writes", bytes.combine_writes},
                           {"combine_in_place_peers", bytes.combine_in_place_peers},
                           {"dispatch_in_place_peers", bytes.dispatch_in_place_peers},
                           {"check", check},
                           {"detail", detail},
                           {"paths", grp.describe().peer_paths}};
  ASSIGN_OR_RETURN(auto gathered, b.allgather(all_members(b), mine_j.dump(), 600000));
  nlohmann::json rec;
  rec["mode"] = ep_mode_name(mode);
  rec["transport"] = {{"provider", grp.describe().provider},
                      {"provider_version", grp.describe().provider_version},
                      {"fabric", grp.describe().fabric},
                      {"mr_mode", grp.describe().mr_mode},
                      {"cq_data_size", grp.describe().cq_data_size},
                      {"reorder_shim", grp.describe().reorder_shim}};
  std::vector<double> disp(iters, 0.0), comb(iters, 0.0), total(iters, 0.0);
  uint64_t dw = 0, cw = 0, dn = 0, cn = 0, cin = 0, din = 0;
  std::string all_check = "pass", all_detail;
  nlohmann::json mix = nlohmann::json::object(), mix_count = nlohmann::json::object();
  for (size_t src = 0; src < gathered.size(); ++src) {
    const auto j = nlohmann::json::parse(gathered[src]);
    const auto paths = j["paths"].get<std::vector<std::string>>();
    for (size_t dst = 0; dst < paths.size(); ++dst) {
      const std::string path =
          paths[dst] == "network" ? "network (" + grp.describe().provider + ")" : paths[dst];
      mix[std::to_string(src) + "->" + std::to_string(dst)] = path;
      mix_count[path] = mix_count.value(path, 0) + 1;
    }
    if (paths.empty()) mix_count["network (" + grp.describe().provider + ")"] = gathered.size();
    const auto t = j["t"].get<std::vector<double>>();
    for (int i = 0; i < iters; ++i) {
      disp[i] = std::max(disp[i], t[2 * i]);
      comb[i] = std::max(comb[i], t[2 * i + 1]);
    }
    dw += j["dispatch_wire"].get<uint64_t>();
    cw += j["combine_wire"].get<uint64_t>();
    dn += j["dispatch_writes"].get<uint64_t>();
    cn += j["combine_writes"].get<uint64_t>();
    cin += j["combine_in_place_peers"].get<uint64_t>();
    din += j["dispatch_in_place_peers"].get<uint64_t>();
    if (j["check"] != "pass") {
      all_check = "fail";
      all_detail += j["detail"].get<std::string>() + "; ";
    }
  }
  for (int i = 0; i < iters; ++i) total[i] = disp[i] + comb[i];
  rec["dispatch_us"] = disp;
  rec["combine_us"] = comb;
  rec["total_us"] = total;
  rec["dispatch_wire_bytes"] = dw;
  rec["combine_wire_bytes"] = cw;
  rec["dispatch_writes"] = dn;
  rec["combine_writes"] = cn;
  rec["combine_in_place_pairs"] = cin;
  rec["dispatch_in_place_pairs"] = din;
  rec["check"] = all_check;
  if (!all_detail.empty()) rec["check_detail"] = all_detail;
  rec["rows_per_peer"] = cfg.rows_per_peer;
  rec["transport_mix"] = {{"pairs", mix}, {"count", mix_count}};
  return rec;
}

// One process start: every rank runs every mode; rank 0 writes the records to `out_path`.
int run_start(bootstrap& b, const ep_bench_options& o, const std::string& out_path) {
  auto fail = [&](const std::string& what, const error& e) {
    std::fprintf(stderr, "moerl bench ep: rank %d: %s: %s\n", b.rank(), what.c_str(),
                 e.to_string().c_str());
    return 1;
  };
  const workload_params p = workload_of(o);
  std::vector<rank_inputs> all;
  for (int r = 0; r < o.ranks; ++r) all.push_back(make_rank_inputs(p, r));
  nlohmann::json start;
  const size_t bulk = std::max<size_t>(o.chunk_bytes * 64, size_t(128) << 20);
  auto raw = raw_write_gbps(b, o, o.chunk_bytes, bulk, "fabric", false);
  if (!raw) return fail("raw RMA", raw.err());
  const size_t row = static_cast<size_t>(p.hidden) * 2;
  auto raw_row = raw_write_gbps(b, o, row, row * 4096, "fabric", false);
  if (!raw_row) return fail("raw RMA (row)", raw_row.err());
  auto raw_host = raw_write_gbps(b, o, o.chunk_bytes, bulk, "auto", false);
  if (!raw_host) return fail("raw same-host copy", raw_host.err());
  auto raw_host_all = raw_write_gbps(b, o, o.chunk_bytes, bulk, "auto", true);
  if (!raw_host_all) return fail("raw same-host copy, every rank", raw_host_all.err());
  start["raw_host_copy_gbps"] = *raw_host;
  start["raw_host_copy_every_rank_gbps"] = *raw_host_all;
  start["raw_rma_gbps"] = *raw;
  start["raw_rma_row_gbps"] = *raw_row;
  if (b.rank() == 0) start["memcpy_gbps"] = memcpy_gbps();
  for (const std::string& m : o.modes) {
    auto mode = parse_ep_mode(m);
    if (!mode) return fail("mode", mode.err());
    auto rec = run_mode(b, o, *mode, p, all);
    if (!rec) return fail(std::string("mode ") + m, rec.err());
    start["modes"].push_back(*rec);
  }
  if (b.rank() == 0) {
    std::ofstream f(out_path);
    f << start.dump();
    if (!f) return 2;
  }
  return 0;
}

nlohmann::json percentiles(std::vector<double> v) {
  if (v.empty()) return {{"p50", nullptr}, {"p99", nullptr}};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return nearest_rank_percentile(v, q * 100); };
  return {{"p50", at(0.50)},
          {"p99", at(0.99)},
          {"min", v.front()},
          {"max", v.back()},
          {"samples", v.size()}};
}

std::vector<double> load_average() { return host_load_average(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Spread over process starts: each start's p50, and their coefficient of variation.
nlohmann::json per_start_spread(const std::vector<std::vector<double>>& per_start) {
  std::vector<double> p50s;
  for (const auto& v : per_start)
    if (!v.empty()) p50s.push_back(percentiles(v)["p50"].get<double>());
  double mean = 0, var = 0;
  for (double x : p50s) mean += x / static_cast<double>(p50s.size());
  for (double x : p50s) var += (x - mean) * (x - mean) / static_cast<double>(p50s.size());
  return {{"p50_per_start", p50s}, {"cv", mean > 0 ? std::sqrt(var) / mean : 0.0}};
}

}  // namespace

nlohmann::json run_ep_bench(const ep_bench_options& o) {
  if (o.provider != "shm" && o.provider != "tcp")
    throw std::runtime_error("--provider must be shm or tcp, not '" + o.provider + "'");
  if (o.shape != "decode" && o.shape != "prefill")
    throw std::runtime_error("--shape must be decode or prefill, not '" + o.shape + "'");
  if (o.ranks < 2 || kExperts % o.ranks != 0)
    throw std::runtime_error("--ranks must be >= 2 and divide 256");
  if (o.routing != "zipf" && o.routing != "uniform")
    throw std::runtime_error("--routing must be zipf or uniform");
  if (o.paths != "auto" && o.paths != "fabric")
    throw std::runtime_error("--paths must be auto or fabric, not '" + o.paths + "'");
  if (o.peer != "mpi" && o.peer != "none")
    throw std::runtime_error("--peer must be mpi or none, not '" + o.peer + "'");
  for (const auto& m : o.modes)
    if (!parse_ep_mode(m))
      throw std::runtime_error("unknown --mode '" + m + "' (normal|ll|baseline)");
  const workload_params p = workload_of(o);

  const std::vector<double> load_before = load_average();
  std::vector<nlohmann::json> starts, mpi_starts;
  std::string mpi_why_not;
  const bool run_mpi = o.peer == "mpi" && mpi_peer_built(mpi_why_not);
  if (o.peer == "none") mpi_why_not = "not asked for (--peer none)";
  for (int s = 0; s < o.starts; ++s) {
    char path[] = "/tmp/moerl-bench-ep-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    ::close(fd);
    auto report = launch_processes(
        o.ranks, [&](bootstrap& b) { return run_start(b, o, path); }, o.op_timeout_ms * 20);
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    ::unlink(path);
    if (!report) throw std::runtime_error(report.err().to_string());
    if (!report->all_ok()) {
      std::string codes;
      for (int c : report->exit_codes) codes += std::to_string(c) + " ";
      throw std::runtime_error("a rank failed on process start " + std::to_string(s) +
                               " (exit codes " + codes + ")");
    }
    starts.push_back(nlohmann::json::parse(text.str()));
    if (run_mpi)
      mpi_starts.push_back(
          need(run_mpi_peer_start(o, p.tokens_per_rank, iterations_of(o)), "MPI_Alltoallv peer"));
  }

  // Byte numerators of one dispatch, summed over ranks.
  std::vector<rank_inputs> all;
  for (int r = 0; r < o.ranks; ++r) all.push_back(make_rank_inputs(p, r));
  const workload_bytes wb = count_bytes(p, all);
  all.clear();

  nlohmann::json out;
  out["benchmark"] = "ep";
  out["provider"] = o.provider;
  out["ranks"] = o.ranks;
  out["shape"] = {{"name", o.shape},          {"tokens_per_rank", p.tokens_per_rank},
                  {"hidden", p.hidden},       {"topk", p.topk},
                  {"experts", p.num_experts}, {"dtype", "bf16"}};
  if (p.hidden != 7168) out["shape"]["note"] = "hidden reduced from 7168 by --hidden";
  out["routing"] = o.routing;
  out["reorder_shim"] = o.reorder;
  out["process_starts"] = o.starts;
  out["iterations_per_start"] = iterations_of(o);
  out["warmup_per_start"] = o.warmup;
  out["chunk_bytes"] = o.chunk_bytes;
  out["ll_entries_per_write"] = o.ll_entries_per_write;
  out["io_buffers"] = o.io_buffers;
  out["ll_memory"] = o.ll_memory;
  out["normal_memory"] = o.normal_memory;
  out["latency_definition"] =
      "per iteration the slowest rank's time (ranks start each phase at a barrier); p50/p99 over "
      "all iterations of all process starts; experts are identity while timing";
  std::vector<double> raw, raw_row, mem, raw_host, raw_host_all;
  for (const auto& s : starts) {
    raw_host.push_back(s["raw_host_copy_gbps"]);
    raw_host_all.push_back(s["raw_host_copy_every_rank_gbps"]);
    raw.push_back(s["raw_rma_gbps"]);
    raw_row.push_back(s["raw_rma_row_gbps"]);
    mem.push_back(s["memcpy_gbps"]);
  }
  out["raw_rma_gbps"] = median(raw);
  out["raw_rma_message_bytes"] = o.chunk_bytes;
  out["raw_rma_row_gbps"] = median(raw_row);
  out["raw_rma_row_message_bytes"] = p.hidden * 2;
  out["raw_rma_definition"] =
      "rank 0 -> rank 1 RMA writes with CQ data, one direction, best of 3 per start, median over "
      "starts";
  out["raw_host_copy_gbps"] = median(raw_host);
  out["raw_host_copy_definition"] =
      "rank 0 -> rank 1 over the same-host path (one copy into the peer's shared mapping, one "
      "inbox immediate per message of raw_rma_message_bytes), best of 3 per start, median over "
      "starts";
  out["raw_host_copy_every_rank_gbps"] = median(raw_host_all);
  out["raw_host_copy_every_rank_definition"] =
      "the same copy with every rank at once, rank r -> rank r + 1 (mod ranks): bytes per rank / "
      "the slowest rank's time, best of 3 per start, median over starts (the contention of a "
      "dispatch: all ranks copy at once on the host's cores)";
  out["paths"] = o.paths;
  out["memcpy_gbps"] = median(mem);
  out["memcpy_definition"] =
      "single-thread memcpy of 256 MiB, bytes copied per second, best of 3, median over starts";

  for (size_t m = 0; m < o.modes.size(); ++m) {
    std::vector<double> d, c, t;
    std::vector<std::vector<double>> t_per_start;
    uint64_t dwire = 0, cwire = 0, dwrites = 0, cwrites = 0, cin_place = 0, din_place = 0;
    std::string check = "pass", detail;
    for (const auto& s : starts) {
      const auto& rec = s["modes"][m];
      for (double v : rec["dispatch_us"]) d.push_back(v);
      for (double v : rec["combine_us"]) c.push_back(v);
      for (double v : rec["total_us"]) t.push_back(v);
      t_per_start.push_back(rec["total_us"].get<std::vector<double>>());
      dwire = rec["dispatch_wire_bytes"];
      cwire = rec["combine_wire_bytes"];
      dwrites = rec["dispatch_writes"];
      cwrites = rec["combine_writes"];
      cin_place = rec["combine_in_place_pairs"];
      din_place = rec["dispatch_in_place_pairs"];
      if (rec["check"] != "pass") {
        check = "fail";
        detail += rec.value("check_detail", std::string());
      }
    }
    nlohmann::json mj;
    const std::string name = starts.front()["modes"][m]["mode"];
    mj["mode"] = name;
    mj["check"] = check;
    if (!detail.empty()) mj["check_detail"] = detail;
    mj["dispatch_us"] = percentiles(d);
    mj["combine_us"] = percentiles(c);
    mj["total_us"] = percentiles(t);
    mj["selection_bytes"] = wb.selection;
    mj["logical_bytes"] = wb.logical;
    mj["wire_bytes"] = dwire;
    mj["combine_wire_bytes"] = cwire;
    mj["dispatch_writes"] = dwrites;
    mj["combine_writes"] = cwrites;
    // (source, expert rank) pairs whose combine read the expert outputs in place (low-latency
    // zero-copy combine on shared memory; 0 in the other modes).
    mj["combine_in_place_pairs"] = cin_place;
    // (source, destination) pairs whose dispatch payload went in place: normal mode's rows
    // stored into the receiver's output, low-latency's tokens read from the sender's
    // dispatch_buffer().
    mj["dispatch_in_place_pairs"] = din_place;
    mj["transport"] = starts.front()["modes"][m]["transport"];
    if (name != "normal") mj["rows_per_peer"] = starts.front()["modes"][m]["rows_per_peer"];
    // Per-rank bandwidth of dispatch at p50: bytes of all ranks / ranks / slowest-rank time.
    const double dp50 = mj["dispatch_us"]["p50"].get<double>();
    auto gbps = [&](uint64_t bytes) { return static_cast<double>(bytes) / o.ranks / (dp50 * 1e3); };
    mj["dispatch_gbps"] = gbps(wb.logical);
    mj["dispatch_gbps_numerator"] =
        "logical_bytes / ranks (hidden bytes per (token, destination rank))";
    mj["dispatch_selection_gbps"] = gbps(wb.selection);
    mj["dispatch_wire_gbps"] = gbps(dwire);
    const double tp50 = mj["total_us"]["p50"].get<double>();
    mj["tokens_per_s"] = static_cast<double>(p.tokens_per_rank) * o.ranks / (tp50 * 1e-6);
    mj["logical_gbps"] = 2.0 * static_cast<double>(wb.logical) / (tp50 * 1e3);
    mj["total_us_spread"] = per_start_spread(t_per_start);
    mj["transport_mix"] = starts.front()["modes"][m].value("transport_mix", nlohmann::json());
    out["modes"].push_back(mj);
  }
  if (run_mpi) {
    std::vector<double> d, c, t, v;
    std::vector<std::vector<double>> t_per_start;
    for (const auto& s : mpi_starts) {
      const auto sd = s["dispatch_us"].get<std::vector<double>>();
      const auto sc = s["combine_us"].get<std::vector<double>>();
      std::vector<double> st;
      for (size_t i = 0; i < sd.size(); ++i) st.push_back(sd[i] + sc[i]);
      d.insert(d.end(), sd.begin(), sd.end());
      c.insert(c.end(), sc.begin(), sc.end());
      t.insert(t.end(), st.begin(), st.end());
      for (double x : s["alltoallv_us"]) v.push_back(x);
      t_per_start.push_back(st);
    }
    nlohmann::json mj;
    mj["mode"] = "mpi_alltoallv";
    mj["check"] =
        "not checked (the peer computes the same exchange; moerl's data checks do not run in it)";
    mj["dispatch_us"] = percentiles(d);
    mj["combine_us"] = percentiles(c);
    mj["total_us"] = percentiles(t);
    mj["alltoallv_us"] = percentiles(v);
    mj["alltoallv_us_definition"] =
        "time inside MPI_Alltoallv alone (both phases), slowest rank per iteration";
    mj["exchange"] =
        "one row per (token, destination rank), normal mode's row layout; dispatch = pack from "
        "the tokens + MPI_Alltoall of counts + MPI_Alltoallv + expert-major fan-out; combine = "
        "local-expert reduction + MPI_Alltoallv back + rank-order sum";
    mj["selection_bytes"] = wb.selection;
    mj["logical_bytes"] = wb.logical;
    const double dp50 = mj["dispatch_us"]["p50"].get<double>();
    const double tp50 = mj["total_us"]["p50"].get<double>();
    mj["dispatch_gbps"] = static_cast<double>(wb.logical) / o.ranks / (dp50 * 1e3);
    mj["tokens_per_s"] = static_cast<double>(p.tokens_per_rank) * o.ranks / (tp50 * 1e-6);
    mj["logical_gbps"] = 2.0 * static_cast<double>(wb.logical) / (tp50 * 1e3);
    mj["total_us_spread"] = per_start_spread(t_per_start);
    mj["transport_mix"] = {{"all_pairs", "openmpi btl self,vader (shared memory)"}};
    mj["mpi_library"] = mpi_starts.front()["mpi_library"];
    mj["command"] = mpi_starts.front()["command"];
    out["modes"].push_back(mj);
  } else {
    out["mpi_alltoallv"] = {{"available", false}, {"reason", mpi_why_not}};
  }

  // The layer's targets (normal over baseline, dispatch over raw RMA, ll over normal on
  // decode), computed from this run where its modes are present.
  nlohmann::json targets;
  auto find = [&](const std::string& name) -> const nlohmann::json* {
    for (const auto& mj : out["modes"])
      if (mj["mode"] == name) return &mj;
    return nullptr;
  };
  const auto* nm = find("normal");
  const auto* ll = find("ll");
  const auto* bl = find("baseline");
  if (nm && bl)
    targets["normal_over_baseline_throughput"] =
        bl->at("total_us").at("p50").get<double>() / nm->at("total_us").at("p50").get<double>();
  if (nm)
    targets["normal_dispatch_over_raw_rma"] =
        nm->at("dispatch_gbps").get<double>() / out["raw_rma_gbps"].get<double>();
  if (nm)
    targets["normal_dispatch_over_raw_host_copy"] =
        nm->at("dispatch_gbps").get<double>() / out["raw_host_copy_gbps"].get<double>();
  if (nm) {
    const double every = out["raw_host_copy_every_rank_gbps"].get<double>();
    targets["normal_dispatch_over_raw_host_copy_every_rank"] =
        nm->at("dispatch_gbps").get<double>() / every;
    // Dispatch stores (token, expert) payloads (the expert-major output), selection_bytes.
    targets["normal_dispatch_selection_over_raw_host_copy_every_rank"] =
        nm->at("dispatch_selection_gbps").get<double>() / every;
  }
  if (nm && ll)
    targets["ll_total_p50_over_normal"] =
        ll->at("total_us").at("p50").get<double>() / nm->at("total_us").at("p50").get<double>();
  if (const auto* mpi = find("mpi_alltoallv"); mpi && nm)
    targets["normal_logical_gbps_over_mpi_alltoallv"] =
        nm->at("logical_gbps").get<double>() / mpi->at("logical_gbps").get<double>();
  if (const auto* mpi = find("mpi_alltoallv"); mpi && ll)
    targets["ll_logical_gbps_over_mpi_alltoallv"] =
        ll->at("logical_gbps").get<double>() / mpi->at("logical_gbps").get<double>();
  out["targets"] = targets;
  out["host_load_average"] = {{"before", load_before}, {"after", load_average()}};
  out["provenance"] = collect_provenance();
  return out;
}

}  // namespace moerl::bench
