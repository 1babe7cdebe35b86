// libfabric's shm provider backs each endpoint with /dev/shm/<pid>:<n>:<n> and removes it on
// close or on a catchable signal. A process killed with SIGKILL (fault tests, Spot kills)
// leaves its regions behind: 16 MiB each, gigabytes after a day of fault runs, and a later
// process that reuses the pid fails fi_enable with EBUSY. moerl's own /dev/shm files
// (job/external_trainer_step.cpp, workers/version_files.h) are named <pid>:... to be swept the
// same way; the weights cache's same-host copies are memfds (weights/shm_copy.h), gone with
// the process, and need no sweeping.
#pragma once

#include <sys/types.h>

#include <string>

namespace moerl {

// Removes /dev/shm's regions named after `pid`, which must be a process that no longer runs
// (reaped by its parent), this process before its first endpoint, or this process in an exit
// that skips its destructors (a node's exit watchdog). Each removal is logged
// as a warning under `who`; returns how many were removed.
size_t remove_shm_regions_of(pid_t pid, const std::string& who);

}  // namespace moerl
