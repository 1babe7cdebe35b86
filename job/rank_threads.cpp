#include "job/rank_threads.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/blas_threads.h"

namespace moerl::job {

struct rank_threads::impl {
  int num_ranks = 0;   // ranks this process runs
  int first_rank = 0;  // the global rank of the first
  std::function<status(fabric::bootstrap&)> setup;
  std::function<void(int)> teardown;

  std::mutex mu;
  std::condition_variable cv;
  int num_set_up = 0;                // ranks whose setup returned
  std::vector<status> setup_status;  // [rank]
  uint64_t task_generation = 0;      // bumped by run(); each rank runs each generation once
  std::function<status(int)> task;
  int num_finished = 0;             // ranks done with the current generation
  std::vector<status> task_status;  // [rank]
  bool stop = false;
  bool broken = false;
  std::thread launcher;              // runs fabric::launch_threads, which blocks
  std::vector<std::thread> spanned;  // or: one thread per rank of a group across processes

  void join_threads() {
    if (launcher.joinable()) launcher.join();
    for (auto& t : spanned) t.join();
  }

  int rank_body(fabric::bootstrap& b) {
    const int rank = b.rank() - first_rank;  // this process's index of the rank
    status st = setup(b);
    {
      std::lock_guard<std::mutex> g(mu);
      setup_status[rank] = st;
      ++num_set_up;
    }
    cv.notify_all();
    if (!st) {
      teardown(b.rank());
      return 1;
    }
    uint64_t seen = 0;
    for (;;) {
      std::function<status(int)> fn;
      {
        std::unique_lock<std::mutex> g(mu);
        cv.wait(g, [&] { return stop || task_generation != seen; });
        if (stop) break;
        seen = task_generation;
        fn = task;
      }
      status s = fn(b.rank());
      {
        std::lock_guard<std::mutex> g(mu);
        task_status[rank] = s;
        ++num_finished;
      }
      cv.notify_all();
    }
    // Leave together: a peer may still be writing into this rank's buffers.
    auto done = b.allgather(fabric::all_members(b), "", 30000);
    teardown(b.rank());
    return done ? 0 : 1;
  }
};

rank_threads::rank_threads(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<rank_threads>> rank_threads::start(
    int num_ranks, std::function<status(fabric::bootstrap&)> setup,
    std::function<void(int rank)> teardown, int first_rank, bootstrap_maker make_bootstrap) {
  if (num_ranks < 1) return error{errc::invalid_argument, "rank_threads: num_ranks must be >= 1"};
  auto p = std::make_unique<impl>();
  p->num_ranks = num_ranks;
  p->first_rank = first_rank;
  p->setup = std::move(setup);
  p->teardown = std::move(teardown);
  p->setup_status.resize(num_ranks);
  p->task_status.resize(num_ranks);
  impl* raw = p.get();
  if (make_bootstrap) {
    for (int r = 0; r < num_ranks; ++r)
      p->spanned.emplace_back([raw, b = std::shared_ptr<fabric::bootstrap>(
                                        make_bootstrap(first_rank + r))] { raw->rank_body(*b); });
  } else {
    p->launcher = std::thread([raw] {
      fabric::launch_threads(raw->num_ranks,
                             [raw](fabric::bootstrap& b) { return raw->rank_body(b); });
    });
  }
  {
    std::unique_lock<std::mutex> g(raw->mu);
    raw->cv.wait(g, [&] { return raw->num_set_up == raw->num_ranks; });
  }
  for (int r = 0; r < num_ranks; ++r) {
    if (!raw->setup_status[r]) {
      error e = raw->setup_status[r].err();
      {
        std::lock_guard<std::mutex> g(raw->mu);
        raw->stop = true;
      }
      raw->cv.notify_all();
      raw->join_threads();
      return error{e.code, "rank " + std::to_string(first_rank + r) + " setup: " + e.message};
    }
  }
  return std::unique_ptr<rank_threads>(new rank_threads(std::move(p)));
}

rank_threads::~rank_threads() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->join_threads();
}

int rank_threads::num_ranks() const { return impl_->num_ranks; }

bool rank_threads::broken() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->broken;
}

status rank_threads::run(const std::function<status(int rank)>& task) {
  // Several ranks run their GEMMs at once: each BLAS call on its own rank's thread. A
  // multithreaded OpenBLAS would queue the ranks' concurrent calls on its process-wide lock
  // and spin meanwhile (fabric/PERF.md, "EP trainer step": 3.6x slower on this box).
  std::optional<kernels::blas_single_thread> one_blas_thread_per_rank;
  if (impl_->num_ranks > 1) one_blas_thread_per_rank.emplace();
  std::unique_lock<std::mutex> g(impl_->mu);
  if (impl_->broken) return error{errc::internal, "rank group is broken by an earlier failure"};
  impl_->task = task;
  impl_->num_finished = 0;
  ++impl_->task_generation;
  impl_->cv.notify_all();
  impl_->cv.wait(g, [&] { return impl_->num_finished == impl_->num_ranks; });
  for (int r = 0; r < impl_->num_ranks; ++r) {
    if (!impl_->task_status[r]) {
      impl_->broken = true;
      const error& e = impl_->task_status[r].err();
      return error{e.code, "rank " + std::to_string(impl_->first_rank + r) + ": " + e.message};
    }
  }
  return ok_status();
}

}  // namespace moerl::job
