#include "actors/internal/signal_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/posix_check.h"

namespace moerl::actors {

namespace {
int g_pipe_write = -1;  // the handler's only state: where to write

void on_signal_handler(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t n = ::write(g_pipe_write, &b, 1);  // async-signal-safe; a full pipe drops a repeat
  (void)n;
  errno = saved;
}

// The self-pipe and the handlers for SIGTERM and SIGINT, unblocked in this thread.
status install_handlers(int fds[2]) {
  POSIX_CHECK(::pipe2(fds, O_CLOEXEC), "signal watch pipe");
  g_pipe_write = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  POSIX_CHECK(::sigaction(SIGTERM, &sa, nullptr), "SIGTERM handler");
  POSIX_CHECK(::sigaction(SIGINT, &sa, nullptr), "SIGINT handler");
  // A signal mask inherited from the parent (e.g. a test runner) must not hide them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  // pthread_sigmask returns the error number instead of setting errno.
  if (const int rc = ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr); rc != 0)
    return ::moerl::detail::posix_error("pthread_sigmask", "SIGTERM/SIGINT", __FILE__, __LINE__,
                                        rc);
  return ok_status();
}
}  // namespace

struct signal_watch::impl {
  std::function<void(int)> on_signal;
  int fds[2] = {-1, -1};
  std::thread watcher;
};

signal_watch::signal_watch(std::function<void(int)> on_signal) : impl_(new impl) {
  impl_->on_signal = std::move(on_signal);
  // A constructor cannot return the error: it is logged, and the node runs without relay.
  if (auto st = install_handlers(impl_->fds); !st.ok())
    logger("node")->error("signal watch: {}", st.err().to_string());
  impl_->watcher = std::thread([p = impl_] {
    for (;;) {
      unsigned char b = 0;
      ssize_t n = ::read(p->fds[0], &b, 1);
      if (n == 1 && b != 0)
        p->on_signal(b);
      else if (n == 1 && b == 0)
        return;  // our own stop request
      else if (n == 0 || (n < 0 && errno != EINTR))
        return;
    }
  });
}

signal_watch::~signal_watch() {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  unsigned char stop = 0;
  ssize_t n = ::write(impl_->fds[1], &stop, 1);
  (void)n;
  impl_->watcher.join();
  ::close(impl_->fds[0]);
  ::close(impl_->fds[1]);
  g_pipe_write = -1;
  delete impl_;
}

}  // namespace moerl::actors
