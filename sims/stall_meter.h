// The trainer's waiting time over a run (`trainer_stall_s`), from the `stall_s` its stats
// carry at each console poll. A trainer's stall clock counts from its own start and starts
// again at 0 when its group restarts, and a replacement trainer is a new node, so the meter
// adds up growth per node rather than reading one number. Plain inputs: tested without a
// cluster.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "sims/job_console.h"

namespace moerl::sims {

class stall_meter {
 public:
  // One poll at run time t (seconds). Waiting before the first call is not counted for the
  // trainers listed then (it happened before the run was watched); a trainer first listed
  // later started during the run, so all of its waiting counts.
  void observe(double t, const std::vector<node_view>& nodes);
  // Whether any trainer reported `stall_s` at all (old nodes do not).
  bool reported() const { return reported_; }
  // Seconds trainers waited since the first observation, summed over trainers.
  double total_s() const { return total_s_; }
  // The part of total_s() that fell in [from, to]. Growth is seen only when figures arrive,
  // which can be late (a restarted coordinator lists a trainer without stats until its next
  // report), so each increase is spread evenly over the time since the trainer's previous
  // figure: waiting from before a fault is not charged to it.
  double between(double from, double to) const;

 private:
  struct span {
    double from, to, seconds;  // `seconds` of waiting somewhere in [from, to]
  };
  void add(double from, double to, double seconds);
  bool first_ = true;
  bool reported_ = false;
  double total_s_ = 0.0;
  std::vector<span> spans_;
  // By node id, not name: after a re-join the console lists a name twice (the dead entry
  // keeps its old figures), and a replacement is a new process with a new id.
  std::set<std::string> listed_at_start_;
  struct seen {
    double value;  // last stall_s
    double t;      // when it was read
  };
  std::map<std::string, seen> last_;
};

}  // namespace moerl::sims
