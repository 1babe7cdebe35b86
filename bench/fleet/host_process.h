// The child processes of `moerl bench fleet`: a simulated host (sim_host.h) started from this
// same executable with a pipe on its stdin (commands) and one on its stdout (one answer line
// per command), and what /proc says about a process's CPU and memory.
// Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::bench {

// This process's executable (/proc/self/exe).
std::string self_executable();

// CPU seconds (user + system) and resident bytes of process `pid`, from /proc (zeros when it
// is gone).
struct proc_usage {
  double cpu_s = 0;
  uint64_t rss_bytes = 0;
};
proc_usage usage_of(pid_t pid);

class host_process {
 public:
  // Starts self_executable() with `args`; its stderr goes to `log_path`.
  static result<host_process> spawn(const std::vector<std::string>& args,
                                    const std::string& log_path);
  // One command line to its stdin (a host that died shows up as no answer).
  void send(const std::string& line);
  // The next answer it printed ("ok ..." or "error ..."; any other line is skipped), or ""
  // when none came within timeout_ms or its stdout closed.
  std::string read_answer(int64_t timeout_ms);
  // SIGKILLs it if it still runs, reaps it and closes the pipes.
  void end();
  pid_t pid() const { return pid_; }

  std::string record_file;  // where the host writes its record (fleet_record.h) on `stop`

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  std::string buffered_;
};

}  // namespace moerl::bench
