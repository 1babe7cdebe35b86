#include "actors/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "actors/console_client.h"
#include "common/child_process.h"
#include "common/config.h"

namespace moerl::actors {

using nlohmann::json;

std::vector<node_spec> default_cluster_nodes() {
  return {{"buffer", "buffer-0", {}},   {"buffer", "buffer-1", {}}, {"weights", "weights-0", {}},
          {"trainer", "trainer-0", {}}, {"reward", "reward-0", {}}, {"rollout", "rollout-0", {}},
          {"rollout", "rollout-1", {}}};
}

result<uint16_t> free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return error(errc::io_error, std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    ::close(fd);
    return error(errc::io_error, std::string("bind/getsockname: ") + std::strerror(e));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

result<std::unique_ptr<local_cluster>> local_cluster::start(cluster_options opts) {
  std::unique_ptr<local_cluster> c(new local_cluster);
  c->opts_ = std::move(opts);
  auto cfg = config::load(c->opts_.config_file, c->opts_.overrides);
  if (!cfg) return cfg.err();
  c->console_ = c->opts_.console.empty() ? cfg->get_string("console.address") : c->opts_.console;
  c->token_ = cfg->get_string("console.token");
  if (!c->opts_.console.empty()) c->opts_.overrides.push_back("console.address=" + c->console_);
  auto port = free_tcp_port();
  if (!port) return port.err();
  c->join_ = "127.0.0.1:" + std::to_string(*port);
  std::error_code ec;
  std::filesystem::create_directories(c->opts_.log_dir, ec);
  if (ec)
    return error(errc::io_error, "cannot create log dir " + c->opts_.log_dir + ": " + ec.message());
  if (auto st = c->spawn({"coordinator", "coordinator", {}}); !st) return st.err();
  // The console answers once the coordinator is up.
  auto up = c->wait_status([](const json&) { return true; }, c->opts_.start_timeout_ms);
  if (!up) return error(up.err().code, "coordinator did not come up: " + up.err().message);
  for (auto& n : c->opts_.nodes)
    if (auto st = c->spawn(n); !st) return st.err();
  return c;
}

local_cluster::~local_cluster() {
  for (auto& [name, pid] : pids_) (void)send_signal(pid, SIGKILL);
  // A SIGKILLed process exits at once unless stuck in the kernel; do not hang on one that is.
  for (auto& [name, pid] : pids_) (void)moerl::wait_exit(pid, 10000);
}

status local_cluster::spawn(const node_spec& spec) {
  specs_[spec.name] = spec;
  std::vector<std::string> argv{opts_.binary, "node", "--role", spec.role, "--join", join_};
  if (!opts_.config_file.empty()) {
    argv.push_back("--config");
    argv.push_back(opts_.config_file);
  }
  auto add = [&](const std::string& kv) {
    argv.push_back("--set");
    argv.push_back(kv);
  };
  for (auto& kv : opts_.overrides) add(kv);
  add("node.name=" + spec.name);
  for (auto& kv : spec.overrides) add(kv);
  // The nodes share this process's group, so a Ctrl-C on `moerl up` reaches them too.
  const auto prefix = exec_prefixes_.find(spec.name);
  auto pid = spawn_process(
      {argv, "", {}}, prefix == exec_prefixes_.end() ? std::vector<std::string>{} : prefix->second,
      opts_.log_dir + "/" + spec.name + ".log", process_group::inherit);
  if (!pid) return pid.err();
  pids_[spec.name] = *pid;
  return ok_status();
}

void local_cluster::reap() {
  for (auto it = pids_.begin(); it != pids_.end();) {
    auto st = poll_exit(it->second);
    if (st && st->has_value()) {
      exited_[it->first] = **st;
      it = pids_.erase(it);
    } else {
      ++it;
    }
  }
}

std::map<std::string, int> local_cluster::exited() {
  reap();
  return exited_;
}

result<json> local_cluster::console(const std::string& command,
                                    const std::vector<std::string>& args,
                                    const std::vector<std::pair<std::string, std::string>>& options,
                                    int timeout_ms) {
  messages::admin_request req;
  req.request_id = next_request_++;
  req.token = token_;
  req.command = command;
  req.args = args;
  req.options = options;
  auto rep = console_call(console_, req, timeout_ms);
  if (!rep) return rep.err();
  if (!rep->ok) return rep->err;
  auto j = json::parse(rep->body_json, nullptr, false);
  if (j.is_discarded()) return error(errc::malformed_message, "console reply body is not JSON");
  return j;
}

result<json> local_cluster::wait_status(const std::function<bool(const json&)>& pred,
                                        int64_t timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  moerl::error last(errc::timeout, "status never matched");
  for (;;) {
    auto s = console("status", {}, {}, 1000);
    if (s && pred(*s)) return s;
    if (!s) last = s.err();
    if (std::chrono::steady_clock::now() >= until)
      return error(errc::timeout, "waited " + std::to_string(timeout_ms) +
                                      " ms; last: " + (s ? s->dump() : last.to_string()));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status poll period
  }
}

pid_t local_cluster::pid_of(const std::string& name) const {
  auto it = pids_.find(name);
  return it == pids_.end() ? -1 : it->second;
}

status local_cluster::signal(const std::string& name, int sig) {
  auto pid = pid_of(name);
  if (pid < 0) return error(errc::unknown_node, "no running node " + name);
  if (auto st = send_signal(pid, sig); !st) {
    return error(st.err().code, "signal to " + name + ": " + st.err().message);
  }
  return ok_status();
}

int local_cluster::wait_exit(const std::string& name, int64_t timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    reap();
    if (auto it = exited_.find(name); it != exited_.end()) return it->second;
    if (std::chrono::steady_clock::now() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waitpid poll period
  }
}

status local_cluster::add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix) {
  if (specs_.count(spec.name)) {
    return error(errc::invalid_argument, "node " + spec.name + " exists");
  }
  if (!exec_prefix.empty()) exec_prefixes_[spec.name] = exec_prefix;
  return spawn(spec);
}

status local_cluster::restart(const std::string& name) {
  auto it = specs_.find(name);
  if (it == specs_.end()) return error(errc::unknown_node, "no node spec " + name);
  reap();
  if (pids_.count(name)) return error(errc::invalid_argument, name + " is still running");
  exited_.erase(name);
  return spawn(it->second);
}

status local_cluster::stop(int64_t timeout_ms) {
  (void)console("shutdown", {}, {}, 2000);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    reap();
    if (pids_.empty()) return ok_status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string left;
  for (auto& [name, pid] : pids_) {
    left += " " + name;
    (void)send_signal(pid, SIGKILL);
  }
  reap();
  return error(errc::timeout, "nodes still running after shutdown, killed:" + left);
}

}  // namespace moerl::actors
