#include "actors/coordinator_trust.h"

#include <algorithm>

namespace moerl::actors {

int64_t trust_bound_ms(int64_t heartbeat_timeout_ms) {
  return std::max<int64_t>(1, std::min(heartbeat_timeout_ms, kRejoinGraceMs) / 2);
}

void coordinator_trust::set_bound_ms(int64_t bound_ms) {
  std::lock_guard<std::mutex> g(mu_);
  bound_ms_ = bound_ms;
}

int64_t coordinator_trust::bound_ms() const {
  std::lock_guard<std::mutex> g(mu_);
  return bound_ms_;
}

coordinator_trust::link_token coordinator_trust::current_link() const {
  std::lock_guard<std::mutex> g(mu_);
  return link_;
}

void coordinator_trust::accepted(link_token link, int64_t sent_ms) {
  std::lock_guard<std::mutex> g(mu_);
  if (link != link_) return;  // sent before the link dropped: proves nothing now
  if (!have_proof_ || sent_ms > proof_sent_ms_) proof_sent_ms_ = sent_ms;
  have_proof_ = true;
}

void coordinator_trust::link_lost() {
  std::lock_guard<std::mutex> g(mu_);
  ++link_;
  have_proof_ = false;
}

void coordinator_trust::fence(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  if (!fenced_) fenced_why_ = why;
  fenced_ = true;
}

bool coordinator_trust::trusted(int64_t now_ms) const { return why_not(now_ms).empty(); }

bool coordinator_trust::fenced() const {
  std::lock_guard<std::mutex> g(mu_);
  return fenced_;
}

std::string coordinator_trust::why_not(int64_t now_ms) const {
  std::lock_guard<std::mutex> g(mu_);
  if (fenced_) return "fenced by the coordinator: " + fenced_why_;
  if (!have_proof_) return "no accepted registration on the current link to the coordinator";
  if (now_ms - proof_sent_ms_ >= bound_ms_)
    return "no accepted heartbeat sent in the last " + std::to_string(bound_ms_) + " ms";
  return "";
}

}  // namespace moerl::actors
