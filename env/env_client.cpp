#include "env/env_client.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/rate_limited_log.h"

namespace moerl::env {
namespace {

using nlohmann::json;
using clock = std::chrono::steady_clock;

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now().time_since_epoch())
      .count();
}

// A node that let a request time out takes no new sessions for this long (a dead or
// overloaded node: the coordinator drops a dead one from discovery within a heartbeat
// timeout anyway).
constexpr int64_t kSuspectMs = 5000;
constexpr int64_t kDiscoverEveryMs = 2000;

struct env_node {
  void* sock = nullptr;  // DEALER connected to the node's ROUTER
  uint64_t reported_sessions = 0;
  uint64_t opened_since_report = 0;
  int64_t suspect_until = 0;
  uint64_t load() const { return reported_sessions + opened_since_report; }
};

struct episode {
  std::string node;  // endpoint; empty when failed
  uint64_t session = 0;
  bool open = false;
};

class env_client final : public env_link {
 public:
  env_client(env_client_options options, std::shared_ptr<env_link_counters> counters)
      : opts_(std::move(options)),
        counters_(std::move(counters)),
        timeout_ms_(opts_.step_timeout_ms) {}

  ~env_client() override {
    close_all();
    for (auto& [ep, n] : nodes_) zmq_close(n.sock);
  }

