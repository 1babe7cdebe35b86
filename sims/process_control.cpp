#include "sims/process_control.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/posix_check.h"
#include "common/status_try.h"

namespace moerl::sims {

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name is in parentheses and may contain spaces: the state follows the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  const char st = process_state(pid);
  return st != 0 && st != 'Z' && st != 'X';
}

namespace {
std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    const size_t end = s.find('\0', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{errc::not_found, "cannot read " + path + " (the process is gone?)"};
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
}  // namespace

result<launch_spec> read_launch_spec(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  launch_spec spec;
  ASSIGN_OR_RETURN(auto cmdline, slurp(base + "/cmdline"));
  spec.argv = split_nul(cmdline);
  if (spec.argv.empty()) return error{errc::not_found, base + "/cmdline is empty (a zombie?)"};
  auto env = slurp(base + "/environ");
  if (env) spec.env = split_nul(*env);
  char cwd[4096];
  ssize_t n;
  POSIX_CHECK(n = ::readlink((base + "/cwd").c_str(), cwd, sizeof cwd - 1), base + "/cwd");
  spec.cwd.assign(cwd, static_cast<size_t>(n));
  return spec;
}

status run_tool(const std::vector<std::string>& argv, int timeout_ms) {
  char path[] = "/tmp/moerl-sim-tool-XXXXXX";
  int fd;
  POSIX_CHECK(fd = ::mkstemp(path), "a temporary file for " + argv.at(0) + "'s output");
  ::close(fd);
  launch_spec spec;
  spec.argv = argv;
  auto pid = spawn_process(spec, {}, path);
  if (!pid) {
    ::unlink(path);
    return pid.err();
  }
  auto st = wait_exit(*pid, timeout_ms);
  if (!st) {
    ::kill(*pid, SIGKILL);
    (void)wait_exit(*pid, 1000);
  }
  std::string output;
  if (auto text = slurp(path)) output = *text;
  ::unlink(path);
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  if (!st) return error{st.err().code, cmd + ": " + st.err().message};
  if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    return error{errc::io_error, cmd + " failed (" + describe_wait_status(*st) + "): " + output};
  }
  return ok_status();
}

}  // namespace moerl::sims
