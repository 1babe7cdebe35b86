#include "bench/package/package_bench.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace moerl::bench {
namespace {

struct package_args {
  bool quick = false;
  bool tiny = false;
  std::string out;
  int repeats = 0;  // 0: 3, or 2 under --quick, 1 under --tiny
  std::string benches;
  std::string scenarios;
  bool no_peers = false;
  bool no_model = false;
  double timeout_s = 900;
};

// This process's binary: the children run the same build (not whatever `moerl` is on PATH).
std::string self_binary() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "";
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string default_out() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  return std::string("moerl-bench-package-") + stamp;
}

[[noreturn]] void exec_package(const package_args& a) {
  const std::string self = self_binary();
  if (self.empty()) {
    std::cerr << "moerl bench package: cannot read /proc/self/exe: " << std::strerror(errno)
              << "\n";
    throw CLI::RuntimeError(1);
  }
  const int repeats = a.repeats > 0 ? a.repeats : (a.tiny ? 1 : a.quick ? 2 : 3);
  std::vector<std::string> argv = {MOERL_PACKAGE_PYTHON,
                                   MOERL_PACKAGE_SCRIPT,
                                   "--moerl",
                                   self,
                                   "--out",
                                   a.out.empty() ? default_out() : a.out,
                                   "--mode",
                                   a.tiny    ? "tiny"
                                   : a.quick ? "quick"
                                             : "full",
                                   "--repeats",
                                   std::to_string(repeats),
                                   "--timeout",
                                   std::to_string(a.timeout_s)};
  if (!a.benches.empty()) argv.insert(argv.end(), {"--benches", a.benches});
  if (!a.scenarios.empty()) argv.insert(argv.end(), {"--scenarios", a.scenarios});
  if (a.no_peers) argv.emplace_back("--no-peers");
  if (a.no_model) argv.emplace_back("--no-model");
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::cout.flush();
  ::execv(cargv[0], cargv.data());
  std::cerr << "moerl bench package: cannot run " << argv[0] << " " << argv[1] << ": "
            << std::strerror(errno) << " (apt: python3, python3-matplotlib)\n";
  throw CLI::RuntimeError(1);
}

}  // namespace

void add_package_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "package",
      "every benchmark, the scenario short forms and the installed peers (MPI, "
      "torch.distributed), repeated: one directory with report.md, the raw JSON and PNG plots");
  static package_args a;
  cmd->add_flag("--quick", a.quick, "short forms, 2 repeats, scenarios once: ~10 min on 2 cores");
  cmd->add_flag("--tiny", a.tiny,
                "the CI form: the smallest sizes, 1 repeat; a smoke run, not a result");
  cmd->add_option("--out", a.out, "the report directory (default: ./moerl-bench-package-<UTC>)");
  cmd->add_option("--repeats", a.repeats, "runs of each benchmark (default 3, --quick 2)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--benches", a.benches,
                  "comma-separated subset of kernels,ep,control,fleet,ledger,store,policy,job-ep,"
                  "env,weights (default: all)");
  cmd->add_option("--scenarios", a.scenarios,
                  "comma-separated scenario names of sims/scenarios, or none (default: all)");
  cmd->add_flag("--no-peers", a.no_peers, "skip the MPI and torch.distributed peers");
  cmd->add_flag("--no-model", a.no_model, "skip the scale model (bench/model/scale_model.py)");
  cmd->add_option("--timeout", a.timeout_s, "seconds allowed to each child run")
      ->check(CLI::Range(10.0, 86400.0));
  cmd->callback([] {
    if (a.quick && a.tiny) {
      std::cerr << "moerl bench package: --quick and --tiny exclude each other\n";
      throw CLI::RuntimeError(2);
    }
    exec_package(a);
  });
}

}  // namespace moerl::bench
