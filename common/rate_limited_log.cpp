#include "common/rate_limited_log.h"

#include <utility>

namespace moerl {

rate_limited_log::rate_limited_log(std::string what, sink out, std::chrono::milliseconds interval,
                                   std::function<clock::time_point()> now)
    : what_(std::move(what)), out_(std::move(out)), interval_(interval), now_(std::move(now)) {}

rate_limited_log::~rate_limited_log() {
  for (auto& [reason, r] : reasons_)
    if (r.unreported > 0)
      out_(what_ + ": " + reason + " (and " + std::to_string(r.unreported) +
           " more since the last line)");
}

void rate_limited_log::note(const std::string& reason, const std::string& detail) {
  ++num_noted_;
  auto [it, first] = reasons_.try_emplace(reason);
  per_reason& r = it->second;
  const auto now = now_();
  if (!first && now - r.last_line < interval_) {
    ++r.unreported;
    return;
  }
  r.last_line = now;
  emit(reason, r, detail);
}

void rate_limited_log::emit(const std::string& reason, per_reason& r, const std::string& detail) {
  std::string line = what_ + ": " + reason;
  if (!detail.empty()) line += ": " + detail;
  if (r.unreported > 0) {
    line += " (and " + std::to_string(r.unreported) + " more since the last line)";
    r.unreported = 0;
  }
  out_(line);
}

}  // namespace moerl
