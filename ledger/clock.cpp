#include "ledger/clock.h"

#include <chrono>

namespace moerl::ledger {

int64_t steady_clock_source::now_ms() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace moerl::ledger
