#include "common/on_demand_library.h"

#include <dlfcn.h>

#include <csignal>
#include <set>

#include "common/log.h"

namespace moerl {

on_demand_library::on_demand_library(std::vector<std::string> names, std::string what)
    : names_(std::move(names)), what_(std::move(what)) {}

// The handle stays open for the life of the process: code and data of the library may still
// be in use by other static destructors (NCCL's, CUDA's) when this one runs.
on_demand_library::~on_demand_library() = default;

namespace {

// Every signal's disposition, kept across a dlopen: a library's constructors must not change
// how this process handles signals. Debian's libfabric loads libinfinipath, whose constructor
// installs its own handlers for SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGILL and SIGABRT; linked,
// it ran before main() and moerl's handlers replaced them; opened later, it would replace
// moerl's (a node then exited with code 1 on SIGTERM instead of draining).
class signal_dispositions {
 public:
  signal_dispositions() {
    for (int sig = 1; sig < NSIG; ++sig)
      saved_[sig].ok = ::sigaction(sig, nullptr, &saved_[sig].act) == 0;
  }
  ~signal_dispositions() {
    for (int sig = 1; sig < NSIG; ++sig)
      if (saved_[sig].ok && sig != SIGKILL && sig != SIGSTOP)
        (void)::sigaction(sig, &saved_[sig].act, nullptr);
  }

 private:
  struct entry {
    struct sigaction act {};
    bool ok = false;
  };
  entry saved_[NSIG];
};

}  // namespace

void on_demand_library::open_once() {
  std::call_once(opened_, [this] {
    const signal_dispositions keep;  // restored when the constructors have run
    std::string tried;
    for (const auto& n : names_) {
      // RTLD_LOCAL: its symbols do not satisfy anything else's lookups (the forwarders here
      // define the same names).
      handle_ = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_) {
        loaded_from_ = n;
        return;
      }
      const char* e = dlerror();
      tried += (tried.empty() ? "" : "; ") + (e ? std::string(e) : n + ": not found");
    }
    error_ = "cannot open the library for " + what_ + " (tried " + tried + ")";
    logger("common")->error("{}", error_);
  });
}

void* on_demand_library::symbol(const char* name) {
  open_once();
  if (!handle_) return nullptr;
  void* p = dlsym(handle_, name);
  if (!p) {
    static std::mutex mu;
    static std::set<std::string> reported;
    std::lock_guard<std::mutex> lk(mu);
    if (reported.insert(loaded_from_ + ":" + name).second)
      logger("common")->error("{} (for {}) has no symbol {}: a version moerl was not built for",
                              loaded_from_, what_, name);
  }
  return p;
}

std::string on_demand_library::load_error() {
  open_once();
  return error_;
}

std::string on_demand_library::loaded_from() {
  open_once();
  return loaded_from_;
}

}  // namespace moerl
