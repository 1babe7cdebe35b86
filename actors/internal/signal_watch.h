// Turns SIGTERM/SIGINT into a callback on a dedicated thread. A process running as pid 1 in
// its namespace (a container without an init shim) ignores SIGTERM unless it installs a
// handler, and the kubelet's drain sends exactly that; so every node calls this at start.
//
// How: a sigaction handler writes the signal number into a self-pipe (write() is
// async-signal-safe) and a watcher thread reads it and runs the callback, never in signal
// context, so the callback may log, lock and send actor messages. A handler (not sigwait on
// a blocked mask) is needed because shared libraries start threads and install handlers of
// their own before main: libinfinipath, pulled in by libfabric's psm provider, installs a
// SIGTERM handler that calls exit(1) from whatever thread receives the signal, which then
// deadlocks in OpenBLAS's atexit shutdown. Installing ours replaces it.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/signal_watch.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <functional>

namespace moerl::actors {

class signal_watch {
 public:
  // `on_signal` receives the signal number, once per delivered signal. One instance per
  // process; call it from main before the node starts.
  explicit signal_watch(std::function<void(int)> on_signal);
  ~signal_watch();  // restores the default dispositions and stops the watcher thread
  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

 private:
  struct impl;
  impl* impl_;
};

}  // namespace moerl::actors
