#include "bench/ep/mpi_peer_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <fstream>
#include <sstream>
#include <vector>

#include "common/child_process.h"
#include "common/status_try.h"

namespace moerl::bench {

namespace {

// The peer is built next to the moerl binary (both in the build's bin/).
std::string peer_path() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "moerl-ep-mpi-peer";
  std::string self(buf.data(), static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "moerl-ep-mpi-peer";
}

}  // namespace

bool mpi_peer_built(std::string& why_not) {
#ifdef MOERL_EP_MPI_PEER
  if (::access(peer_path().c_str(), X_OK) != 0) {
    why_not = "peer binary " + peer_path() + " missing (build target moerl-ep-mpi-peer)";
    return false;
  }
  return true;
#else
  why_not =
      "built without MPI (CMake found no MPI; scripts/install-deps.sh installs libopenmpi-dev)";
  return false;
#endif
}

result<nlohmann::json> run_mpi_peer_start(const ep_bench_options& o, int64_t tokens_per_rank,
                                          int iterations) {
  char out[] = "/tmp/moerl-bench-ep-mpi-XXXXXX";
  const int fd = ::mkstemp(out);
  if (fd < 0) return error{errc::io_error, "mkstemp for the MPI peer's output failed"};
  ::close(fd);
  const std::string log = std::string(out) + ".log";
  process_spec spec;
  // --oversubscribe: the benchmark's ranks may outnumber cores, as moerl's ranks do;
  // btl self,vader: shared memory between the ranks of this host (moerl's modes are on shm).
  spec.argv = {"mpirun",
               "--allow-run-as-root",
               "--oversubscribe",
               "--bind-to",
               "none",
               "-np",
               std::to_string(o.ranks),
               "--mca",
               "btl",
               "self,vader",
               peer_path(),
               "--tokens",
               std::to_string(tokens_per_rank),
               "--hidden",
               std::to_string(o.hidden),
               "--experts",
               "256",
               "--topk",
               "8",
               "--iterations",
               std::to_string(iterations),
               "--warmup",
               std::to_string(o.warmup),
               "--routing",
               o.routing,
               "--seed",
               "2024",
               "--out",
               out};
  std::string command;
  for (const auto& a : spec.argv) command += (command.empty() ? "" : " ") + a;
  ASSIGN_OR_RETURN(auto pid, spawn_process(spec, {}, log, process_group::inherit));
  auto ws = wait_exit(pid, static_cast<int>(o.op_timeout_ms * 20));
  std::ifstream f(out), lf(log);
  std::stringstream text, logtext;
  text << f.rdbuf();
  logtext << lf.rdbuf();
  ::unlink(out);
  ::unlink(log.c_str());
  if (!ws) {
    (void)send_signal(pid, SIGKILL);
    (void)wait_exit(pid, 10000);
    return error{errc::timeout, "MPI peer did not finish: " + command};
  }
  if (!WIFEXITED(*ws) || WEXITSTATUS(*ws) != 0)
    return error{errc::internal, "MPI peer failed (" + describe_wait_status(*ws) + "): " + command +
                                     "\n" + logtext.str()};
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return error{errc::malformed_message, "MPI peer wrote no JSON"};
  j["command"] = command;
  return j;
}

}  // namespace moerl::bench
