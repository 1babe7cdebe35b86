// Turns SIGTERM/SIGINT into a callback on a dedicated thread. A process running as pid 1 in
// its namespace (a container without an init shim) ignores SIGTERM unless it installs a
// handler, and the kubelet's drain sends exactly that; so every node calls this at start.
//
// How: the signals are blocked in the calling thread before any other thread starts (so every
// thread inherits the mask) and one watcher thread sigwait()s for them. The callback runs on
// that thread, never in signal context, so it may log, lock and send actor messages.
#pragma once

#include <functional>

namespace moerl::actors {

class signal_watch {
 public:
  // Must be called before any thread is created (before the CAF actor system).
  // `on_signal` receives the signal number; it runs at most once per delivered signal.
  explicit signal_watch(std::function<void(int)> on_signal);
  ~signal_watch();  // stops the watcher thread; the signals stay blocked
  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

 private:
  struct impl;
  impl* impl_;
};

}  // namespace moerl::actors
