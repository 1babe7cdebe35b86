// CAF 0.17 and threads it does not own.
//
// Every spawn, a caf::scoped_actor's included, stores a reference to the system's logger in
// the calling thread's thread-local storage (CAF_SET_LOGGER_SYS) and never takes it back, and
// actor_system's destructor waits until that logger is destroyed. A thread CAF does not own
// (a job's rank thread, a group watcher) that made a scoped_actor and is still alive when the
// system goes down therefore hangs the process's exit. Seen: trainer-0 of every trainer group
// (its rank thread's all-gathers through the coordinator) waited until the node's 5 s exit
// watchdog, which also left its libfabric shm regions in /dev/shm.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/caf_thread_state.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <caf/logger.hpp>

namespace moerl::actors {

// Declare one before the scoped_actor (or spawn) on such a thread: when it goes out of scope,
// after the actor, the thread's reference to the logger is dropped.
struct caf_logger_released_on_scope_exit {
  caf_logger_released_on_scope_exit() = default;
  caf_logger_released_on_scope_exit(const caf_logger_released_on_scope_exit&) = delete;
  caf_logger_released_on_scope_exit& operator=(const caf_logger_released_on_scope_exit&) = delete;
  ~caf_logger_released_on_scope_exit() { caf::logger::set_current_actor_system(nullptr); }
};

}  // namespace moerl::actors
