#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/posix_check.h"
#include "common/shm_leftovers.h"
#include "common/status_try.h"

namespace moerl {

result<pid_t> spawn_process(const process_spec& spec, const std::vector<std::string>& prefix,
                            const std::string& log_path, process_group group) {
  std::vector<std::string> args = prefix;
  args.insert(args.end(), spec.argv.begin(), spec.argv.end());
  if (args.empty()) return error{errc::invalid_argument, "spawn_process: empty command"};
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_copy = spec.env;
  std::vector<char*> envp;
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exec_failed = "exec " + args[0] + " failed\n";
  const std::string log = log_path.empty() ? "/dev/null" : log_path;
  int fd;
  POSIX_CHECK(fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), log);

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == -1) {
    const int fork_errno = errno;
    ::close(fd);
    return detail::posix_error("::fork()", "fork for " + args[0], __FILE__, __LINE__, fork_errno);
  }
  if (pid == 0) {
    if (group == process_group::own) ::setpgid(0, 0);
    if (spec.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(125);  // the parent died before the request took hold
    }
    // Signals the parent blocks (for its own watcher threads) must not stay blocked here.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) _exit(126);
    if (spec.env.empty()) {
      ::execvp(argv[0], argv.data());
    } else {
      ::execvpe(argv[0], argv.data(), envp.data());
    }
    // The log says why the node never started; the return value has nobody to go to.
    [[maybe_unused]] const ssize_t n =
        ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  ::close(fd);
  return pid;
}

status send_signal(pid_t pid, int sig) {
  if (pid <= 1)
    return error{errc::invalid_argument, "refusing to signal pid " + std::to_string(pid)};
  POSIX_CHECK(::kill(pid, sig), "pid " + std::to_string(pid));
  return ok_status();
}

result<std::optional<int>> poll_exit(pid_t pid) {
  int st = 0;
  pid_t r;
  POSIX_CHECK(r = ::waitpid(pid, &st, WNOHANG), "pid " + std::to_string(pid));
  if (r != pid) return std::optional<int>();
  if (WIFSIGNALED(st)) remove_shm_regions_of(pid, "child_process");
  return std::optional<int>(st);
}

result<int> wait_exit(pid_t pid, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ASSIGN_OR_RETURN(auto st, poll_exit(pid));
    if (st.has_value()) return *st;
    if (std::chrono::steady_clock::now() >= end) {
      return error{errc::timeout, "pid " + std::to_string(pid) + " did not exit within " +
                                      std::to_string(timeout_ms) + " ms"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // waitpid poll period
  }
}

std::string describe_wait_status(int wait_status) {
  // sigabbrev_np (glibc 2.32) gives "KILL" for SIGKILL and nullptr for a number it has no name for.
  auto signal_name = [](int sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
  };
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status))
    return "killed by " + signal_name(WTERMSIG(wait_status)) +
           (WCOREDUMP(wait_status) ? " (core dumped)" : "");
  if (WIFSTOPPED(wait_status)) return "stopped by " + signal_name(WSTOPSIG(wait_status));
  return "wait status " + std::to_string(wait_status);
}

}  // namespace moerl
