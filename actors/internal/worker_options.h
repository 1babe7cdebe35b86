// The settings every external worker takes from the node's config (python/WORKERS.md): which
// worker (the role's `<role>.worker` value), the interpreter, and the start and restart bounds.
// One place, so the reward, rollout and env roles cannot read them differently.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/worker_options.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <string>

#include "common/config.h"

namespace moerl::actors {

// `Options` is one of workers/'s option structs (external_scorer_options, rollout_session_options,
// env_host_options): each has these four fields.
template <typename Options>
Options worker_options_from_config(const config& cfg, const std::string& spec) {
  Options o;
  o.worker = spec;
  o.python = cfg.get_string("worker.python");
  o.start_timeout_ms = cfg.get_int("worker.start_timeout_ms");
  o.restart_backoff_ms = cfg.get_int("worker.restart_backoff_ms");
  return o;
}

}  // namespace moerl::actors
