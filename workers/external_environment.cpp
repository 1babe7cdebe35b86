#include "workers/external_environment.h"

#include <chrono>

#include "common/log.h"
#include "workers/worker_protocol.h"

namespace moerl::workers {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class external_environment final : public env::environment {
 public:
  external_environment(std::shared_ptr<env_host> host, uint64_t session, std::string task)
      : host_(std::move(host)), session_(session), task_(std::move(task)) {}
  ~external_environment() override {
    if (opened_ && incarnation_ == host_->incarnation()) host_->close(session_);
  }
  result<env::env_observation> reset(uint64_t episode_seed) override {
    auto o = host_->call("env_reset", session_, {{"task", task_}, {"seed", episode_seed}});
    if (o) {
      opened_ = true;
      incarnation_ = host_->incarnation();
    }
    return o;
  }
  result<env::env_observation> step(const std::vector<uint32_t>& action) override {
    if (!opened_) return error(errc::invalid_argument, "step before reset");
    if (incarnation_ != host_->incarnation())
      return error(errc::peer_dead, "session " + std::to_string(session_) +
                                        " was lost with its environment worker (restarted)");
    return host_->call("env_step", session_, {{"action", action}});
  }

 private:
  std::shared_ptr<env_host> host_;
  uint64_t session_;
  std::string task_;
  bool opened_ = false;
  uint64_t incarnation_ = 0;
};

}  // namespace

env_host::env_host(env_host_options o, worker_spec s)
    : opts_(std::move(o)),
      link_(std::move(s), {"env", opts_.start_timeout_ms, opts_.restart_backoff_ms, {}}) {}

result<std::shared_ptr<env_host>> env_host::create(env_host_options opts) {
  auto spec = parse_worker_spec(opts.worker, "env", opts.python);
  if (!spec) return spec.err();
  return std::shared_ptr<env_host>(new env_host(std::move(opts), std::move(*spec)));
}

result<env::env_observation> env_host::call(const char* type, uint64_t session,
                                            nlohmann::json fields) {
  if (auto s = link_.ensure_started(); !s) return s.err();
  ++requests_;
  const uint64_t id = next_id_++;
  const int64_t deadline = now_ms() + opts_.timeout_ms;
  auto& ch = link_.channel();
  fields["v"] = kProtocolVersion;
  fields["type"] = type;
  fields["id"] = id;
  fields["session"] = session;
  const std::string what = std::string(type) + " of session " + std::to_string(session);
  if (auto s = ch.send(fields, opts_.timeout_ms); !s) {
    link_.drop(what + ": " + s.err().to_string());
    return error(errc::peer_dead, "env worker: " + link_.last_death());
  }
  for (;;) {
    const int64_t left = deadline - now_ms();
    auto got = ch.receive(left > 0 ? left : 0);
    if (!got) {
      if (got.err().code == errc::malformed_message) {
        ++refused_;
        (void)ch.send(error_frame(refusal::malformed, got.err().message), 1000);
        continue;
      }
      link_.drop(got.err().to_string());
      return error(errc::peer_dead, "env worker died in " + what + ": " + link_.last_death());
    }
    if (!*got) {
      ++timed_out_;
      link_.drop("no answer within env.worker_timeout_ms=" + std::to_string(opts_.timeout_ms));
      return error(errc::timeout, "env worker gave no answer to " + what + " within " +
                                      std::to_string(opts_.timeout_ms) + " ms");
    }
    const auto& msg = **got;
    auto c = check_envelope(msg, {"env_result", "env_error"});
    uint64_t got_id = 0;
    std::string detail;
    if (c.ok && !read_u64(msg, "id", got_id, detail)) {
      c = {false, "", refusal::malformed, detail};
    } else if (c.ok && got_id != id) {
      c = {false, "", refusal::wrong_id,
           "reply to id " + std::to_string(got_id) + "; the outstanding request is id " +
               std::to_string(id)};
    }
    env::env_observation o;
    double reward = 0;
    if (c.ok && c.type == "env_result") {
      if (!read_u32_list(msg, "tokens", o.tokens, detail) ||
          !read_finite(msg, "reward", reward, detail)) {
        c = {false, "", refusal::malformed, detail};
      } else if (!msg.contains("done") || !msg["done"].is_boolean()) {
        c = {false, "", refusal::malformed, "\"done\" is missing or not a boolean"};
      }
    }
    if (!c.ok) {
      ++refused_;
      logger("env")->warn("env worker message refused ({}): {}", refusal_name(c.why), c.detail);
      (void)ch.send(error_frame(c.why, c.detail), 1000);
      continue;
    }
    if (c.type == "env_error") {
      ++raised_;
      logger("env")->warn("the env worker's environment raised in {}: {}\n{}", what,
                          msg.value("error", "?"), msg.value("traceback", ""));
      return error(errc::invalid_argument, "the env worker's environment raised in " + what + ": " +
                                               msg.value("error", "?") + "\n" +
                                               msg.value("traceback", ""));
    }
    o.reward = static_cast<float>(reward);
    o.done = msg["done"].get<bool>();
    return o;
  }
}

void env_host::close(uint64_t session) {
  if (!link_.running()) return;
  (void)link_.channel().send({{"v", kProtocolVersion}, {"type", "env_close"}, {"session", session}},
                             1000);
}

nlohmann::json env_host::stats() const {
  return {{"requests", requests_},           {"raised", raised_},
          {"timed_out", timed_out_},         {"refused_replies", refused_},
          {"worker_starts", link_.starts()}, {"worker_deaths", link_.deaths()}};
}

std::unique_ptr<env::environment> make_external_environment(std::shared_ptr<env_host> host,
                                                            uint64_t session, std::string task) {
  return std::make_unique<external_environment>(std::move(host), session, std::move(task));
}

}  // namespace moerl::workers
