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

}  // namespace moerl::actors
