// A fixed set of rank threads of one fabric bootstrap (fabric::launch_threads) that live
// as long as this object, so a rollout worker or trainer can keep its expert-parallel
// group (endpoints, mapped buffers, per-rank policy shares) between calls instead of
// rebuilding it for every prompt group.
//
// Lifecycle of each rank thread: setup(boot) once (collective: builds the rank's fabric
// objects), then every run(task) executes task(rank) on all ranks at once, then on
// destruction a barrier among the ranks (no peer may still be writing into a rank's
// buffers when it tears down, fabric_expert_exchange.h's teardown rule) and teardown(rank).
//
// Threading: run() and the destructor are called by one owner thread at a time; the task
// runs on the rank threads, and run() returns only after every rank finished it, so the
// owner may read what the task wrote.
#pragma once

#include <functional>
#include <memory>

#include "common/error.h"
#include "fabric/bootstrap.h"

namespace moerl::job {

class rank_threads {
 public:
  // Starts num_ranks threads and waits until every setup returned. A failed setup (any
  // rank) is the error of the lowest failing rank; the threads are gone by then.
  //
  // A group spanning processes (a trainer group across nodes): this process runs the
  // num_ranks ranks first_rank.. of a larger group, each thread with the bootstrap
  // make_bootstrap(rank) gives (the control plane's, actors/internal/node_group_member.h); setup,
  // teardown and every task see global ranks. Without make_bootstrap the ranks are the
  // whole group (fabric::launch_threads).
  using bootstrap_maker = std::function<std::unique_ptr<fabric::bootstrap>(int rank)>;
  static result<std::unique_ptr<rank_threads>> start(
      int num_ranks, std::function<status(fabric::bootstrap&)> setup,
      std::function<void(int rank)> teardown, int first_rank = 0,
      bootstrap_maker make_bootstrap = nullptr);
  ~rank_threads();

  int num_ranks() const;
  // task(rank) on every rank thread; the error of the lowest failing rank. With more than one
  // rank here, BLAS runs on the calling thread meanwhile (kernels/blas_threads.h). After a failure
  // the group's collectives may be broken (a peer timed out): broken() turns true and the
  // owner should start a new group.
  status run(const std::function<status(int rank)>& task);
  bool broken() const;

 private:
  struct impl;
  explicit rank_threads(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::job
