#include "bench/job_ep/job_ep_bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "bench/support.h"
#include "common/config.h"
#include "fabric/bootstrap.h"
#include "job/ep_policy_group.h"
#include "job/ep_trainer.h"
#include "job/group_bootstrap.h"
#include "policy/dense_ops.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/trainer.h"
#include "provenance/provenance.h"

namespace moerl::bench {
namespace {

struct options {
  std::vector<int> ranks{2, 4};
  int reps = 5;
  // OpenBLAS threads of the process: 1 as `moerl up` runs its nodes (up/local_job.h
  // one_blas_thread_per_node); 0 leaves OpenBLAS's own default (one per core).
  int blas_threads = 1;
};

// Seconds per GRPO step of an EP trainer whose n ranks are n member processes (one rank each,
// forked, as a trainer group across nodes runs them: member 0 drives, the others serve its
// commands, the expert plane and the dense all-reduce between the processes). Member 0 writes
// its time to a file the parent reads.
double member_process_step_s(const config& cfg, const policy::model_config& model,
                             const policy::grpo_config& grpo, const policy::adam_config& adam,
                             float temperature, int n, const std::vector<policy::sample>& samples,
                             const std::vector<double>& adv, const std::string& weights, int reps) {
  char path[] = "/tmp/moerl-bench-job-ep-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0)
    need(status(error{errc::io_error, "mkstemp: " + std::string(std::strerror(errno))}),
         "the member processes' result file");
  ::close(fd);
  auto report = fabric::launch_processes(
      n,
      [&](fabric::bootstrap& boot) -> int {
        auto span = job::launched_process_span(boot);
        auto t = job::ep_trainer::create(cfg, model, grpo, adam, temperature, n,
                                         int64_t(samples.size()), &span);
        if (!t) {
          std::cerr << "member " << boot.rank() << ": " << t.err().to_string() << "\n";
          return 2;
        }
        if (boot.rank() != 0) return (*t)->serve().ok() ? 0 : 3;
        if (!(*t)->load(weights).ok() || !(*t)->step(samples, adv).ok()) return 4;  // warm-up
        const auto t0 = bench_clock::now();
        for (int r = 0; r < reps; ++r)
          if (auto st = (*t)->step(samples, adv); !st) {
            std::cerr << "member 0 step: " << st.err().to_string() << "\n";
            return 5;
          }
        const double s = seconds_since(t0) / reps;
        (*t)->stop_members();
        std::ofstream(path) << s;
        return 0;
      },
      600000);
  double s = -1;
  std::ifstream(path) >> s;
  ::unlink(path);
  const auto done = need(std::move(report), "member processes");
  for (size_t r = 0; r < done.exit_codes.size(); ++r)
    if (done.exit_codes[r] != 0)
      need(status(error{errc::internal, "member process " + std::to_string(r) + " exited " +
                                            std::to_string(done.exit_codes[r])}),
           "member processes");
  return s;
}

nlohmann::json run(const options& opt, const config& cfg) {
  if (opt.blas_threads < 0) throw std::runtime_error("--blas-threads must be >= 0");
  if (opt.blas_threads > 0) policy::set_blas_threads(opt.blas_threads);
  auto model = need(policy::model_config::from_config(cfg), "policy config");
  auto grpo = need(policy::grpo_config::from_config(cfg), "grpo config");
  grpo.group_size = static_cast<int>(cfg.get_int("ledger.group_size"));
  auto adam = need(policy::adam_config::from_config(cfg), "adam config");
  auto task = need(policy::make_task(cfg), "task");
  auto rm = policy::make_verifier_reward(*task);
  const float temperature = static_cast<float>(cfg.get_double("policy.temperature"));
  const int G = grpo.group_size, max_new = task->max_completion_length();
  const int groups_per_step = static_cast<int>(cfg.get_int("actors.units_per_iteration") *
                                               cfg.get_int("actors.groups_per_unit"));

  // A batch of one iteration, from the initial single-rank policy.
  auto local = policy::make_local_expert_exchange();
  auto single = need(policy::moe_policy::create(model, *local), "policy");
  std::mt19937_64 rng(1);
  auto samples =
      need(policy::rollout(*single, *task, groups_per_step, G, temperature, rng, 0, 0), "rollout");
  need(policy::score_samples(*rm, &samples), "reward");
  const auto adv = policy::group_advantages(samples);
  auto prompt = task->generate(rng).tokens;
  const std::string weights = single->serialize();

  nlohmann::json rows = nlohmann::json::array();
  // ranks 1: the single-rank path the job takes with job.*_ep_ranks = 1.
  std::vector<int> all{1};
  all.insert(all.end(), opt.ranks.begin(), opt.ranks.end());
  double single_step_s = 0, single_step_cpu_s = 0;
  for (int n : all) {
    double gen_s = 0, step_s = 0, step_cpu_s = 0;
    if (n == 1) {
      policy::adam opt1(adam, single->layout().num_floats());
      std::vector<float> grads;
      std::vector<std::vector<policy::token_id>> rs(G, prompt);
      auto t0 = bench_clock::now();
      for (int r = 0; r < opt.reps; ++r)
        need(single->generate(rs, max_new, temperature, rng), "generate");
      gen_s = seconds_since(t0) / opt.reps;
      t0 = bench_clock::now();
      const double cpu0 = process_cpu_seconds();
      for (int r = 0; r < opt.reps; ++r) {
        need(policy::grpo_gradient(*single, samples, adv, grpo, temperature, nullptr, &grads),
             "gradient");
        need(opt1.step(single->params(), grads), "adam");
      }
      step_s = seconds_since(t0) / opt.reps;
      step_cpu_s = (process_cpu_seconds() - cpu0) / opt.reps;
      need(single->load(weights), "reload");
    } else {
      job::ep_group_shape shape;
      shape.num_ranks = n;
      shape.max_decode_rows = job::rows_of_rank(G, 0, n).count;
      auto group = need(job::ep_policy_group::create(cfg, model, shape), "EP rollout group");
      need(group->load(weights), "load");
      need(group->generate(prompt, G, max_new, temperature, 1), "warm-up");
      auto t0 = bench_clock::now();
      for (int r = 0; r < opt.reps; ++r)
        need(group->generate(prompt, G, max_new, temperature, r), "EP generate");
      gen_s = seconds_since(t0) / opt.reps;
      group.reset();
      auto trainer = need(
          job::ep_trainer::create(cfg, model, grpo, adam, temperature, n, int64_t(samples.size())),
          "EP trainer");
      need(trainer->load(weights), "load");
      t0 = bench_clock::now();
      const double cpu0 = process_cpu_seconds();
      for (int r = 0; r < opt.reps; ++r) need(trainer->step(samples, adv), "EP step");
      step_s = seconds_since(t0) / opt.reps;
      step_cpu_s = (process_cpu_seconds() - cpu0) / opt.reps;
    }
    rows.push_back({{"ranks", n},
                    {"path", n == 1 ? "single-rank" : "expert-parallel (rank threads, fabric)"},
                    {"generate_group_s", gen_s},
                    {"rows_per_group", G},
                    {"max_new_tokens", max_new},
                    {"train_step_s", step_s},
                    {"train_step_cpu_s", step_cpu_s},
                    {"samples_per_step", samples.size()}});
    if (n == 1) {
      single_step_s = step_s;
      single_step_cpu_s = step_cpu_s;
      continue;
    }
    rows.back()["train_step_vs_single_rank"] = step_s / single_step_s;
    rows.back()["train_step_cpu_vs_single_rank"] = step_cpu_s / single_step_cpu_s;
    // The same step with the n ranks in n processes (a trainer group across nodes).
    const double proc_s = member_process_step_s(cfg, model, grpo, adam, temperature, n, samples,
                                                adv, weights, opt.reps);
    rows.push_back({{"ranks", n},
                    {"path", "expert-parallel (member processes, fabric)"},
                    {"train_step_s", proc_s},
                    {"train_step_vs_rank_threads", step_s > 0 ? proc_s / step_s : 0.0},
                    {"train_step_vs_single_rank", proc_s / single_step_s},
                    {"samples_per_step", samples.size()}});
  }
  return {{"benchmark", "job-ep"},
          {"what",
           "seconds per prompt group generated and per GRPO trainer step, single-rank vs EP rank "
           "threads vs EP ranks in member processes (a trainer group across nodes); "
           "train_step_cpu_s: CPU seconds of the process (all threads) per step"},
          {"fabric_provider", cfg.get_string("fabric.provider")},
          {"blas_threads", opt.blas_threads > 0 ? std::to_string(opt.blas_threads)
                                                : "OpenBLAS default (one per core)"},
          {"reps", opt.reps},
          {"policy",
           {{"d_model", model.d_model},
            {"num_layers", model.num_layers},
            {"num_experts", model.num_experts},
            {"top_k", model.top_k},
            {"ffn_dim", model.ffn_dim}}},
          {"results", rows},
          {"provenance", collect_provenance()}};
}

}  // namespace

void add_job_ep_bench_command(CLI::App& bench) {
  static options opt;
  static std::string config_file;
  static std::vector<std::string> overrides;
  auto* cmd = bench.add_subcommand(
      "job-ep",
      "GRPO job: group generation and trainer step, single-rank vs expert-parallel ranks");
  cmd->add_option("--config", config_file, "YAML config file");
  cmd->add_option("--set", overrides, "override key=value (repeatable)");
  cmd->add_option("--ranks", opt.ranks,
                  "EP rank counts to measure (each divides policy.num_experts)");
  cmd->add_option("--reps", opt.reps, "timed repetitions per phase");
  cmd->add_option("--blas-threads", opt.blas_threads,
                  "OpenBLAS threads (1: as moerl up runs its nodes; 0: OpenBLAS's default)");
  cmd->callback([] {
    auto cfg = config::load(config_file, overrides);
    if (!cfg) {
      std::cerr << "moerl bench job-ep: invalid configuration: " << cfg.err().message << "\n";
      throw CLI::RuntimeError(2);
    }
    run_bench_command("job-ep", [&] { std::cout << run(opt, *cfg).dump(2) << "\n"; });
  });
}

}  // namespace moerl::bench
