#include "actors/supervisor.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/caf_setup.h"
#include "common/log.h"

namespace moerl::actors {
namespace {

struct child_slot {
  child_spec spec;
  caf::actor hdl;
  uint64_t generation = 0;  // bumped per (re)start; stale restart timers are ignored
  uint64_t restarts = 0;
  std::string last_reason;
};

struct supervisor_state {
  supervisor_options opts;
  std::vector<child_slot> kids;
  std::deque<std::chrono::steady_clock::time_point> recent;  // restart times in the window
  uint64_t total_restarts = 0;
  bool giving_up = false;
};

using sup_actor = caf::stateful_actor<supervisor_state>;

void start_child(sup_actor* self, size_t i) {
  auto& k = self->state.kids[i];
  k.hdl = k.spec.start(self->system());
  ++k.generation;
  if (k.hdl) self->link_to(k.hdl);
}

void stop_child(sup_actor* self, size_t i, const caf::error& why) {
  auto& k = self->state.kids[i];
  if (!k.hdl) return;
  self->unlink_from(k.hdl);
  self->send_exit(k.hdl, why);
  k.hdl = nullptr;
  ++k.generation;  // a restart already scheduled for the old incarnation is void
}

// Sliding-window intensity check: false means "too many restarts, give up".
bool allow_restart(supervisor_state& st) {
  auto now = std::chrono::steady_clock::now();
  auto window = std::chrono::milliseconds(st.opts.period_ms);
  while (!st.recent.empty() && now - st.recent.front() > window) st.recent.pop_front();
  if (static_cast<int64_t>(st.recent.size()) >= st.opts.intensity) return false;
  st.recent.push_back(now);
  return true;
}

// A child that died of a full disk or an exhausted quota dies the same way after every
// restart, and how often it dies depends on how often it gets work: in the disk-full case a
// trainer that fails once per batch hand-out (every few seconds) never reaches the intensity
// and loops until the job's timeout. posix_error() embeds strerror's text in every such
// error, so that text is what identifies them here.
bool restart_cannot_help(const std::string& reason) {
  for (int err : {ENOSPC, EDQUOT})
    if (reason.find(std::strerror(err)) != std::string::npos) return true;
  return false;
}

int64_t backoff_ms(const supervisor_state& st) {
  int64_t d = st.opts.backoff_ms;
  for (size_t k = 1; k < st.recent.size() && d < st.opts.backoff_max_ms; ++k) d *= 2;
  return std::min(d, st.opts.backoff_max_ms);
}

caf::behavior supervisor_impl(sup_actor* self, supervisor_options opts,
                              std::vector<child_spec> specs) {
  auto log = logger("supervisor");
  self->state.opts = std::move(opts);
  for (auto& s : specs) self->state.kids.push_back(child_slot{std::move(s), nullptr, 0, 0, {}});
  for (size_t i = 0; i < self->state.kids.size(); ++i) start_child(self, i);

  self->set_exit_handler([self, log](caf::exit_msg& m) {
    auto& st = self->state;
    size_t i = 0;
    for (; i < st.kids.size(); ++i)
      if (st.kids[i].hdl && st.kids[i].hdl.address() == m.source) break;
    if (i == st.kids.size()) {  // our parent (or a linked peer) died: go down with it
      if (m.reason) self->quit(m.reason);
      return;
    }
    auto& k = st.kids[i];
    k.hdl = nullptr;
    bool abnormal = static_cast<bool>(m.reason) && m.reason != caf::exit_reason::normal;
    std::string reason = abnormal ? error_text(self->system(), m.reason) : "normal";
    if (k.spec.policy == restart_policy::temporary ||
        (k.spec.policy == restart_policy::transient && !abnormal)) {
      log->info("{}: child {} exited ({}), not restarted ({})", st.opts.name, k.spec.id, reason,
                k.spec.policy == restart_policy::temporary ? "temporary" : "transient");
      return;
    }
    const bool hopeless = restart_cannot_help(reason);
    if (hopeless || !allow_restart(st)) {
      const std::string why = hopeless ? "a restart cannot cure this (the disk or quota is full)"
                                       : "max restart intensity reached (more than " +
                                             std::to_string(st.opts.intensity) + " restarts in " +
                                             std::to_string(st.opts.period_ms) + " ms)";
      log->error("{}: child {} exited ({}); {}, giving up", st.opts.name, k.spec.id, reason, why);
      st.giving_up = true;
      for (size_t j = st.kids.size(); j-- > 0;)
        stop_child(self, j, caf::exit_reason::user_shutdown);
      self->quit(caf::make_error(
          caf::sec::runtime_error,
          st.opts.name + ": " + why + " after " + k.spec.id + " exited with " + reason));
      return;
    }
    size_t first = i, last = i + 1;
    if (st.opts.strategy == restart_strategy::one_for_all) {
      first = 0;
      last = st.kids.size();
    }
    // Stop the siblings in reverse start order, as OTP does.
    for (size_t j = last; j-- > first;)
      if (j != i) stop_child(self, j, caf::exit_reason::kill);
    auto delay = backoff_ms(st);
    for (size_t j = first; j < last; ++j) {
      auto& kj = st.kids[j];
      ++kj.restarts;
      kj.last_reason = j == i ? reason : "sibling " + k.spec.id + " restarted (one_for_all)";
      ++st.total_restarts;
      log->warn("{}: restarting {} in {} ms (restart #{} of this child; reason: {})", st.opts.name,
                kj.spec.id, delay, kj.restarts, kj.last_reason);
      if (st.opts.observer)
        self->send(st.opts.observer, restarted_atom::value, kj.spec.id, kj.last_reason,
                   st.total_restarts);
      self->delayed_send(self, std::chrono::milliseconds(delay), restart_atom::value,
                         static_cast<uint64_t>(j), kj.generation);
    }
  });

  return {
      [self](restart_atom, uint64_t j, uint64_t generation) {
        auto& st = self->state;
        if (st.giving_up || j >= st.kids.size()) return;
        auto& k = st.kids[j];
        if (k.generation != generation || k.hdl) return;  // superseded
        start_child(self, j);
      },
      [self](stats_atom) -> std::string {
        auto& st = self->state;
        std::string out = "{\"restarts\":" + std::to_string(st.total_restarts) + ",\"children\":{";
        for (size_t i = 0; i < st.kids.size(); ++i) {
          auto& k = st.kids[i];
          std::string reason;
          for (char c : k.last_reason) {  // JSON-escape the rendered CAF error text
            if (c == '"' || c == '\\') reason += '\\';
            if (static_cast<unsigned char>(c) >= 0x20) reason += c;
          }
          out += (i ? ",\"" : "\"") + k.spec.id + "\":{\"restarts\":" + std::to_string(k.restarts) +
                 ",\"running\":" + (k.hdl ? "true" : "false") + ",\"last_reason\":\"" + reason +
                 "\"}";
        }
        return out + "}}";
      },
      [self](crash_atom, const std::string& id) -> bool {
        for (auto& k : self->state.kids)
          if (k.spec.id == id && k.hdl) {
            self->send_exit(k.hdl,
                            caf::make_error(caf::sec::runtime_error, "killed on request: " + id));
            return true;
          }
        return false;
      },
      [self](ping_atom) -> std::vector<caf::actor> {
        std::vector<caf::actor> out;
        for (auto& k : self->state.kids) out.push_back(k.hdl);
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts,
                            std::vector<child_spec> children) {
  return sys.spawn(supervisor_impl, std::move(opts), std::move(children));
}

}  // namespace moerl::actors
