// Error construction behind POSIX_CHECK (common/posix_check.h).
#include "common/posix_check.h"

#include <cstring>

namespace moerl::detail {

errc errc_from_errno(int err) {
  return (err == ENOENT || err == ENOTDIR || err == ESRCH) ? errc::not_found : errc::io_error;
}

error posix_error(const char* call, const std::string& what, const char* file, int line, int err) {
  return error(errc_from_errno(err), what + ": " + call + " failed: " + std::strerror(err) + " [" +
                                         file + ":" + std::to_string(line) + "]");
}

}  // namespace moerl::detail
