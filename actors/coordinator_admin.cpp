// The coordinator's admin face: the console verbs (`moerl console VERB`, /api/v1/VERB) answered
// from coordinator_core's state, and the actions they carry (inject, drain, shutdown). Kept
// apart from the state machine in coordinator_core.cpp so that the core does not depend on
// its views (coordinator_views.h builds the larger ones).
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <map>

#include "actors/coordinator_core.h"
#include "actors/internal/coordinator_views.h"
#include "actors/internal/job_history.h"
#include "actors/interruption.h"
#include "actors/tls_acceptor.h"
#include "common/json_text.h"
#include "common/secret_compare.h"
#include "console/console_client.h"

namespace moerl::actors {

using nlohmann::json;

// ---- admin ------------------------------------------------------------------------------

const node_record* coordinator_core::resolve(const std::string& who) const {
  if (who.empty()) return nullptr;
  const node_record* found = nullptr;
  for (auto& [id, n] : nodes_) {
    if (n.name == who || id == who) return &n;
    if (id.compare(0, who.size(), who) == 0) {
      if (found) return nullptr;  // ambiguous prefix
      found = &n;
    }
  }
  return found;
}

json coordinator_core::status_json() const {
  const auto& a = ledger_->counters();
  json shards = json::object();
  for (auto& [id, n] : nodes_)
    if (n.role == node_role::buffer && !n.stats.is_null()) shards[n.name] = n.stats;
  size_t alive = 0;
  // Nodes per state (running, draining, unreachable, dead, drained): what an operator of a
  // large fleet watches after a loss without pulling `nodes` (one entry per node).
  std::map<std::string, uint64_t> by_state;
  for (auto& [id, n] : nodes_) {
    alive += (n.state == "running" || n.state == "draining");
    ++by_state[n.state];
  }
  // The TLS port's handshakes (accepted, refused by cause: storms, strangers) and every
  // message the coordinator handled, by kind.
  json control_plane = tls_accept_counters();
  control_plane["messages"] = messages_;
  return json{{"iteration", policy_version_},
              {"iterations", opts_.iterations},
              {"iterations_opened", iterations_opened_},
              {"policy_version", policy_version_},
              {"units", ledger_->num_units()},
              {"queue_depth", ledger_->num_pending()},
              {"leases", ledger_->num_leased()},
              {"buffer", shards},
              {"nodes_alive", alive},
              {"nodes_by_state", by_state},
              {"accounting", a.to_json()},
              // The tick's last check (record_invariant): recomputing the books per status
              // request walked every unit the run created.
              {"invariant_ok", invariant_ok_},
              {"invariant_violations", invariant_violations_},
              {"ledger_epoch", ledger_->epoch()},
              {"control_plane", control_plane},
              {"done", done()},
              // Who answers: a local cluster waiting for its own coordinator must not take
              // another job's console for it (two runs choosing the same default port).
              {"pid", static_cast<int64_t>(::getpid())}};
}

namespace {

// A node's stats for the `nodes` view, with the job stats' history lists (job_history.h) cut
// to their newest `tail` entries: copied object by object, so the cut entries never are.
json with_history_tail(const json& v, const std::string& pointer, size_t tail) {
  if (v.is_array() && v.size() > tail && is_job_history_list(pointer)) {
    json cut = json::array();
    for (size_t i = v.size() - tail; i < v.size(); ++i) cut.push_back(v[i]);
    return cut;
  }
  if (!v.is_object()) return v;
  json out = json::object();
  for (const auto& [key, value] : v.items())
    out[key] = with_history_tail(value, pointer + "/" + key, tail);
  return out;
}

json stats_with_history_tail(const json& stats, size_t tail) {
  if (!stats.is_object() || !stats.contains("job") || !stats["job"].is_object()) return stats;
  json out = json::object();
  for (const auto& [key, value] : stats.items())
    out[key] = key == "job" ? with_history_tail(value, "", tail) : value;
  return out;
}

}  // namespace

json coordinator_core::nodes_json(std::optional<size_t> history_tail) const {
  json arr = json::array();
  // Leases held per node, from the ledger's leased-unit index: a pass over every unit per
  // request was a quarter of the coordinator's CPU by iteration 300 of the default run
  // (perf, 5 Dec), and a pass per rollout node seconds at a thousand nodes (bench fleet).
  std::map<std::string, uint32_t> leases_of;
  for (const auto& [worker, n] : ledger_->leases_per_worker())
    leases_of[owner_of_worker(worker)] += n;
  for (auto& [id, n] : nodes_) {
    uint32_t leases = 0;
    if (auto it = leases_of.find(id); n.role == node_role::rollout && it != leases_of.end())
      leases = it->second;
    json j{{"id", id},         {"name", n.name},        {"role", to_string(n.role)},
           {"pid", n.pid},     {"state", n.state},      {"restarts", n.restarts},
           {"leases", leases}, {"endpoint", n.endpoint}};
    if (!n.down_reason.empty()) j["down_reason"] = n.down_reason;
    if (!n.gave_up.empty()) j["gave_up"] = n.gave_up;
    j["heartbeat"] = {{"count", n.heartbeats},
                      {"max_silence_ms", n.max_silence_ms},
                      {"max_delay_ms", n.max_delay_ms},
                      {"timeout_ms", opts_.heartbeat_timeout_ms}};
    auto g = groups_.node_json(id);
    j["group"] = g.is_null() ? json("") : g["group"];
    j["rank"] = g.is_null() ? json("") : g["rank"];
    if (!g.is_null()) j["group_ranks"] = g.value("ranks", json::array());
    if (!n.stats.is_null())
      j["stats"] = history_tail ? stats_with_history_tail(n.stats, *history_tail) : n.stats;
    arr.push_back(j);
  }
  return arr;
}

json coordinator_core::expert_planes_json() const {
  json out = json::array();
  for (const auto& [id, n] : nodes_) {
    if (!n.stats.is_object() || !n.stats.contains("job")) continue;
    const json& job = n.stats["job"];
    if (!job.is_object() || !job.contains("expert_plane")) continue;
    auto g = groups_.node_json(id);
    json e = job["expert_plane"];
    e["node"] = n.name;
    e["group"] = g.is_null() ? json("") : g["group"];
    out.push_back(e);
  }
  return out;
}

json coordinator_core::report_json() const {
  json restarts = json::object();
  uint64_t total = 0;
  for (auto& [id, n] : nodes_) {
    restarts[n.name] = n.restarts;
    total += n.restarts;
  }
  auto acct = ledger_->counters().to_json();
  auto inv = ledger_->check_invariant();
  acct["invariant_ok"] = static_cast<bool>(inv) && invariant_violations_ == 0;
  if (!inv) acct["invariant_error"] = inv.err().message;
  return json{{"accounting", acct},
              {"interruptions", interruptions_},
              {"restarts", {{"total", total}, {"by_node", restarts}}},
              {"nodes", nodes_json()},
              {"groups", groups_.groups_json()},
              {"expert_planes", expert_planes_json()},
              // Since this coordinator process started (a recreated one counts afresh).
              {"coordinator_messages", messages_},
              {"iterations", opts_.iterations},
              {"policy_version", policy_version_},
              {"done", done()}};
}

messages::admin_reply coordinator_core::admin(const messages::admin_request& req) {
  messages::admin_reply rep;
  rep.request_id = req.request_id;
  auto fail = [&](errc c, std::string m) {
    rep.ok = false;
    rep.err = moerl::error(c, std::move(m));
    return rep;
  };
  if (!secret_equals(req.token, opts_.console_token))
    return fail(errc::unauthorized, "wrong or missing console token (console.token)");
  auto opt = [&](const std::string& k) -> std::string {
    for (auto& [n, v] : req.options)
      if (n == k) return v;
    return "";
  };
  json body;
  const std::string& cmd = req.command;
  if (cmd == "status") {
    body = status_json();
  } else if (cmd == "nodes") {
    std::optional<size_t> history_tail;
    if (const std::string h = opt("history"); !h.empty()) {
      auto n = console::parse_console_history(h);
      if (!n) return fail(n.err().code, n.err().message);
      history_tail = *n;
    }
    body = nodes_json(history_tail);
  } else if (cmd == "report") {
    body = report_json();
  } else if (cmd == "shutdown") {
    shutdown_ = true;
    for (auto& [id, n] : nodes_)
      if (n.state == "running" || n.state == "draining")
        out_.push_back(outbound{outbound::kind::shutdown, id, {}, 0, {}, 0});
    body = {{"shutdown", true}};
  } else if (cmd == "inject" || cmd == "drain") {
    std::string what = cmd == "drain" ? "drain" : (req.args.empty() ? "" : req.args[0]);
    std::string who = cmd == "drain" ? (req.args.empty() ? "" : req.args[0])
                                     : (req.args.size() < 2 ? "" : req.args[1]);
    if (what != "spot" && what != "rebalance" && what != "kill" && what != "sigterm" &&
        what != "drain")
      return fail(errc::unknown_command,
                  "inject needs one of spot|rebalance|kill|sigterm, got '" + what + "'");
    if (who.empty())
      return fail(errc::invalid_argument, cmd + " needs a NODE (id, id prefix or name)");
    auto* n = resolve(who);
    if (!n) return fail(errc::unknown_node, "no node '" + who + "' (see `moerl console nodes`)");
    // A draining node still takes a notice: a Spot notice after a rebalance recommendation
    // brings its drain deadline forward (the node keeps the earlier of the two).
    const bool is_notice = what == "spot" || what == "rebalance" || what == "drain";
    if (n->state != "running" && !(is_notice && n->state == "draining"))
      return fail(errc::shutting_down, "node " + n->name + " is " + n->state);
    int64_t deadline_ms = what == "rebalance" ? opts_.rebalance_grace_ms : opts_.default_notice_ms;
    if (auto d = opt("deadline"); !d.empty()) {
      char* end = nullptr;
      double s = std::strtod(d.c_str(), &end);
      if (!end || *end || !(s > 0) || s > 86400)
        return fail(errc::invalid_argument,
                    "--deadline must be seconds in (0, 86400], got '" + d + "'");
      deadline_ms = static_cast<int64_t>(s * 1000);
    }
    int64_t deadline = unix_now_ms() + deadline_ms;
    json rec{{"node", n->name}, {"at", unix_now_ms()}};
    if (what == "kill") {
      out_.push_back(outbound{outbound::kind::signal, n->id, {}, 0, {}, SIGKILL});
      rec["source"] = "kill";
      rec["deadline"] = nullptr;
      rec["units_returned"] = 0;
      rec["units_finished"] = 0;
      interruptions_.push_back(rec);  // no drain report will come: record it now
    } else if (what == "sigterm") {
      out_.push_back(outbound{outbound::kind::signal, n->id, {}, 0, {}, SIGTERM});
      rec["source"] = "sigterm";
      pending_notices_[n->id] = rec;
    } else {
      outbound o;
      o.what = outbound::kind::notice;
      o.node = n->id;
      o.notice =
          *console_notice(what, n->id, deadline);  // spot, rebalance or drain (checked above)
      out_.push_back(o);
      rec["deadline"] = deadline;
      pending_notices_.emplace(n->id,
                               rec);  // a later notice to a draining node keeps the first record
    }
    body = {{"node", n->name}, {"id", n->id}, {"action", what}, {"deadline_unix_ms", deadline}};
  } else if (auto view = snapshot_view(*this, cmd)) {
    body = std::move(*view);  // iterations | interruptions | ledger | snapshot
  } else {
    return fail(errc::unknown_command,
                "unknown command '" + cmd + "' (" + messages::kAdminVerbs + ")");
  }
  rep.ok = true;
  rep.body_json = json_text(body);
  return rep;
}

}  // namespace moerl::actors
