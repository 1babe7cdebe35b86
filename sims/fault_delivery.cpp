#include "sims/fault_delivery.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "common/status_try.h"

namespace moerl::sims {

namespace detail {
std::vector<std::string> with_node_name(std::vector<std::string> argv, const std::string& name) {
  for (auto& a : argv) {
    if (a.rfind("node.name=", 0) == 0) {
      a = "node.name=" + name;
      return argv;
    }
  }
  argv.push_back("--set");
  argv.push_back("node.name=" + name);
  return argv;
}
}  // namespace detail

namespace {

int signal_of(blow b) {
  switch (b) {
    case blow::kill: return SIGKILL;
    case blow::terminate: return SIGTERM;
    case blow::stop: return SIGSTOP;
    case blow::cont: return SIGCONT;
  }
  return SIGKILL;
}

const char* action_of(blow b) {
  switch (b) {
    case blow::kill: return "kill";
    case blow::terminate: return "terminate";
    case blow::stop: return "stop";
    case blow::cont: return "cont";
  }
  return "kill";
}

class processes final : public fault_delivery {
 public:
  processes(std::map<std::string, known_node> nodes, std::string log_dir,
            std::function<std::string(const node_view&)> why_not)
      : nodes_(std::move(nodes)), log_dir_(std::move(log_dir)), why_not_(std::move(why_not)) {}

  std::string why_not_reachable(const node_view& n) const override { return why_not_(n); }

  status deliver(const node_ref& n, blow b, double) override {
    if (n.pid <= 0) return error{errc::invalid_argument, "node " + n.name + " has no pid"};
    return send_signal(n.pid, signal_of(b));
  }

  std::optional<bool> gone(const node_ref& n) override {
    if (n.pid <= 0) return std::nullopt;
    return !process_alive(n.pid);
  }

  bool enforces_grace() const override { return false; }

  status start_replacement(const node_ref& n, const std::string& name) override {
    auto it = nodes_.find(n.name);
    if (it == nodes_.end()) {
      // No command line of the node itself (it came and went between polls): a sibling's will do.
      for (auto s = nodes_.begin(); s != nodes_.end() && it == nodes_.end(); ++s) {
        if (s->second.role == n.role) it = s;
      }
    }
    if (it == nodes_.end()) {
      return error{errc::not_found, "no command line of a " + n.role + " node to start one from"};
    }
    known_node k = it->second;
    k.spec.argv = detail::with_node_name(k.spec.argv, name);
    ASSIGN_OR_RETURN(auto pid, spawn_process(k.spec, {}, log_dir_ + "/" + name + ".log"));
    spawned_.push_back(pid);
    nodes_[name] = std::move(k);
    started_[n.name] = name;
    return ok_status();
  }

  result<std::string> replacement(const std::string& old_name) override {
    auto it = started_.find(old_name);
    if (it == started_.end()) return error{errc::not_found, "no replacement of " + old_name};
    return it->second;
  }

  std::vector<pid_t> spawned() const override { return spawned_; }

 private:
  std::map<std::string, known_node> nodes_;
  std::string log_dir_;
  std::function<std::string(const node_view&)> why_not_;
  std::map<std::string, std::string> started_;  // removed node -> its replacement
  std::vector<pid_t> spawned_;
};

// One background run of the delivery command.
struct background {
  pid_t pid = 0;
  std::string log;
  std::optional<int> wait_status;  // once reaped
};

std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

class command final : public fault_delivery {
 public:
  command(std::vector<std::string> prefix, std::string log_dir)
      : prefix_(std::move(prefix)), log_dir_(std::move(log_dir)) {}

  // A blow still running when the run ends (a drain longer than the run) is left to finish:
  // the command is the platform's; it is reaped by init once this process exits.

  std::string why_not_reachable(const node_view&) const override { return ""; }

  status deliver(const node_ref& n, blow b, double grace_s) override {
    std::vector<std::string> argv = prefix_;
    argv.push_back(action_of(b));
    argv.push_back(n.name);
    if (b == blow::stop || b == blow::cont) return run_tool(argv, 30000);
    if (b == blow::terminate) argv.push_back(std::to_string(grace_s));
    ASSIGN_OR_RETURN(auto run, start(argv, n.name + "-" + action_of(b)));
    blows_[n.name] = run;
    return ok_status();
  }

  std::optional<bool> gone(const node_ref& n) override {
    auto it = blows_.find(n.name);
    if (it == blows_.end() || !reap(it->second)) return std::nullopt;
    // A failed blow (the node was not found, the engine refused) proves nothing: the console
    // decides.
    const int st = *it->second.wait_status;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
    return std::nullopt;
  }

  bool enforces_grace() const override { return true; }

  status start_replacement(const node_ref& n, const std::string& name) override {
    std::vector<std::string> argv = prefix_;
    argv.insert(argv.end(), {"replace", n.name, name});
    ASSIGN_OR_RETURN(auto run, start(argv, n.name + "-replace"));
    replacing_[n.name] = run;
    return ok_status();
  }

  result<std::string> replacement(const std::string& old_name) override {
    auto it = replacing_.find(old_name);
    if (it == replacing_.end()) return error{errc::not_found, "no replacement of " + old_name};
    if (!reap(it->second)) return std::string();
    const int st = *it->second.wait_status;
    const std::string last = last_line_of(it->second.log);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || last.empty()) {
      return error{errc::io_error, "replacing " + old_name + ": the command ended with " +
                                       describe_wait_status(st) + " (" + it->second.log +
                                       "): " + last};
    }
    return last;
  }

  std::vector<pid_t> spawned() const override { return {}; }

 private:
  result<background> start(const std::vector<std::string>& argv, const std::string& tag) {
    background b;
    b.log = log_dir_ + "/deliver-" + tag + ".log";
    process_spec spec;
    spec.argv = argv;
    ASSIGN_OR_RETURN(auto pid, spawn_process(spec, {}, b.log));
    b.pid = pid;
    return b;
  }

  // True once the command exited (reaped now or before).
  static bool reap(background& b) {
    if (b.wait_status) return true;
    auto st = poll_exit(b.pid);
    if (!st || !*st) return false;
    b.wait_status = **st;
    return true;
  }

  std::vector<std::string> prefix_;
  std::string log_dir_;
  std::map<std::string, background> blows_;      // node -> its kill or terminate
  std::map<std::string, background> replacing_;  // removed node -> its replacement
};

}  // namespace

std::unique_ptr<fault_delivery> process_delivery(
    std::map<std::string, known_node> nodes, std::string log_dir,
    std::function<std::string(const node_view&)> why_not) {
  return std::make_unique<processes>(std::move(nodes), std::move(log_dir), std::move(why_not));
}

result<std::unique_ptr<fault_delivery>> command_delivery(const std::string& command_line,
                                                         std::string log_dir) {
  std::vector<std::string> argv;
  std::istringstream in(command_line);
  for (std::string word; in >> word;) argv.push_back(word);
  if (argv.empty()) return error{errc::invalid_argument, "--deliver-via: empty command"};
  return std::unique_ptr<fault_delivery>(
      std::make_unique<command>(std::move(argv), std::move(log_dir)));
}

}  // namespace moerl::sims
