#include "actors/internal/node_group_member.h"

#include <chrono>
#include <initializer_list>
#include <sstream>

#include <caf/all.hpp>

#include "actors/atoms.h"
#include "actors/internal/caf_thread_state.h"
#include "actors/internal/monitored_ask.h"
#include "actors/internal/role_loops.h"
#include "actors/interruption.h"
#include "common/log.h"
#include "common/rate_limited_log.h"

namespace moerl::actors {

namespace {

// The policy's dimensions, an FNV-1a hash of the keys under `prefixes` (node.* and the like
// may differ between members), and moerl's version.
group_fingerprint fingerprint_of(const config& cfg, std::initializer_list<const char*> prefixes) {
  group_fingerprint f;
  for (const char* k :
       {"policy.d_model", "policy.num_layers", "policy.num_heads", "policy.num_experts",
        "policy.top_k", "policy.ffn_dim", "policy.max_seq_len"})
    f.model_shape += std::string(f.model_shape.empty() ? "" : " ") + (k + 7) + "=" +
                     std::to_string(cfg.get_int(k));
  uint64_t h = 1469598103934665603ull;
  for (const auto& [key, value] : cfg.values()) {
    bool shared = false;
    for (const char* prefix : prefixes) shared = shared || key.rfind(prefix, 0) == 0;
    if (!shared) continue;
    for (char c : key + "=" + value + "\n")
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  std::ostringstream hex;
  hex << std::hex << h;
  f.config_hash = hex.str();
  f.version = MOERL_VERSION;
  return f;
}

}  // namespace

group_fingerprint trainer_group_fingerprint(const config& cfg) {
  return fingerprint_of(cfg, {"policy.", "job.", "grpo.", "trainer.", "actors.trainer"});
}

group_fingerprint rollout_group_fingerprint(const config& cfg) {
  return fingerprint_of(cfg, {"policy.", "job.", "grpo.", "rollout."});
}

group_membership trainer_membership(const config& cfg) {
  return {cfg.get_string("trainer.group"), static_cast<uint32_t>(cfg.get_int("trainer.group_size")),
          static_cast<uint32_t>(cfg.get_int("job.trainer_ep_ranks")),
          trainer_group_fingerprint(cfg)};
}

group_membership rollout_membership(const config& cfg) {
  return {cfg.get_string("rollout.group"), static_cast<uint32_t>(cfg.get_int("rollout.group_size")),
          static_cast<uint32_t>(cfg.get_int("job.rollout_ep_ranks")),
          rollout_group_fingerprint(cfg)};
}

namespace {

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// The coordinator's view reply: [] while forming, else [group, incarnation, member index,
// size, ranks per node, member names...].
std::optional<group_view> parse_view(const std::vector<std::string>& r) {
  if (r.size() < 5) return std::nullopt;
  group_view v;
  v.group = r[0];
  v.incarnation = std::stoull(r[1]);
  v.member_index = static_cast<uint32_t>(std::stoul(r[2]));
  v.group_size = static_cast<uint32_t>(std::stoul(r[3]));
  v.ranks_per_node = static_cast<uint32_t>(std::stoul(r[4]));
  v.members.assign(r.begin() + 5, r.end());
  return v;
}

std::optional<group_view> ask_view(caf::blocking_actor* self, node_context& ctx, bool* answered) {
  std::optional<group_view> out;
  *answered = false;
  auto c = ctx.coordinator();
  if (!c) return out;
  self->request(c, std::chrono::milliseconds(ctx.cp.request_timeout_ms), gview_atom::value, ctx.id)
      .receive(
          [&](const std::vector<std::string>& r) {
            *answered = true;
            out = parse_view(r);
          },
          [&](caf::error&) {});
  return out;
}

}  // namespace

std::optional<group_view> join_trainer_group(caf::blocking_actor* self, node_context& ctx) {
  return join_node_group(self, ctx, trainer_membership(ctx.cfg));
}

std::optional<group_view> join_node_group(caf::blocking_actor* self, node_context& ctx,
                                          const group_membership& m) {
  auto log = logger(to_string(ctx.role));
  rate_limited_log refusals(
      std::string(to_string(ctx.role)) + " group " + m.group,
      [log](const std::string& line) { log->warn("{}", line); }, std::chrono::seconds(5));
  const auto& fp = m.fingerprint;
  bool joined = false, first = true;
  while (mailbox_ok(self, ctx, first ? 0 : 100)) {
    first = false;
    if (ctx.draining()) return std::nullopt;
    if (!joined) {
      auto st = call_coordinator(
          self, ctx,
          caf::make_message(gjoin_atom::value, ctx.id, m.group, std::string(to_string(ctx.role)),
                            m.group_size, m.ranks_per_node, fp.model_shape, fp.config_hash,
                            fp.version));
      if (!st) {
        refusals.note("join refused", st.err().message);
        if (!mailbox_ok(self, ctx, 500)) return std::nullopt;
        continue;
      }
      joined = true;
    }
    bool answered = false;
    if (auto v = ask_view(self, ctx, &answered)) return v;
    // Not in a formed group yet: join again (a no-op while the node is in the forming set).
    // The group it joined may have broken since, before forming with it (a member's failure
    // report still in flight when this node re-joined the old incarnation after a link
    // blip), and then the node is in no forming set: waiting for a view would wait forever.
    if (answered) joined = false;
  }
  return std::nullopt;
}

group_member_link::group_member_link(caf::actor_system& sys, std::shared_ptr<node_context> ctx,
                                     group_view v)
    : sys_(sys), ctx_(std::move(ctx)), view_(std::move(v)), watcher_([this] { watch(); }) {}

group_member_link::~group_member_link() {
  {
    std::lock_guard<std::mutex> l(mu_);
    leaving_ = true;
  }
  wake_.notify_all();
  watcher_.join();
}

void group_member_link::watch() {
  // Its own scoped actor: a request's answer reaches only this thread.
  caf_logger_released_on_scope_exit release;
  caf::scoped_actor me{sys_};
  std::unique_lock<std::mutex> l(mu_);
  while (!leaving_ && !broken_->load(std::memory_order_relaxed)) {
    wake_.wait_for(l, std::chrono::milliseconds(100), [this] { return leaving_; });
    if (leaving_) break;
    l.unlock();
    bool answered = false;
    auto v = ask_view(me.ptr(), *ctx_, &answered);
    if (answered && (!v || v->incarnation != view_.incarnation)) {
      broken_->store(true, std::memory_order_release);
      logger(to_string(ctx_->role))
          ->warn("{} group {} moved past incarnation {}: aborting its waits", to_string(ctx_->role),
                 view_.group, view_.incarnation);
    }
    l.lock();
  }
}

result<std::vector<std::string>> group_member_link::allgather(const std::string& channel,
                                                              const std::vector<int>& participants,
                                                              int self, const std::string& mine,
                                                              int64_t timeout_ms) {
  // A stopping node's trainer step still asks its members to stop as it is freed (after the
  // node's actors ended): there is no round to run then, and CAF may be going away under it
  // (trainer-0 crashed at every exit inside scoped_actor and render).
  if (ctx_->stopping.load())
    return error{errc::shutting_down, "group " + view_.group + " all-gather: the node is stopping"};
  auto c = ctx_->coordinator();
  if (!c) return error{errc::peer_dead, "group all-gather: not connected to the coordinator"};
  // Asked with the coordinator monitored (monitored_ask.h): a member waiting for rank 0's next
  // command (an hour) would otherwise wait on a dead coordinator after its restart, and the
  // group would never re-form. It runs on the job's rank threads, which outlive the actor
  // system (caf_thread_state.h).
  caf_logger_released_on_scope_exit release;
  monitored_ask_options opt;
  opt.timeout = std::chrono::milliseconds(timeout_ms);
  opt.what = "group " + view_.group + " all-gather on " + channel;
  opt.poll = std::chrono::milliseconds(200);
  opt.still_wanted = [&]() -> status {
    if (broken_->load(std::memory_order_acquire))
      return error{errc::peer_dead, opt.what + ": the group broke (incarnation " +
                                        std::to_string(view_.incarnation) + " ended)"};
    if (ctx_->coordinator() != c)
      return error{errc::peer_dead, opt.what + ": the coordinator changed (restarted)"};
    if (ctx_->draining() && unix_now_ms() > ctx_->drain_by_ms.load())
      return error{errc::shutting_down, opt.what + ": this node's drain deadline passed"};
    return {};
  };
  return ctx_->coordinator_askers.ask<std::vector<std::string>>(
      sys_, c,
      caf::make_message(ggather_atom::value, ctx_->id, view_.incarnation, channel,
                        join_ints(participants), static_cast<int32_t>(self), mine),
      opt);
}

int64_t group_member_link::drain_by_unix_ms() const { return ctx_->drain_by_ms.load(); }

void group_member_link::report_failure(const std::string& cause) {
  if (ctx_->stopping.load()) return;  // no coordinator to tell (see allgather)
  if (auto c = ctx_->coordinator()) {
    caf_logger_released_on_scope_exit release;
    caf::scoped_actor me{sys_};
    me->send(c, gfailed_atom::value, ctx_->id, view_.incarnation, cause);
  }
}

void group_member_link::report_restored(uint64_t version) {
  if (ctx_->stopping.load()) return;  // no coordinator to tell (see allgather)
  if (auto c = ctx_->coordinator()) {
    caf_logger_released_on_scope_exit release;
    caf::scoped_actor me{sys_};
    me->send(c, grestored_atom::value, ctx_->id, view_.incarnation, version);
  }
}

}  // namespace moerl::actors
