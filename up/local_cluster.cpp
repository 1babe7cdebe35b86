#include "up/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/child_process.h"
#include "common/config.h"
#include "common/free_port.h"
#include "common/log.h"
#include "console/console_client.h"
#include "zmq/plane_context.h"

namespace moerl::up {

using nlohmann::json;

std::vector<node_spec> default_cluster_nodes(uint32_t trainer_members) {
  std::vector<node_spec> nodes{
      {"buffer", "buffer-0", {}}, {"buffer", "buffer-1", {}}, {"weights", "weights-0", {}}};
  for (uint32_t k = 0; k < std::max<uint32_t>(1, trainer_members); ++k)
    nodes.push_back({"trainer", "trainer-" + std::to_string(k), {}});
  nodes.push_back({"reward", "reward-0", {}});
  nodes.push_back({"rollout", "rollout-0", {}});
  nodes.push_back({"rollout", "rollout-1", {}});
  return nodes;
}

result<uint16_t> free_tcp_port() { return moerl::free_tcp_port("127.0.0.1"); }

bool console_address_free(const std::string& zmq_address) {
  const std::string scheme = "tcp://";
  const size_t colon = zmq_address.rfind(':');
  if (zmq_address.compare(0, scheme.size(), scheme) != 0 || colon == std::string::npos ||
      colon < scheme.size()) {
    return true;
  }
  const std::string host = zmq_address.substr(scheme.size(), colon - scheme.size());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (host == "*") {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return true;
  }
  const long port = std::strtol(zmq_address.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) return true;
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;
  // As ZeroMQ binds: SO_REUSEADDR, so a port with only TIME_WAIT connections left by an
  // earlier run counts as free, and one another process listens on does not.
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return free;
}

namespace {

// `wanted` (a ZeroMQ tcp:// address) when nothing listens there; else, when it is the
// built-in default, a free port on 127.0.0.1; else an error naming `what` and `how` to give
// another. A run's consoles are its own: never ones another job's coordinator answers on, or
// this run would report (and inject into) that job.
result<std::string> own_address(const std::string& wanted, bool is_default, const std::string& what,
                                const std::string& how) {
  if (console_address_free(wanted)) return wanted;
  if (!is_default) {
    return error(errc::invalid_argument, "the " + what + " address " + wanted +
                                             " is in use (another moerl up?); give a free one "
                                             "with " +
                                             how);
  }
  auto port = free_tcp_port();
  if (!port) return port.err();
  return "tcp://127.0.0.1:" + std::to_string(*port);
}

// The console address of a new run (see cluster_options::console).
result<std::string> own_console_address(const cluster_options& o, const config& cfg) {
  const std::string wanted = o.console.empty() ? cfg.get_string("console.address") : o.console;
  const bool is_default = o.console.empty() && wanted == find_key("console.address")->default_value;
  return own_address(wanted, is_default, "console", "--console or console.address");
}

// The HTTP console's HOST:PORT of a new run, by the same rule ("" (off) stays off).
result<std::string> own_http_address(const config& cfg) {
  const std::string wanted = cfg.get_string("console.http_address");
  if (wanted.empty()) return wanted;
  if (wanted.size() > 2 && wanted.compare(wanted.size() - 2, 2, ":0") == 0) {
    // Port 0: choose it here, so the address `moerl up` prints is the one that serves.
    auto port = free_tcp_port();
    if (!port) return port.err();
    return wanted.substr(0, wanted.size() - 1) + std::to_string(*port);
  }
  auto a = own_address("tcp://" + wanted, wanted == find_key("console.http_address")->default_value,
                       "HTTP console", "--set console.http_address=HOST:PORT");
  if (!a) return a.err();
  return a->substr(std::string("tcp://").size());
}

}  // namespace

result<std::unique_ptr<local_cluster>> local_cluster::start(cluster_options opts) {
  std::unique_ptr<local_cluster> c(new local_cluster);
  c->opts_ = std::move(opts);
  auto cfg = config::load(c->opts_.config_file, c->opts_.overrides);
  if (!cfg) return cfg.err();
  auto console = own_console_address(c->opts_, *cfg);
  if (!console) return console.err();
  auto http = own_http_address(*cfg);
  if (!http) return http.err();
  // Addresses this run chose itself (not given by the user) may be re-chosen: another
  // process (a second moerl up started in the same second) can bind one between the check
  // above and the coordinator's bind.
  const std::string wanted_console =
      c->opts_.console.empty() ? cfg->get_string("console.address") : c->opts_.console;
  c->console_chosen_ =
      *console != wanted_console ||
      (c->opts_.console.empty() && wanted_console == find_key("console.address")->default_value);
  const std::string wanted_http = cfg->get_string("console.http_address");
  c->http_chosen_ =
      !http->empty() &&
      (*http != wanted_http || wanted_http == find_key("console.http_address")->default_value);
  c->token_ = cfg->get_string("console.token");
  // A console off loopback is under CURVE (the coordinator's rule, zmq/plane_context.h).
  auto admin_keys = zmq::admin_plane_keys(*cfg, *console);
  if (!admin_keys) return admin_keys.err();
  c->admin_keys_ = std::move(*admin_keys);
  std::error_code ec;
  std::filesystem::create_directories(c->opts_.log_dir, ec);
  if (ec)
    return error(errc::io_error, "cannot create log dir " + c->opts_.log_dir + ": " + ec.message());
  const std::vector<std::string> user_overrides = c->opts_.overrides;
  constexpr int kStartAttempts = 3;  // a lost bind race is rare; three in a row is not a race
  for (int attempt = 1;; ++attempt) {
    auto join_port = free_tcp_port();
    if (!join_port) return join_port.err();
    c->console_ = *console;
    c->http_ = *http;
    c->join_ = "127.0.0.1:" + std::to_string(*join_port);
    c->opts_.overrides = user_overrides;
    c->opts_.overrides.push_back("console.address=" + c->console_);
    c->opts_.overrides.push_back("console.http_address=" + c->http_);
    c->exited_.erase("coordinator");
    if (auto st = c->spawn({"coordinator", "coordinator", {}}); !st) return st.err();
    auto up = c->wait_coordinator_up();
    if (up) break;
    const bool lost_bind_race =
        c->log_tail("coordinator", 5).find("Address already in use") != std::string::npos;
    if (!lost_bind_race || attempt == kStartAttempts) return up.err();
    logger("local_job")
        ->warn("the coordinator lost a port to another process ({} of {}); choosing new ports",
               attempt, kStartAttempts);
    if (c->console_chosen_) {
      auto port = free_tcp_port();
      if (!port) return port.err();
      *console = "tcp://127.0.0.1:" + std::to_string(*port);
    }
    if (c->http_chosen_) {
      auto port = free_tcp_port();
      if (!port) return port.err();
      *http = "127.0.0.1:" + std::to_string(*port);
    }
  }
  for (auto& n : c->opts_.nodes)
    if (auto st = c->spawn(n); !st) return st.err();
  return c;
}

status local_cluster::wait_coordinator_up() {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.start_timeout_ms);
  for (;;) {
    // Exited first: its console never answered (or another process's did, which is not ours).
    if (const int st = wait_exit("coordinator", 0); st != -1) {
      return error(errc::peer_dead, "the coordinator exited (" + describe_wait_status(st) +
                                        ") before its console answered; its log ends:\n" +
                                        log_tail("coordinator", 5));
    }
    // Up once our coordinator answers: a console that answers under another pid belongs to
    // another job that bound the address first (ours then fails to bind and exits above).
    auto s = console("status", {}, {}, 1000);
    if (s && s->value("pid", int64_t{-1}) == static_cast<int64_t>(pids_["coordinator"]))
      return ok_status();
    if (std::chrono::steady_clock::now() >= until) {
      return error(errc::timeout, "coordinator did not come up within " +
                                      std::to_string(opts_.start_timeout_ms) +
                                      " ms: " + s.err().to_string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status poll period
  }
}

local_cluster::~local_cluster() {
  for (auto& [name, pid] : pids_) (void)send_signal(pid, SIGKILL);
  // A SIGKILLed process exits at once unless stuck in the kernel; do not hang on one that is.
  for (auto& [name, pid] : pids_)
    (void)moerl::wait_exit(pid, 10000);  // which removes its shm regions (SIGKILLed)
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
  // Beside its log: what its pod's probes would read (`moerl probe --file`).
  add("node.health_file=" + opts_.log_dir + "/" + spec.name + ".health.json");
  for (auto& kv : spec.overrides) add(kv);
  // The nodes share this process's group, so a Ctrl-C on `moerl up` reaches them too.
  const auto prefix = exec_prefixes_.find(spec.name);
  // A `moerl up` that is killed takes its nodes with it (they would run on unsupervised).
  process_spec process{argv, "", {}};
  process.die_with_parent = true;
  auto pid = spawn_process(
      process, prefix == exec_prefixes_.end() ? std::vector<std::string>{} : prefix->second,
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
      // A node killed by a signal had its shm regions removed by the reap (poll_exit).
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
  auto rep = console::console_call(console_, req, timeout_ms, admin_keys_);
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
  if (it->second.role == "coordinator") {
    // Its consoles were free when the run started; while it was down another process (a
    // second moerl up choosing the default) may have taken one. An address this run chose
    // moves to a free port (as at the start); a coordinator that cannot listen on one the
    // user gave would exit at once and be restarted to the limit: name the cause instead.
    // `zmq_form`: the address is stored as tcp://HOST:PORT (the ZeroMQ console), else HOST:PORT.
    auto keep_or_move = [&](std::string& address, bool chosen, const std::string& key,
                            bool zmq_form) -> status {
      const std::string probe = zmq_form ? address : "tcp://" + address;
      if (address.empty() || console_address_free(probe)) return ok_status();
      if (!chosen)
        return error(errc::io_error, "cannot recreate the coordinator: its console address " +
                                         probe + " was taken by another process while it was down");
      auto port = free_tcp_port();
      if (!port) return port.err();
      const std::string moved =
          std::string(zmq_form ? "tcp://" : "") + "127.0.0.1:" + std::to_string(*port);
      logger("local_job")
          ->warn("{} was taken while the coordinator was down: that console moves to {}", address,
                 moved);
      address = moved;
      opts_.overrides.push_back(key + "=" + address);  // the last override of a key wins
      return ok_status();
    };
    if (auto st = keep_or_move(console_, console_chosen_, "console.address", true); !st) return st;
    if (auto st = keep_or_move(http_, http_chosen_, "console.http_address", false); !st) return st;
  }
  exited_.erase(name);
  return spawn(it->second);
}

status local_cluster::replace(const std::string& name, const std::string& new_name) {
  auto it = specs_.find(name);
  if (it == specs_.end()) return error(errc::unknown_node, "no node spec " + name);
  reap();
  if (pids_.count(name)) return error(errc::invalid_argument, name + " is still running");
  if (specs_.count(new_name)) return error(errc::invalid_argument, "node " + new_name + " exists");
  node_spec spec = it->second;
  spec.name = new_name;
  specs_.erase(it);
  exited_.erase(name);
  if (auto p = exec_prefixes_.extract(name)) {
    p.key() = new_name;
    exec_prefixes_.insert(std::move(p));
  }
  return spawn(spec);
}

std::string local_cluster::role_of(const std::string& name) const {
  auto it = specs_.find(name);
  return it == specs_.end() ? std::string() : it->second.role;
}

std::string local_cluster::log_tail(const std::string& name, size_t num_lines) const {
  std::ifstream in(opts_.log_dir + "/" + name + ".log");
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > num_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
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

}  // namespace moerl::up
