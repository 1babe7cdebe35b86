// Whether a node may still act on the coordinator counting it alive (ledger/LEDGER.md,
// "Losing a buffer shard"). A buffer shard serves trainers only while this says so: the
// coordinator re-opens the groups of a shard it declares dead, so a shard that kept serving
// after that would hand the same groups out twice.
//
// The proof of being alive is an accepted heartbeat or registration: the coordinator accepted
// it at some time r after the node sent it (at s <= r), and it declares a node dead no sooner
// than min(heartbeat timeout, re-join grace) after the last heartbeat it accepted. So for
// bound_ms below that minimum, the node is still counted alive until s + bound_ms. A link
// loss ends the trust at once (an answer to something sent before it proves nothing after);
// being fenced ends it for good.
// Threading: the agent writes, the shard loop reads; all members are guarded by one mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace moerl::actors {

// How long the coordinator waits for a node whose CAF link dropped to re-join before it
// declares it down (coordinator_core::link_lost).
constexpr int64_t kRejoinGraceMs = 2000;

// The trust bound for a coordinator that declares a silent node dead after
// heartbeat_timeout_ms: half the shorter way the coordinator can declare it dead, so that a
// hand-out made just before the bound is reported well before the coordinator can act.
int64_t trust_bound_ms(int64_t heartbeat_timeout_ms);

class coordinator_trust {
 public:
  // A token naming the link a request went out on; answers from an older link are ignored.
  using link_token = uint64_t;

  explicit coordinator_trust(int64_t bound_ms = 1000) : bound_ms_(bound_ms) {}
  void set_bound_ms(int64_t bound_ms);
  int64_t bound_ms() const;

  link_token current_link() const;
  // The coordinator accepted a heartbeat or registration sent at sent_ms on `link`.
  void accepted(link_token link, int64_t sent_ms);
  // The CAF link to the coordinator went down: no trust until an accepted re-join.
  void link_lost();
  // The coordinator declared this node dead: never trusted again (the process must exit).
  void fence(const std::string& why);

  bool trusted(int64_t now_ms) const;
  bool fenced() const;
  // Why not trusted at now_ms (empty when trusted).
  std::string why_not(int64_t now_ms) const;

 private:
  mutable std::mutex mu_;
  int64_t bound_ms_;
  link_token link_ = 1;
  bool have_proof_ = false;  // an accepted message on the current link
  int64_t proof_sent_ms_ = 0;
  bool fenced_ = false;
  std::string fenced_why_;
};

}  // namespace moerl::actors
