// Bootstrap: how the ranks of an EP group or collective group find each other before the
// fabric is up. One operation, an all-gather of opaque bytes among a chosen set of members,
// which is all address/key exchange needs and which the control plane can carry (the
// actors layer implements this interface over CAF). Implementations here: a hub thread in
// a launcher process talking to forked ranks over socketpairs, and an in-process table for
// ranks that are threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::fabric {

class bootstrap {
 public:
  virtual ~bootstrap() = default;
  // This participant's id among all launched participants, and how many were launched.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every participant in `members` (sorted, unique, containing rank()) calls this with the
  // same members; each gets all contributions in member order. Rounds among the same
  // members are matched by call order. A member that died or does not show up within
  // `timeout_ms` makes every caller fail: errc::peer_dead naming the dead ranks, or
  // errc::timeout.
  virtual result<std::vector<std::string>> allgather(const std::vector<int>& members,
                                                     const std::string& mine,
                                                     int64_t timeout_ms) = 0;
};

// All launched participants, 0..size-1.
std::vector<int> all_members(const bootstrap& b);

// How each launched rank ended: its exit code, or -signal when a signal killed it.
struct launch_report {
  std::vector<int> exit_codes;
  bool all_ok() const;
};

// Forks `num_ranks` processes running `body(bootstrap)`; the calling process serves their
// rendezvous and reaps them. The child's return value is its exit code. Ranks still running
// after `timeout_ms` are killed (the report shows -SIGKILL). Call it from a process without
// other threads running (fork copies only the calling thread).
result<launch_report> launch_processes(int num_ranks, const std::function<int(bootstrap&)>& body,
                                       int64_t timeout_ms);

// Runs `body` on `num_ranks` threads of this process, sharing an in-process rendezvous.
// A thread's body that returns non-zero or throws counts as dead for the others.
launch_report launch_threads(int num_ranks, const std::function<int(bootstrap&)>& body);

}  // namespace moerl::fabric
