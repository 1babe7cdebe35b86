#include "actors/internal/control_priority.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "common/log.h"

namespace moerl::actors {
namespace {

bool set_nice(long tid, int nice) {
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0) return true;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true))
    logger("node")->info(
        "node.control_nice={}: cannot raise the control threads' priority ({}); they run at "
        "the default (give the pod CAP_SYS_NICE to allow it)",
        nice, std::strerror(errno));
  return false;
}

}  // namespace

bool prioritize_this_thread(int nice) {
  if (nice == 0) return true;
  return set_nice(::syscall(SYS_gettid), nice);
}

void prioritize_caf_io_threads(caf::actor_system& sys, int nice) {
  if (nice == 0) return;
  sys.middleman().backend().post([nice] { prioritize_this_thread(nice); });
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string comm;
    std::getline(std::ifstream(std::string("/proc/self/task/") + e->d_name + "/comm"), comm);
    if (comm == "caf.clock") set_nice(std::stol(e->d_name), nice);
  }
  ::closedir(d);
}

}  // namespace moerl::actors
