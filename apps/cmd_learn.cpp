// moerl learn: GRPO on the MoE policy in this one process (local expert exchange), the
// single-process baseline of the distributed run. job.device=cuda runs the device policy
// (policy/cuda/trainer_cuda.h: the same GRPO iteration, tensors in device memory) when this
// build has CUDA and a device is visible; otherwise it is refused with the reason
// (job/device.h), never run on the CPU instead. Prints progress, then a JSON report
// (stdout or --report FILE) with the reward curve, per-iteration timings, the effective
// configuration and provenance.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "common/config.h"
#include "job/device.h"
#include "policy/dense_ops.h"
#include "policy/trainer.h"
#include "provenance/provenance.h"

#ifdef MOERL_HAVE_CUDA
#include "policy/cuda/trainer_cuda.h"
#endif

namespace moerl::apps {
namespace {

struct learn_options {
  std::string config_file;
  std::vector<std::string> overrides;
  std::string report;
  int print_every = 10;
  std::string fit_reward_model;  // when set: fit a learned reward model, save it here, exit
};

// Fits the learned reward model to the task's verifier and saves the checkpoint that
// task.reward=learned / task.reward_model_path load.
int fit_reward(const config& cfg, const policy::task& t, const std::string& path) {
  using namespace moerl::policy;
  auto verifier = make_verifier_reward(t);
  auto rm = learned_reward_model::create(t, 64, static_cast<uint64_t>(cfg.get_int("grpo.seed")));
  auto mse = rm->fit(*verifier, 2000, 64, 3e-3, static_cast<uint64_t>(cfg.get_int("grpo.seed")));
  if (!mse) {
    std::cerr << "moerl learn: " << mse.err().to_string() << "\n";
    return 1;
  }
  if (auto st = rm->save(path); !st) {
    std::cerr << "moerl learn: " << st.err().to_string() << "\n";
    return 1;
  }
  std::printf(
      "learned reward model for %s/%d saved to %s; held-out MSE against the verifier %.4f\n",
      t.name().c_str(), t.difficulty(), path.c_str(), *mse);
  return 0;
}

int run_learn(const learn_options& o) {
  using namespace moerl::policy;
  auto fail = [](const error& e, int code) {
    std::cerr << "moerl learn: " << e.to_string() << "\n";
    return code;
  };
  auto cfg = config::load(o.config_file, o.overrides);
  if (!cfg) return fail(cfg.err(), 2);
  set_blas_threads(1);
  auto t = make_task(*cfg);
  if (!t) return fail(t.err(), 2);
  if (!o.fit_reward_model.empty()) return fit_reward(*cfg, **t, o.fit_reward_model);
  auto rm = make_reward(*cfg, **t);
  if (!rm) return fail(rm.err(), 2);
  auto mc = model_config::from_config(*cfg);
  if (!mc) return fail(mc.err(), 2);
  auto tc = train_config::from_config(*cfg);
  if (!tc) return fail(tc.err(), 2);
  if (auto st = job::check_job_device(*cfg, job::device_scope::single_process); !st)
    return fail(st.err(), 2);
  const std::string device = cfg->get_string("job.device");

  // The policy on the chosen device, seen through what the run needs of it.
  using on_iteration_fn = std::function<bool(const iteration_stats&)>;
  size_t num_params = 0;
  std::function<result<std::vector<iteration_stats>>(const on_iteration_fn&)> train;
  std::function<result<std::string>()> final_hash;
  auto ex = make_local_expert_exchange();
  std::unique_ptr<moe_policy> cpu_pol;
#ifdef MOERL_HAVE_CUDA
  std::unique_ptr<cuda::moe_policy> gpu_pol;
#endif
  if (device == "cpu") {
    auto pol = moe_policy::create(*mc, *ex);
    if (!pol) return fail(pol.err(), 2);
    cpu_pol = std::move(*pol);
    num_params = cpu_pol->layout().num_floats();
    train = [&](const on_iteration_fn& f) {
      return train_single_process(*cpu_pol, **t, **rm, *tc, f);
    };
    final_hash = [&]() -> result<std::string> { return cpu_pol->content_hash(); };
  } else {
#ifdef MOERL_HAVE_CUDA
    auto pol = cuda::moe_policy::create(*mc);
    if (!pol) return fail(pol.err(), 2);
    gpu_pol = std::move(*pol);
    num_params = gpu_pol->num_params();
    train = [&](const on_iteration_fn& f) {
      return cuda::train_single_process(*gpu_pol, **t, **rm, *tc, f);
    };
    final_hash = [&]() { return gpu_pol->content_hash(); };
#else
    // check_job_device refuses cuda in a build without it; reaching here is a bug.
    return fail(error{errc::internal, "job.device=" + device + " accepted without CUDA"}, 1);
#endif
  }

  const double random = (*t)->reward_random(), rmax = (*t)->reward_max();
  std::printf("task %s/%d: reward_random %.4f reward_max %.4f; %zu parameters on %s\n",
              (*t)->name().c_str(), (*t)->difficulty(), random, rmax, num_params, device.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  // "Reached" uses the mean over the last 10 iterations: one lucky batch is not learning.
  double t_reach = -1;
  int it_reach = -1;
  std::vector<double> recent;
  auto curve = train([&](const iteration_stats& s) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    recent.push_back(s.mean_reward);
    if (recent.size() > 10) recent.erase(recent.begin());
    double window = 0;
    for (double r : recent) window += r / recent.size();
    if (t_reach < 0 && recent.size() == 10 && window >= 0.9 * rmax) {
      t_reach = el;
      it_reach = s.iteration;
    }
    if (o.print_every > 0 && s.iteration % o.print_every == 0)
      std::printf("iteration %4d  mean_reward %.3f  exact %.2f  clip %.3f  imbalance %.2f  %.1fs\n",
                  s.iteration, s.mean_reward, s.exact_fraction, s.update.grpo.clip_fraction,
                  s.update.load_imbalance, el);
    std::fflush(stdout);
    return true;
  });
  if (!curve) return fail(curve.err(), 1);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json j;
  j["task"] = (*t)->name();
  j["difficulty"] = (*t)->difficulty();
  j["reward"] = (*rm)->kind();
  j["reward_random"] = random;
  j["reward_max"] = rmax;
  j["device"] = device;
  j["num_parameters"] = num_params;
  j["wall_s"] = wall;
  j["first_iteration_at_90pct_10it_mean"] = it_reach;
  j["seconds_to_90pct_10it_mean"] = t_reach;
  j["cpu_s"] = double(std::clock()) / CLOCKS_PER_SEC;
  auto hash = final_hash();  // the device policy copies its parameters back for it
  if (!hash) return fail(hash.err(), 1);
  j["final_weights_hash"] = *hash;
  auto& rc = j["reward_curve"] = nlohmann::json::array();
  auto& its = j["iterations"] = nlohmann::json::array();
  for (const auto& s : *curve) {
    rc.push_back({{"iteration", s.iteration},
                  {"mean_reward", s.mean_reward},
                  {"mean_task_score", s.mean_task_score}});
    its.push_back({{"iteration", s.iteration},
                   {"exact_fraction", s.exact_fraction},
                   {"t_generate", s.t_generate},
                   {"t_reward", s.t_reward},
                   {"t_train", s.t_train},
                   {"grad_norm", s.grad_norm},
                   {"clip_fraction", s.update.grpo.clip_fraction},
                   {"kl", s.update.grpo.kl},
                   {"aux_loss", s.update.aux_loss},
                   {"load_imbalance", s.update.load_imbalance}});
  }
  j["config"] = cfg->values();
  j["provenance"] = collect_provenance();
  double last = 0;
  const size_t w = std::min<size_t>(10, curve->size());
  for (size_t i = curve->size() - w; i < curve->size(); ++i) last += (*curve)[i].mean_reward / w;
  std::printf(
      "done: %zu iterations in %.1fs; mean reward of the last %zu: %.3f (random %.3f, "
      "max %.3f); 10-iteration mean first >= 90%% of max at iteration %d (%.1fs)\n",
      curve->size(), wall, w, last, random, rmax, it_reach, t_reach);
  if (!o.report.empty()) {
    std::ofstream f(o.report);
    f << j.dump(2) << "\n";
    if (!f) return fail(error{errc::io_error, "cannot write report '" + o.report + "'"}, 1);
  } else {
    std::cout << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

void add_learn_command(CLI::App& root) {
  static learn_options o;
  auto* cmd = root.add_subcommand(
      "learn", "GRPO on the MoE policy in one process; prints the reward curve and a JSON report");
  cmd->add_option("--config", o.config_file, "YAML config file");
  cmd->add_option("--set", o.overrides, "override key=value (repeatable)");
  cmd->add_option("--report", o.report, "write the JSON report here instead of stdout");
  cmd->add_option("--print-every", o.print_every, "progress line every N iterations (0: none)");
  cmd->add_option("--fit-reward-model", o.fit_reward_model,
                  "instead of training the policy: fit a learned reward model to the verifier and "
                  "save it to this file (for task.reward=learned)");
  cmd->callback([] {
    int rc = run_learn(o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace moerl::apps
