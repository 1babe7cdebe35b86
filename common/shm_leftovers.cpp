#include "common/shm_leftovers.h"

#include <filesystem>

#include "common/log.h"

namespace moerl {

size_t remove_shm_regions_of(pid_t pid, const std::string& who) {
  const std::string prefix = std::to_string(pid) + ":";
  size_t num_removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::error_code rm;
    std::filesystem::remove(e.path(), rm);
    if (!rm) ++num_removed;
    logger(who)->warn("removed /dev/shm/{} left by dead process {}{}", name, pid,
                      rm ? " (failed: " + rm.message() + ")" : "");
  }
  return num_removed;
}

}  // namespace moerl
