#include "actors/interruption.h"

#include <chrono>

namespace moerl::actors {

int64_t unix_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

messages::interruption_notice make_notice(const std::string& node,
                                          messages::interruption_source source,
                                          int64_t deadline_unix_ms, std::string reason) {
  messages::interruption_notice n;
  n.node = node;
  n.source = source;
  n.issued_unix_ms = static_cast<uint64_t>(unix_now_ms());
  n.deadline_unix_ms = static_cast<uint64_t>(deadline_unix_ms);
  n.reason = std::move(reason);
  return n;
}

messages::interruption_notice rebalance_notice(const std::string& node, int64_t grace_ms,
                                               std::string reason) {
  return make_notice(node, messages::interruption_source::imds_rebalance, unix_now_ms() + grace_ms,
                     std::move(reason));
}

result<messages::interruption_notice> console_notice(const std::string& what,
                                                     const std::string& node,
                                                     int64_t deadline_unix_ms) {
  using src = messages::interruption_source;
  if (what == "spot")
    return make_notice(node, src::simulation, deadline_unix_ms, "console inject spot");
  if (what == "drain") return make_notice(node, src::console, deadline_unix_ms, "console drain");
  if (what == "rebalance") {
    // The same notice the IMDS poller makes (source imds_rebalance), so the node handles a
    // simulated recommendation exactly as a real one; the reason says who sent it.
    auto n = rebalance_notice(node, 0, "rebalance recommendation (console inject rebalance)");
    n.deadline_unix_ms = static_cast<uint64_t>(deadline_unix_ms);
    return n;
  }
  return error(errc::unknown_command,
               "no interruption notice for '" + what + "' (spot|rebalance|drain)");
}

}  // namespace moerl::actors
