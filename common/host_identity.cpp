#include "common/host_identity.h"

#include <unistd.h>

#include <fstream>

namespace moerl {

std::string host_identity(std::initializer_list<const char*> namespaces) {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id);
  for (const char* ns : namespaces) {
    const std::string link = std::string("/proc/self/ns/") + ns;
    char buf[256];
    const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
    id += "|" + (n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?"));
  }
  return id;
}

}  // namespace moerl
