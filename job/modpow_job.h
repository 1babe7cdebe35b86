// The deterministic test job (job.kind=modpow), for tests, `moerl up` with the test work and
// the short simulation forms: modpow work (job/modpow_work.h), its verifier as the reward,
// and a trainer step that verifies every sample and scores group-relative advantages
// (job/internal/trainer_check.h), spread over the trainer ranks, then publishes a policy version
// per iteration's worth of groups (actors.units_per_iteration x actors.groups_per_unit).
#pragma once

#include <memory>

#include "actors/job.h"
#include "common/config.h"

namespace moerl::job {

std::shared_ptr<actors::job> make_modpow_job(const config& cfg);

}  // namespace moerl::job
