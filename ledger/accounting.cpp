#include "ledger/accounting.h"

#include <string>

namespace moerl::ledger {

uint64_t accounting::dropped_total() const {
  uint64_t n = 0;
  for (const auto& [reason, count] : dropped) n += count;
  return n;
}

uint64_t accounting::buffered() const {
  return committed >= trained + handed ? committed - trained - handed : 0;
}

nlohmann::json accounting::to_json() const {
  nlohmann::json d = nlohmann::json::object();
  for (const auto& [reason, count] : dropped) d[reason] = count;
  nlohmann::json j = {{"dispatched", dispatched},
                      {"committed", committed},
                      {"in_flight", in_flight},
                      {"dropped", d},
                      {"lost", lost},
                      {"duplicated", duplicated},
                      {"trained", trained},
                      {"handed", handed},
                      {"buffered", buffered()}};
  if (refused_claims) j["refused_claims"] = refused_claims;
  return j;
}

status accounting::check() const {
  uint64_t accounted = committed + in_flight + dropped_total();
  if (accounted != dispatched) {
    return error(errc::internal, "accounting: dispatched " + std::to_string(dispatched) +
                                     " != committed " + std::to_string(committed) +
                                     " + in_flight " + std::to_string(in_flight) + " + dropped " +
                                     std::to_string(dropped_total()));
  }
  if (lost != 0) return error(errc::internal, "accounting: lost = " + std::to_string(lost));
  if (duplicated != 0)
    return error(errc::internal, "accounting: duplicated = " + std::to_string(duplicated));
  if (trained + handed > committed)
    return error(errc::internal, "accounting: committed " + std::to_string(committed) +
                                     " < trained " + std::to_string(trained) + " + handed " +
                                     std::to_string(handed) + " (buffered cannot be negative)");
  return ok_status();
}

}  // namespace moerl::ledger