  std::vector<result<env_observation>> reset(const std::string& task,
                                             const std::vector<uint64_t>& seeds) override {
    close_all();
    episodes_.assign(seeds.size(), episode{});
    refresh_nodes(false);
    std::vector<request> reqs;
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string ep = pick_node();
      if (ep.empty()) continue;  // answered below as "no env node"
      ++nodes_[ep].opened_since_report;
      episodes_[i].node = ep;
      reqs.push_back({i, ep, json{{"op", "reset"}, {"task", task}, {"seed", seeds[i]}}});
    }
    auto out = exchange(reqs, seeds.size(), "reset");
    for (size_t i = 0; i < seeds.size(); ++i) {
      if (!episodes_[i].node.empty()) continue;
      out[i] = error(errc::not_found, "no env node is running");
      std::lock_guard<std::mutex> lk(counters_->mu);
      ++counters_->episodes_failed["no_env_node"];
    }
    std::lock_guard<std::mutex> lk(counters_->mu);
    counters_->num_episodes += seeds.size();
    return out;
  }

  std::vector<result<env_observation>> step(
      const std::vector<size_t>& which,
      const std::vector<std::vector<uint32_t>>& actions) override {
    std::vector<request> reqs;
    std::vector<result<env_observation>> early(which.size(), env_observation{});
    for (size_t k = 0; k < which.size(); ++k) {
      const size_t i = which[k];
      if (i >= episodes_.size() || !episodes_[i].open) {
        early[k] = error(errc::invalid_argument, "episode " + std::to_string(i) + " is not open");
        continue;
      }
      reqs.push_back(
          {k, episodes_[i].node,
           json{{"op", "step"}, {"session", episodes_[i].session}, {"action", actions[k]}}});
    }
    auto out = exchange_steps(reqs, which, early);
    std::lock_guard<std::mutex> lk(counters_->mu);
    counters_->num_steps += reqs.size();
    return out;
  }

  void close_all() override {
    for (auto& e : episodes_) {
      if (!e.open) continue;
      auto it = nodes_.find(e.node);
      if (it != nodes_.end()) {
        const std::string body =
            json{{"id", next_id_++}, {"op", "close"}, {"session", e.session}}.dump();
        (void)zmq_send(it->second.sock, body.data(), body.size(), ZMQ_DONTWAIT);  // best effort
      }
      e.open = false;
    }
  }

 private:
  struct request {
    size_t slot;       // index into the answer vector
    std::string node;  // endpoint
    json body;
  };

  std::vector<result<env_observation>> exchange_steps(const std::vector<request>& reqs,
                                                      const std::vector<size_t>& which,
                                                      std::vector<result<env_observation>>& early) {
    auto out = exchange(reqs, which.size(), "step");
    for (size_t k = 0; k < which.size(); ++k)
      if (!early[k]) out[k] = early[k].err();
    return out;
  }

  // Sends every request, then waits for their answers until env.step_timeout_ms has passed
  // since the sends. Answers are matched by id, so a late answer to an earlier, timed-out
  // request is recognised and dropped.
  std::vector<result<env_observation>> exchange(const std::vector<request>& reqs, size_t n,
                                                const char* op) {
    std::vector<result<env_observation>> out(n, env_observation{});
    std::map<uint64_t, const request*> waiting;
    std::map<uint64_t, clock::time_point> sent_at;
    for (const auto& r : reqs) {
      auto it = nodes_.find(r.node);
      const uint64_t id = next_id_++;
      json body = r.body;
      body["id"] = id;
      const std::string bytes = body.dump();
      if (it == nodes_.end() ||
          zmq_send(it->second.sock, bytes.data(), bytes.size(), ZMQ_DONTWAIT) == -1) {
        out[r.slot] = fail(r, "env node " + r.node + " took no request", "send_failed");
        continue;
      }
      waiting[id] = &r;
      sent_at[id] = clock::now();
    }
    const int64_t deadline = steady_ms() + timeout_ms_;
    while (!waiting.empty() && !stopping()) {
      std::vector<zmq_pollitem_t> items;
      std::vector<std::string> eps;
      for (auto& [ep, node] : nodes_) {
        items.push_back({node.sock, 0, ZMQ_POLLIN, 0});
        eps.push_back(ep);
      }
      const int64_t left = deadline - steady_ms();
      if (left <= 0) break;
      if (zmq_poll(items.data(), static_cast<int>(items.size()), std::min<int64_t>(left, 50)) < 0)
        break;
      for (size_t k = 0; k < items.size(); ++k) {
        if (!(items[k].revents & ZMQ_POLLIN)) continue;
        std::string bytes;
        while (receive(nodes_[eps[k]].sock, &bytes)) {
          const json rep = json::parse(bytes, nullptr, false);
          if (!rep.is_object() || !rep.contains("id") || !rep["id"].is_number_unsigned()) continue;
          auto w = waiting.find(rep["id"].get<uint64_t>());
          if (w == waiting.end()) continue;  // late answer to a request already failed
          const request& r = *w->second;
          auto& node = nodes_[r.node];
          node.reported_sessions = rep.value("sessions", node.reported_sessions);
          node.opened_since_report = 0;
          out[r.slot] = read_answer(r, rep,
                                    std::chrono::duration_cast<std::chrono::microseconds>(
                                        clock::now() - sent_at[w->first])
                                        .count());
          waiting.erase(w);
        }
      }
    }
    for (auto& [id, r] : waiting) {
      nodes_[r->node].suspect_until = steady_ms() + kSuspectMs;
      out[r->slot] = fail(*r,
                          "env node " + r->node + " did not answer a " + op + " within " +
                              std::to_string(timeout_ms_) + " ms (env.step_timeout_ms)",
                          stopping() ? "stopping" : "timeout");
    }
    return out;
  }

  result<env_observation> read_answer(const request& r, const json& rep, int64_t latency_us) {
    const bool is_reset = r.body.value("op", "") == "reset";
    episode* e = nullptr;
    if (is_reset && r.slot < episodes_.size()) e = &episodes_[r.slot];
    if (!is_reset) {
      for (auto& x : episodes_)
        if (x.open && x.session == r.body.value("session", uint64_t{0})) e = &x;
    }
    if (!rep.value("ok", false)) {
      const std::string why = rep.value("error", std::string("refused"));
      const bool gone = why.rfind("unknown session", 0) == 0;
      if (e && (is_reset || gone)) e->open = false;
      return fail(r, "env node " + r.node + ": " + why, gone ? "env_restarted" : "refused");
    }
    env_observation o;
    try {
      for (const auto& t : rep.at("observation")) o.tokens.push_back(t.get<uint32_t>());
      o.reward = rep.value("reward", 0.0f);
      o.done = rep.value("done", false);
    } catch (const json::exception& ex) {
      return fail(r, "env node " + r.node + " sent a malformed answer: " + ex.what(), "malformed");
    }
    o.latency_us = static_cast<uint32_t>(std::clamp<int64_t>(latency_us, 0, UINT32_MAX));
    if (is_reset && e) {
      e->session = rep.value("session", uint64_t{0});
      e->open = !o.done;
    } else if (e && o.done) {
      e->open = false;
    }
    return o;
  }

  error fail(const request& r, std::string why, const std::string& reason) {
    if (r.body.value("op", "") == "reset" && r.slot < episodes_.size())
      episodes_[r.slot].open = false;
    {
      std::lock_guard<std::mutex> lk(counters_->mu);
      ++counters_->episodes_failed[reason];
    }
    log_.note(reason, why);
    return error(reason == "timeout" ? errc::timeout : errc::peer_dead, std::move(why));
  }

  static bool receive(void* sock, std::string* out) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) == -1) {
      zmq_msg_close(&msg);
      return false;
    }
    out->assign(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    return true;
  }

  // The live env node with the least load that is not suspect; "" when there is none.
  std::string pick_node() {
    std::string best;
    const int64_t now = steady_ms();
    for (int pass = 0; pass < 2 && best.empty(); ++pass) {
      for (auto& [ep, n] : nodes_) {
        if (pass == 0 && n.suspect_until > now) continue;  // second pass: any node at all
        if (best.empty() || n.load() < nodes_[best].load()) best = ep;
      }
    }
    return best;
  }

  // Connects to env nodes that joined and drops the ones that left (Spot).
  void refresh_nodes(bool force) {
    if (!force && steady_ms() < next_discovery_ && !nodes_.empty()) return;
    next_discovery_ = steady_ms() + kDiscoverEveryMs;
    auto found = opts_.discover_env_nodes();
    if (!found) return;  // coordinator restarting: keep what we know
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      if (std::find(found->begin(), found->end(), it->first) == found->end()) {
        zmq_close(it->second.sock);
        it = nodes_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& ep : *found) {
      if (nodes_.count(ep)) continue;
      void* s = zmq_socket(opts_.zmq->handle(), ZMQ_DEALER);
      if (!s) continue;
      int linger = 0, hwm = 1024;
      (void)zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
      (void)zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
      if (auto secured = opts_.zmq->secure_client(s); !secured) {
        log_.note("securing the env link failed", ep + ": " + secured.err().to_string());
        zmq_close(s);
        continue;
      }
      if (zmq_connect(s, ep.c_str()) != 0) {
        log_.note("connect failed", ep + ": " + zmq_strerror(zmq_errno()));
        zmq_close(s);
        continue;
      }
      nodes_[ep].sock = s;
    }
  }

  bool stopping() const { return opts_.stopping && opts_.stopping->load(); }

  env_client_options opts_;
  std::shared_ptr<env_link_counters> counters_;
  int64_t timeout_ms_;
  std::map<std::string, env_node> nodes_;  // by endpoint
  std::vector<episode> episodes_;
  uint64_t next_id_ = 1;
  int64_t next_discovery_ = 0;
  rate_limited_log log_{"env client: episode failed",
                        [](const std::string& line) { logger("env-client")->warn("{}", line); },
                        std::chrono::seconds(2)};
};

}  // namespace

nlohmann::json env_report(const nlohmann::json& trainer_env, const nlohmann::json& nodes) {
  json out = trainer_env;
  json failed = json::object();
  if (nodes.is_array()) {
    for (const auto& n : nodes) {
      if (n.value("role", "") != "rollout" || !n.contains("stats") || !n["stats"].is_object())
        continue;
      const json env = n["stats"].value("env", json::object());
      const json f = env.is_object() ? env.value("episodes_failed", json::object()) : json();
      if (!f.is_object()) continue;
      for (auto it = f.begin(); it != f.end(); ++it)
        if (it.value().is_number_unsigned())
          failed[it.key()] = failed.value(it.key(), uint64_t{0}) + it.value().get<uint64_t>();
    }
  }
  out["episodes_failed"] = failed;
  return out;
}

std::unique_ptr<env_link> make_env_client(env_client_options options,
                                          std::shared_ptr<env_link_counters> counters) {
  return std::make_unique<env_client>(std::move(options), std::move(counters));
}

}  // namespace moerl::env
