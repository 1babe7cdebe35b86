#include "bench/policy/policy_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <random>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "bench/support.h"
#include "common/percentile.h"
#include "policy/dense_ops.h"
#include "policy/trainer.h"
#include "provenance/provenance.h"

namespace moerl::bench {
namespace {

// Process CPU milliseconds: on a shared machine wall time includes waiting for a core, so
// CPU time is reported beside it.
double cpu_ms() { return 1e3 * double(std::clock()) / CLOCKS_PER_SEC; }

// Latency distribution plus throughput: `tokens` is the mean token count one repetition
// processes, so tokens_per_s uses the mean latency.
nlohmann::json summarize(std::vector<double> ms, double tokens, const std::vector<double>& cpu) {
  double cpu_sum = 0;
  for (double v : cpu) cpu_sum += v;
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double v : ms) sum += v;
  const double mean = sum / double(ms.size());
  double var = 0;
  for (double v : ms) var += (v - mean) * (v - mean);
  return {{"samples", ms.size()},
          {"p50_ms", nearest_rank_percentile(ms, 50)},
          {"p99_ms", nearest_rank_percentile(ms, 99)},
          {"mean_ms", mean},
          {"stddev_ms", ms.size() > 1 ? std::sqrt(var / double(ms.size() - 1)) : 0.0},
          {"min_ms", ms.front()},
          {"max_ms", ms.back()},
          {"tokens_per_rep", tokens},
          {"tokens_per_s", tokens / (mean / 1e3)},
          {"cpu_mean_ms", cpu_sum / double(cpu.size())}};
}

}  // namespace

nlohmann::json run_policy_bench(const policy_bench_options& opt, const config& cfg) {
  using namespace moerl::policy;
  if (opt.reps < 1 || opt.warmup < 0) throw std::runtime_error("reps must be >= 1 and warmup >= 0");
  set_blas_threads(1);  // as `moerl learn` runs: see dense_ops.h
  auto t = need(make_task(cfg), "task");
  auto rm = need(make_reward(cfg, *t), "reward");
  auto mc = need(model_config::from_config(cfg), "policy config");
  auto tc = need(train_config::from_config(cfg), "train config");
  auto ex = make_local_expert_exchange();
  auto pol = need(moe_policy::create(mc, *ex), "policy");
  adam opt_state(tc.adam, pol->layout().num_floats());
  std::mt19937_64 rng(tc.seed);
  std::vector<double> gen_ms, reward_ms, train_ms, imbalance, gen_cpu, reward_cpu, train_cpu;
  double gen_tokens = 0, train_tokens = 0;
  std::vector<float> grads;
  for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
    const bool timed = rep >= opt.warmup;
    double c0 = cpu_ms();
    auto t0 = bench_clock::now();
    auto samples = need(
        rollout(*pol, *t, tc.prompts_per_iteration, tc.grpo.group_size, tc.temperature, rng, 0, 0),
        "rollout");
    const double g = ms_since(t0), g_cpu = cpu_ms() - c0;
    c0 = cpu_ms();
    t0 = bench_clock::now();
    need(score_samples(*rm, &samples), "score");
    const double r = ms_since(t0), r_cpu = cpu_ms() - c0;
    c0 = cpu_ms();
    t0 = bench_clock::now();
    auto us = need(grpo_gradient(*pol, samples, group_advantages(samples), tc.grpo, tc.temperature,
                                 nullptr, &grads),
                   "grpo gradient");
    need(opt_state.step(pol->params(), grads), "adam");
    const double tr = ms_since(t0), tr_cpu = cpu_ms() - c0;
    if (!timed) continue;
    double completion = 0;
    for (const auto& s : samples) completion += s.completion.size();
    gen_tokens += completion / opt.reps;
    train_tokens += (completion + double(samples.size()) * t->prompt_length()) / opt.reps;
    gen_ms.push_back(g);
    gen_cpu.push_back(g_cpu);
    reward_cpu.push_back(r_cpu);
    train_cpu.push_back(tr_cpu);
    reward_ms.push_back(r);
    train_ms.push_back(tr);
    imbalance.push_back(us.load_imbalance);
  }
  double imb = 0;
  for (double v : imbalance) imb += v / imbalance.size();
  return {{"bench", "policy"},
          {"task", t->name()},
          {"difficulty", t->difficulty()},
          {"samples_per_iteration", tc.prompts_per_iteration * tc.grpo.group_size},
          {"num_parameters", pol->layout().num_floats()},
          {"reps", opt.reps},
          {"warmup", opt.warmup},
          {"generate", summarize(gen_ms, gen_tokens, gen_cpu)},
          {"reward", summarize(reward_ms, gen_tokens, reward_cpu)},
          {"train_step", summarize(train_ms, train_tokens, train_cpu)},
          {"expert_load_imbalance_mean", imb},
          {"expert_exchange", "local (single rank)"},
          {"config", cfg.values()},
          {"provenance", collect_provenance()}};
}

void add_policy_bench_command(CLI::App& bench) {
  static policy_bench_options opt;
  static std::string config_file;
  static std::vector<std::string> overrides;
  auto* cmd = bench.add_subcommand(
      "policy", "generation, reward and GRPO training-step cost of the MoE policy");
  cmd->add_option("--config", config_file, "YAML config file");
  cmd->add_option("--set", overrides, "override key=value (repeatable)");
  cmd->add_option("--reps", opt.reps, "timed repetitions per phase");
  cmd->add_option("--warmup", opt.warmup, "untimed repetitions first");
  cmd->callback([] {
    auto cfg = config::load(config_file, overrides);
    if (!cfg) {
      std::cerr << "moerl bench policy: invalid configuration: " << cfg.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    run_bench_command("policy", [&] { std::cout << run_policy_bench(opt, *cfg).dump(2) << "\n"; });
  });
}

}  // namespace moerl::bench
