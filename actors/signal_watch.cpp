#include "actors/signal_watch.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "common/log.h"

namespace moerl::actors {

struct signal_watch::impl {
  std::function<void(int)> on_signal;
  std::atomic<bool> stopping{false};
  std::thread watcher;
};

namespace {
// SIGUSR2 is used only to wake the watcher when the owner is destroyed.
sigset_t watched_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR2);
  return set;
}
}  // namespace

signal_watch::signal_watch(std::function<void(int)> on_signal) : impl_(new impl) {
  impl_->on_signal = std::move(on_signal);
  sigset_t set = watched_set();
  int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (rc != 0) logger("node")->error("pthread_sigmask failed: rc={} ({}:{})", rc, __FILE__, __LINE__);
  impl_->watcher = std::thread([p = impl_, set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (p->stopping.load()) return;
      if (sig == SIGUSR2) continue;
      p->on_signal(sig);
    }
  });
}

signal_watch::~signal_watch() {
  impl_->stopping = true;
  pthread_kill(impl_->watcher.native_handle(), SIGUSR2);
  impl_->watcher.join();
  delete impl_;
}

}  // namespace moerl::actors
