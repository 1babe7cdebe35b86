#include "bench/fleet/host_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace moerl::bench {

std::string self_executable() {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  return exe;
}

proc_usage usage_of(pid_t pid) {
  proc_usage u;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), {});
  // The fields after the command name (which may hold spaces) start after the last ')'.
  auto close = s.rfind(')');
  if (close != std::string::npos && close + 2 < s.size()) {
    std::istringstream in(s.substr(close + 2));
    std::vector<std::string> fields;
    for (std::string f; in >> f;) fields.push_back(f);
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15, in clock ticks.
    if (fields.size() > 12)
      u.cpu_s = double(std::stoull(fields[11]) + std::stoull(fields[12])) /
                double(::sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) u.rss_bytes = std::stoull(line.substr(6)) * 1024;
  return u;
}

result<host_process> host_process::spawn(const std::vector<std::string>& args,
                                         const std::string& log_path) {
  int in[2], out[2];
  if (::pipe(in) != 0) return error(errc::io_error, std::string("pipe: ") + std::strerror(errno));
  if (::pipe(out) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return error(errc::io_error, std::string("pipe: ") + std::strerror(errno));
  }
  const std::string exe = self_executable();
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return error(errc::io_error, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    FILE* f = std::freopen(log_path.c_str(), "a", stderr);
    (void)f;
    ::close(in[1]);
    ::close(out[0]);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  host_process h;
  h.pid_ = pid;
  h.in_fd_ = in[1];
  h.out_fd_ = out[0];
  return h;
}

void host_process::send(const std::string& line) {
  const std::string l = line + "\n";
  if (::write(in_fd_, l.data(), l.size()) < 0) return;  // a dead host: no answer will come
}

std::string host_process::read_answer(int64_t timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      if (line.rfind("ok ", 0) == 0 || line.rfind("error ", 0) == 0) return line;
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
    if (left.count() <= 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) return "";
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void host_process::end() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  for (int* fd : {&in_fd_, &out_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

}  // namespace moerl::bench
