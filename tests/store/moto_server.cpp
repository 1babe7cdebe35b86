#include "moto_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace moerl::store::testing {

namespace {
// Debian's python, where moto is installed; MOERL_TEST_PYTHON overrides it (the CTest entry
// that checks MOERL_REQUIRE_S3_TESTS points it at a python without moto).
std::string python_path() {
  const char* p = std::getenv("MOERL_TEST_PYTHON");
  return p != nullptr && *p != '\0' ? p : "/usr/bin/python3";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

bool s3_tests_required() {
  const char* required = std::getenv("MOERL_REQUIRE_S3_TESTS");
  return required != nullptr && *required != '\0' && std::string(required) != "0";
}

void export_credentials(const moto_info& info) {
  ::setenv("AWS_ACCESS_KEY_ID", info.access_key_id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", info.secret_access_key.c_str(), 1);
}

bool python_has_moto() {
  pid_t pid = -1;
  const std::string py = python_path();
  const char* argv[] = {py.c_str(), "-c", "import moto.server, boto3", nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  const int rc = posix_spawn(&pid, py.c_str(), &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) == -1 && errno == EINTR) {}
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

result<std::unique_ptr<moto_server>> moto_server::start(const std::string& script, int timeout_ms,
                                                        const moto_placement& where) {
  std::unique_ptr<moto_server> s(new moto_server());
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
    return error(errc::io_error, std::string("pipe2 failed: ") + std::strerror(errno));
  char tmpl[] = "/tmp/moerl-moto-stderr-XXXXXX";
  const int err_fd = mkstemp(tmpl);
  if (err_fd == -1) return error(errc::io_error, "mkstemp failed");
  s->stderr_path_ = tmpl;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  const std::string py = python_path();
  std::vector<std::string> args = where.prefix;
  for (const auto& a : {py, script, std::string("--host"), where.host}) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // spawnp: a prefix names its tool ("ip") by name.
  const int rc = posix_spawnp(&s->pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_fd);
  s->stdin_fd_ = in_pipe[1];
  if (rc != 0) {
    ::close(out_pipe[0]);
    s->pid_ = -1;
    return error(errc::io_error,
                 "posix_spawn of " + args.front() + " failed: " + std::strerror(rc));
  }

  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{out_pipe[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) break;  // the server exited before reporting
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out_pipe[0]);
  if (line.find('\n') == std::string::npos)
    return error(errc::io_error, "moto server did not report its endpoint; its stderr:\n" +
                                     read_file(s->stderr_path_));
  auto j = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return error(errc::malformed_message, "moto server printed '" + line + "', not JSON");
  s->info_.endpoint = j.value("endpoint", "");
  s->info_.region = j.value("region", "");
  s->info_.bucket = j.value("bucket", "");
  s->info_.access_key_id = j.value("access_key_id", "");
  s->info_.secret_access_key = j.value("secret_access_key", "");
  return s;
}

moto_server::~moto_server() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);  // the server's signal to stop
  if (pid_ > 0) {
    int status = 0;
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  if (!stderr_path_.empty()) ::unlink(stderr_path_.c_str());
}

}  // namespace moerl::store::testing
