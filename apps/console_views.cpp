#include "apps/console_views.h"

#include <cstdarg>
#include <cstdio>

namespace moerl::apps {

using nlohmann::json;

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace

std::string nodes_table(const json& nodes) {
  std::string out = format("%-14s %-10s %-8s %-8s %-9s %-8s %-6s %s\n", "NAME", "ROLE", "GROUP",
                           "PID", "STATE", "RESTARTS", "LEASES", "ID");
  if (!nodes.is_array()) return out;
  for (const auto& n : nodes) {
    const json group = n.value("group", json(""));
    out += format("%-14s %-10s %-8s %-8u %-9s %-8u %-6u %s\n", n.value("name", "").c_str(),
                  n.value("role", "").c_str(),
                  group.is_string() ? group.get<std::string>().c_str() : group.dump().c_str(),
                  n.value("pid", 0u), n.value("state", "").c_str(), n.value("restarts", 0u),
                  n.value("leases", 0u), n.value("id", "").c_str());
  }
  return out;
}

std::string status_summary(const json& s) {
  const json a = s.value("accounting", json::object());
  std::string out = format("iteration %lu/%lu  queue %lu  leases %lu  nodes %lu  done %s\n",
                           s.value("iteration", 0ul), s.value("iterations", 0ul),
                           s.value("queue_depth", 0ul), s.value("leases", 0ul),
                           s.value("nodes_alive", 0ul), s.value("done", false) ? "yes" : "no");
  out += "accounting: " + a.dump() + "  invariant " +
         (s.value("invariant_ok", false) ? "ok" : "BROKEN") + "\n";
  const json shards = s.value("buffer", json::object());
  for (const auto& [shard, st] : shards.items())
    out += format("buffer %s: %lu/%lu samples resident, %lu groups ready\n", shard.c_str(),
                  st.value("resident_samples", 0ul), st.value("capacity_samples", 0ul),
                  st.value("ready_groups", 0ul));
  return out;
}

}  // namespace moerl::apps
