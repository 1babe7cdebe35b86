// The trainer group across nodes (actors/job.h trainer_group) as the EP trainer uses it: the
// fabric bootstrap of one global rank over the group's "fabric" all-gather channel (the
// control plane carries the address exchange), and the span of ranks this member holds.
#pragma once

#include <memory>

#include "actors/group_rounds.h"
#include "actors/job.h"
#include "fabric/bootstrap.h"
#include "job/ep_trainer.h"

namespace moerl::job {

// Rank `rank`'s bootstrap among all the group's ranks (num_members x ranks_per_member).
std::unique_ptr<fabric::bootstrap> make_group_bootstrap(actors::trainer_group& group, int rank);

// A round among every member of `group` on its "members" channel (actors/group_rounds.h).
using actors::all_members_allgather;

// Member group.member_index()'s span; the group must outlive the trainer built from it.
ep_trainer_span trainer_span_of(actors::trainer_group& group);

// The span of a process started by fabric::launch_processes (tests, benchmarks): one member
// per launched process, one rank each, the launcher's bootstrap carrying both the fabric's
// address exchange and member 0's commands. `boot` must outlive the trainer.
ep_trainer_span launched_process_span(fabric::bootstrap& boot);

}  // namespace moerl::job
