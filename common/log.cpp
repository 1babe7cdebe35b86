#include "common/log.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace moerl {
namespace {

std::mutex g_mu;
std::string g_pattern = "[%Y-%m-%dT%H:%M:%S.%e] [%l] [node=- role=- %n] %v";
spdlog::level::level_enum g_level = spdlog::level::info;

}  // namespace

void init_logging(const std::string& node_id, const std::string& role, const std::string& level) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string lvl = level;
  if (const char* env = std::getenv("MOERL_LOG_LEVEL"); env && *env) lvl = env;
  g_level = spdlog::level::from_str(lvl);
  g_pattern = "[%Y-%m-%dT%H:%M:%S.%e] [%l] [node=" + node_id + " role=" + role + " %n] %v";
  spdlog::set_pattern(g_pattern);
  spdlog::set_level(g_level);
}

std::shared_ptr<spdlog::logger> logger(const std::string& component) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto existing = spdlog::get(component)) return existing;
  // Logs go to stderr so stdout stays clean for --json output.
  auto l = spdlog::stderr_color_mt(component);
  l->set_pattern(g_pattern);
  l->set_level(g_level);
  return l;
}

}  // namespace moerl
