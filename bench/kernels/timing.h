// Timing for benchmarks: warm-up calls, then timed calls, summarised as p50/p99 and rates.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moerl::bench {

struct timing {
  std::vector<double> us;  // one entry per timed run, in run order
  double p50_us = 0;
  double p99_us = 0;
  double min_us = 0;
  double max_us = 0;
};

// p50/p99 (nearest rank), min and max of per-run times recorded elsewhere (GPU events).
timing summarize(std::vector<double> us);

// Calls fn warmup times untimed, then runs times timed. fn must do the whole operation
// (a GPU benchmark synchronises inside fn).
timing time_runs(int warmup, int runs, const std::function<void()>& fn);

// Times several operations in turns: each round calls fns[0], fns[1], ... once, warmup
// rounds untimed, then runs timed rounds; entry i summarises fns[i]. Operations that are
// compared with each other (a kernel and its reference) see the same background load this
// way, where timing one after the other would credit a load change to one of them.
std::vector<timing> time_interleaved(int warmup, int runs,
                                     const std::vector<std::function<void()>>& fns);

// One entry of the benchmark's "results" list. bytes: bytes read plus bytes written by one
// call; flops: floating-point operations of one call (0 for data movement), so gbps and
// gflops are computed at the median time.
nlohmann::json result_entry(const std::string& name, const nlohmann::json& shape, const timing& t,
                            double bytes, double flops);

}  // namespace moerl::bench
