// Error construction behind MOERL_CURL_CHECK.
#include <cstring>

#include "store/internal/curl_check.h"

namespace moerl::store::detail {

namespace {
std::string where(const char* file, int line) {
  return std::string(" [") + file + ":" + std::to_string(line) + "]";
}
}  // namespace

error curl_error(const char* call, CURLcode code, const char* detail, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + curl_easy_strerror(code);
  if (detail != nullptr && detail[0] != '\0') msg += std::string(" (") + detail + ")";
  return error(errc::io_error, msg + where(file, line));
}

}  // namespace moerl::store::detail
