#include "workers/worker_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

extern char** environ;

namespace moerl::workers {
namespace {

constexpr int kChildFd = 3;

// build/python when this binary is build/bin/moerl and the package was built beside it.
std::string package_dir_of_this_build() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string path(exe, static_cast<size_t>(n));
  for (int up = 0; up < 2; ++up) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return "";
    path.erase(slash);
  }
  // The built package has its compiled module beside the .py files (the source tree's
  // python/moerl has not), so a binary elsewhere in a checkout never picks the sources.
  const std::string dir = path + "/python";
  DIR* d = ::opendir((dir + "/moerl").c_str());
  if (!d) return "";
  bool built = false;
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name).rfind("_moerl.", 0) == 0) built = true;
  ::closedir(d);
  return built ? dir : "";
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exit status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
  return "status " + std::to_string(st);
}

}  // namespace

result<worker_spec> parse_worker_spec(const std::string& text, const std::string& role,
                                      const std::string& python) {
  worker_spec spec;
  spec.text = text;
  if (text.rfind("python:", 0) == 0) {
    const std::string target = text.substr(7);
    const auto colon = target.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == target.size() ||
        target.find_first_of(" \t\n") != std::string::npos)
      return error(errc::invalid_config,
                   "worker '" + text + "': expected python:PKG.MODULE:FUNCTION");
    spec.argv = {python, "-m", "moerl.worker", role, target};
    return spec;
  }
  if (text.rfind("attach:", 0) == 0) {
    spec.attach_path = text.substr(7);
    if (spec.attach_path.empty() || spec.attach_path[0] != '/' ||
        spec.attach_path.size() >= sizeof(sockaddr_un{}.sun_path))
      return error(errc::invalid_config,
                   "worker '" + text +
                       "': expected attach:/ABSOLUTE/PATH (a unix socket path of "
                       "at most " +
                       std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes)");
    return spec;
  }
  if (text.rfind("exec:", 0) == 0 && text.size() > 5) {
    spec.argv = {"/bin/sh", "-c", text.substr(5)};
    return spec;
  }
  return error(errc::invalid_config, "worker '" + text +
                                         "': expected python:PKG.MODULE:FUNCTION, exec:COMMAND "
                                         "or attach:/SOCKET/PATH");
}

worker_process::worker_process(pid_t pid, int fd, bool attached)
    : pid_(pid), attached_(attached), channel_(std::make_unique<frame_channel>(fd)) {}

namespace {

// attach: listening sockets by path, one per process, shared by every actor that serves
// workers there (each accepts its own connections on it). Never closed: they live as long as
// the node, which removes nothing (a later node replaces a stale socket file when it binds).
result<int> listener_for(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, int> listeners;
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = listeners.find(path); it != listeners.end()) return it->second;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return error(errc::io_error, std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    const int e = errno;
    ::close(fd);
    return error(errc::io_error, "attach: cannot listen on " + path + ": " + std::strerror(e));
  }
  listeners[path] = fd;
  return fd;
}

}  // namespace

result<std::unique_ptr<worker_process>> worker_process::attach(const worker_spec& spec,
                                                               int64_t timeout_ms) {
  auto lfd = listener_for(spec.attach_path);
  if (!lfd) return lfd.err();
  pollfd p{*lfd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(timeout_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return error(errc::peer_dead,
                   "no worker attached at " + spec.attach_path + " within " +
                       std::to_string(timeout_ms) +
                       " ms (start it with MOERL_WORKER_SOCKET=" + spec.attach_path + ")");
    break;
  }
  const int fd = ::accept4(*lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0)  // another actor took that connection
    return error(errc::peer_dead,
                 "no worker attached at " + spec.attach_path + ": " + std::strerror(errno));
  ucred cred{};
  socklen_t len = sizeof cred;
  const pid_t pid = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : -1;
  return std::unique_ptr<worker_process>(new worker_process(pid, fd, /*attached=*/true));
}

result<std::unique_ptr<worker_process>> worker_process::start(const worker_spec& spec,
                                                              const std::string& role,
                                                              int64_t attach_timeout_ms) {
  return spec.attach_path.empty() ? spawn(spec, role) : attach(spec, attach_timeout_ms);
}

worker_process::~worker_process() { kill(); }

result<std::unique_ptr<worker_process>> worker_process::spawn(const worker_spec& spec,
                                                              const std::string& role) {
  if (spec.argv.empty())
    return error(errc::invalid_config, "worker '" + spec.text + "': no command");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return error(errc::io_error, std::string("socketpair: ") + std::strerror(errno));
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  const std::string pkg = package_dir_of_this_build();
  std::string pythonpath = pkg;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("MOERL_WORKER_", 0) == 0) continue;
    if (kv.rfind("PYTHONPATH=", 0) == 0) {
      const std::string old = kv.substr(11);
      pythonpath = pkg.empty() ? old : (old.empty() ? pkg : pkg + ":" + old);
      continue;
    }
    env_strings.push_back(kv);
  }
  if (!pythonpath.empty()) env_strings.push_back("PYTHONPATH=" + pythonpath);
  env_strings.push_back("MOERL_WORKER_FD=" + std::to_string(kChildFd));
  env_strings.push_back("MOERL_WORKER_ROLE=" + role);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return error(errc::io_error, std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the node died before prctl took effect
    // Its own process group: a terminal's ^C goes to the node, which stops its worker itself,
    // and kill() reaches the worker's own children (an exec: worker is a shell).
    ::setpgid(0, 0);
    if (sv[1] == kChildFd) {
      ::fcntl(kChildFd, F_SETFD, 0);
    } else if (::dup2(sv[1], kChildFd) < 0) {
      ::_exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  return std::unique_ptr<worker_process>(new worker_process(pid, sv[0]));
}

void worker_process::kill() {
  if (attached_) {  // not ours to signal: the user's process sees its connection close
    channel_->close();
    exit_ = "disconnected";
    return;
  }
  if (pid_ <= 0) return;
  // The whole process group, also once the leader is gone: an exec: worker is a shell whose
  // children do the work. (A pid is not reused while a group of that id has members.)
  ::kill(-pid_, SIGKILL);
  if (exit_) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {}
  exit_ = describe_status(st);
}

void worker_process::stop(int64_t grace_ms) {
  channel_->close();
  if (attached_) {
    exit_ = "disconnected";
    return;
  }
  for (int64_t waited = 0; waited < grace_ms && !poll_exit(); waited += 10) ::usleep(10 * 1000);
  kill();
}

std::optional<std::string> worker_process::poll_exit() {
  if (attached_) return channel_->closed() ? std::optional<std::string>("disconnected") : exit_;
  if (exit_ || pid_ <= 0) return exit_;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) exit_ = describe_status(st);
  return exit_;
}

}  // namespace moerl::workers
