#include "job/external_trainer_step.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <tuple>

#include "common/log.h"
#include "job/shard_checkpointer.h"
#include "policy/params.h"
#include "store/checkpoint.h"
#include "store/digest.h"
#include "workers/external_trainer.h"

namespace moerl::job {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Where the worker's tensor files go: shared memory when the host has it. The node's pid
// leads the name, so `moerl up` removes what a killed node left (common/shm_leftovers.h).
std::string tensor_file_prefix() {
  const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return dir + "/" + std::to_string(::getpid()) + ":trainer:";
}

class external_trainer_step final : public actors::trainer_step {
 public:
  explicit external_trainer_step(external_trainer_setup s)
      : s_(std::move(s)),
        ckpt_prefix_(s_.store_prefix + "/external/ckpt"),
        marker_key_(s_.store_prefix + "/external/published") {}

  ~external_trainer_step() override {
    if (worker_) worker_->stop(1000);
    if (!resume_path_.empty()) ::unlink(resume_path_.c_str());
  }

  status init(const config& cfg) {
    workers::external_trainer_options o;
    o.worker = cfg.get_string("trainer.worker");
    o.python = cfg.get_string("worker.python");
    o.start_timeout_ms = cfg.get_int("worker.start_timeout_ms");
    o.restart_backoff_ms = cfg.get_int("worker.restart_backoff_ms");
    o.step_timeout_ms = cfg.get_int("trainer.worker_timeout_ms");
    o.file_prefix = tensor_file_prefix();
    file_prefix_ = o.file_prefix;
    // Versions continue past every one this run announced (the marker is written before each
    // announcement) and past the newest checkpoint: a recreated trainer node never reuses a
    // number a rollout may have generated with.
    if (auto m = s_.store->get(marker_key_); m) {
      version_ = std::strtoull(m->c_str(), nullptr, 10);
    } else if (m.err().code != errc::not_found) {
      return m.err();
    }
    // The worker's checkpoints are written as the native trainer's are (job/shard_checkpointer.h):
    // one shard, in the background, the worker waiting only when job.max_durability_lag
    // versions are published beyond the newest committed one.
    const int64_t keep_every = cfg.get_int("job.checkpoint_every");
    ckpt_ = std::make_unique<shard_checkpointer>(
        s_.store, ckpt_prefix_, 0, 1, static_cast<uint64_t>(cfg.get_int("job.max_durability_lag")),
        static_cast<uint64_t>(keep_every > 0 ? keep_every : kKeepEveryWhenUnset));
    if (auto c = store::latest_committed(*s_.store, ckpt_prefix_); c) {
      version_ = std::max(version_, c->step);
      resumed_from_ = c->step;
      ckpt_->set_durable(c->step);
    } else if (c.err().code != errc::not_found) {
      return c.err();
    }
    workers::external_trainer_handlers h;
    h.publish = [this](std::string bytes, const nlohmann::json& req) {
      return publish(std::move(bytes), req);
    };
    h.checkpoint = [this](std::string bytes, const nlohmann::json& req) {
      return checkpoint(std::move(bytes), req);
    };
    h.welcome = [this] { return welcome(); };
    auto w = workers::external_trainer::create(std::move(o), std::move(h));
    if (!w) return w.err();
    worker_ = std::move(*w);
    return {};
  }

  uint64_t version() const override { return version_; }
  uint64_t num_held_groups() const override { return held_groups_; }
  uint64_t num_groups_wanted() const override { return wanted_; }

  // Its import and checkpoint load overlap the first rollouts. A failure is the first
  // train()'s to report (hand() starts another after the backoff).
  void prepare() override { (void)worker_->start(); }

  void drop_held() override {
    // A worker still holding groups would train them again when the new incarnation's
    // shards serve them: it goes, and its successor resumes from its checkpoint.
    if (held_groups_ > 0 && worker_->running()) {
      logger("trainer")->warn(
          "the trainer restarts holding {} group(s) no version has: stopping its worker",
          held_groups_);
      worker_->stop(1000);
    }
    clear_iteration();
  }

  result<actors::train_result> train(const std::vector<messages::sample>& batch) override {
    actors::train_result out;
    if (batch.empty() && held_groups_ == 0) return out;  // a flush with nothing held
    nlohmann::json groups = nlohmann::json::array();
    std::tuple<uint64_t, uint32_t, uint64_t> last{0, 0, 0};
    for (const auto& m : batch) {
      if (m.logprobs.size() != m.tokens.size() || !m.rewarded) {
        ++out.bad;
        continue;
      }
      const std::tuple<uint64_t, uint32_t, uint64_t> key{m.work_unit, m.attempt, m.group_id};
      if (groups.empty() || key != last) {
        groups.push_back({{"group_id", m.group_id},
                          {"unit", m.work_unit},
                          {"prompt", m.prompt_tokens},
                          {"samples", nlohmann::json::array()}});
        last = key;
      }
      groups.back()["samples"].push_back({{"index", m.index_in_group},
                                          {"tokens", m.tokens},
                                          {"logprobs", m.logprobs},
                                          {"reward", m.reward},
                                          {"policy_version", m.policy_version}});
      sum_reward_ += m.reward;
      staleness_ += double(version_ - std::min(version_, m.policy_version));
      generate_us_ += m.generate_us;
      reward_us_ += m.reward_us;
      ++samples_;
    }
    // Only a flush hands the worker an empty batch (every sample of this one was refused).
    if (groups.empty() && !batch.empty()) return out;
    out.groups = groups.size();
    held_groups_ += groups.size();
    held_for_curve_ += groups.size();
    if (!first_batch_ms_) first_batch_ms_ = unix_ms();
    new_manifest_.reset();
    auto wanted = worker_->hand(groups, batch.empty());
    if (!wanted) return wanted.err();
    wanted_ = *wanted;
    if (new_manifest_) {
      out.new_version = true;
      out.manifest = *new_manifest_;
    }
    return out;
  }

  nlohmann::json stats() const override {
    nlohmann::json out = s_.facts;
    out["trainer"] = "external";
    out["policy_version"] = version_;
    out["pending_groups"] = held_groups_;
    out["resumed_from_version"] = resumed_from_;
    out["reward_curve"] = curve_;
    out["iterations"] = timings_;
    out["external_worker"] = worker_->stats();
    out["weights"] = {{"versions", published_}};
    return out;
  }

 private:
  void clear_iteration() {
    held_groups_ = held_for_curve_ = samples_ = 0;
    sum_reward_ = staleness_ = 0;
    generate_us_ = reward_us_ = 0;
    first_batch_ms_ = 0;
  }

  // The worker's tensors become version_ + 1: the marker first (a recreated trainer numbers
  // on past it), then a cache or the store holds it; announced when train() returns.
  result<nlohmann::json> publish(std::string bytes, const nlohmann::json& req) {
    const int64_t t0 = unix_ms();
    const uint64_t v = version_ + 1;
    if (auto st = s_.store->put(marker_key_, std::to_string(v)); !st) return st.err();
    auto shared = std::make_shared<const std::string>(std::move(bytes));
    auto via = s_.publish(v, shared);
    if (!via) return via.err();
    version_ = v;
    const std::string hash = policy::content_hash(*shared);
    messages::weight_manifest m;
    m.version = v;
    m.content_hash = hash;
    m.total_bytes = shared->size();
    m.parts.push_back(
        {s_.store_prefix + "/weights/v" + std::to_string(v), 0, shared->size(), hash});
    m.created_unix_ms = static_cast<uint64_t>(unix_ms());
    new_manifest_ = m;
    const double n = double(std::max<uint64_t>(samples_, 1));
    nlohmann::json point{{"iteration", v},
                         {"mean_reward", samples_ ? sum_reward_ / n : 0.0},
                         {"samples", samples_},
                         {"groups", held_for_curve_},
                         {"staleness", staleness_ / n}};
    if (auto mt = req.find("metrics"); mt != req.end() && mt->is_object())
      for (const auto& [k, val] : mt->items())
        if (!point.contains(k)) point[k] = val;
    curve_.push_back(point);
    const int64_t end = unix_ms();
    timings_.push_back({{"iteration", v},
                        {"t_train", first_batch_ms_ ? double(t0 - first_batch_ms_) / 1000.0 : 0.0},
                        {"t_weights", double(end - t0) / 1000.0},
                        {"t_generate", double(generate_us_) * 1e-6},
                        {"t_reward", double(reward_us_) * 1e-6},
                        {"generate_ms_per_sample", double(generate_us_) * 1e-3 / n},
                        {"reward_ms_per_sample", double(reward_us_) * 1e-3 / n},
                        {"end_unix_ms", end}});
    published_.push_back({{"version", v},
                          {"bytes", shared->size()},
                          {"t_publish", double(end - t0) / 1000.0},
                          {"via", *via},
                          {"num_shards", 1},
                          {"held_unix_ms", end}});
    for (auto* list : {&curve_, &timings_, &published_})
      if (list->size() > 4096) list->erase(list->begin());
    logger("trainer")->info("external trainer published policy version {} ({} bytes, via {})", v,
                            shared->size(), *via);
    clear_iteration();  // every group handed so far is in this version
    return nlohmann::json{{"version", v},
                          {"content_hash", hash},
                          {"sha256", store::sha256_hex(*shared)},
                          {"via", *via}};
  }

  // A checkpoint of the worker's state, numbered with the newest version published (the state
  // the worker resumes from holds that version's weights, or later ones), queued for the store
  // and written in the background: the reply comes at once with the newest version already
  // durable, unless job.max_durability_lag versions are published beyond it (then it waits
  // for the store, as the native trainer does). A rewrite of the same version (a second
  // checkpoint with no publish between) replaces it.
  result<nlohmann::json> checkpoint(std::string bytes, const nlohmann::json& req) {
    if (auto st = ckpt_->throttle(version_); !st) return st.err();
    nlohmann::json meta = req.value("meta", nlohmann::json::object());
    if (!meta.is_object()) meta = nlohmann::json::object();
    meta["policy_version"] = version_;
    meta["external"] = true;
    const std::string hash = policy::content_hash(bytes);
    meta["content_hash"] = hash;
    std::vector<store::checkpoint_part> parts;
    parts.push_back({"state", std::move(bytes)});
    ckpt_->submit(version_, std::move(parts), std::move(meta));
    return nlohmann::json{
        {"version", version_}, {"content_hash", hash}, {"durable_version", ckpt_->durable()}};
  }

  // What a newly started worker is told: the version it continues from and the newest
  // checkpoint, its state written as a file it reads (and removes).
  nlohmann::json welcome() {
    if (!resume_path_.empty()) ::unlink(resume_path_.c_str());
    resume_path_.clear();
    nlohmann::json w{{"version", version_},
                     {"groups_per_iteration", s_.groups_per_iteration},
                     {"file_prefix", file_prefix_},
                     {"checkpoint", nullptr}};
    auto c = newest_checkpoint();
    if (!c) {
      if (c.err().code != errc::not_found)
        logger("trainer")->warn("no checkpoint offered to the trainer worker: {}",
                                c.err().to_string());
      return w;
    }
    for (const auto& p : c->second) {
      if (p.name != "state") continue;
      const std::string path = file_prefix_ + "resume-" + std::to_string(c->first.step);
      FILE* f = std::fopen(path.c_str(), "wb");
      const bool ok = f && std::fwrite(p.bytes.data(), 1, p.bytes.size(), f) == p.bytes.size();
      if (f) std::fclose(f);
      if (!ok) {
        logger("trainer")->warn("cannot write the resume file {}", path);
        ::unlink(path.c_str());
        return w;
      }
      resume_path_ = path;
      w["checkpoint"] = {{"path", path},
                         {"bytes", p.bytes.size()},
                         {"version", c->first.step},
                         {"meta", c->first.meta}};
    }
    return w;
  }

  // The newest committed checkpoint's manifest and state: written by this node's checkpointer
  // or an earlier node's; the queued writes are waited for first (a restarted worker resumes
  // from what its predecessor last asked for).
  result<std::pair<store::checkpoint_manifest, std::vector<store::checkpoint_part>>>
  newest_checkpoint() {
    ckpt_->flush();
    auto c = store::latest_committed(*s_.store, ckpt_prefix_);
    if (!c) return c.err();
    return read_own_shard(*s_.store, ckpt_prefix_, c->step, 0);
  }

  // job.checkpoint_every=0 turns the native checkpoints off; a worker's checkpoints are its
  // own to ask for, and of the older ones every this many stay.
  static constexpr uint64_t kKeepEveryWhenUnset = 10;

  external_trainer_setup s_;
  const std::string ckpt_prefix_, marker_key_;
  std::unique_ptr<shard_checkpointer> ckpt_;
  std::string file_prefix_, resume_path_;
  std::unique_ptr<workers::external_trainer> worker_;
  uint64_t version_ = 0, resumed_from_ = 0, wanted_ = 0;
  uint64_t held_groups_ = 0, held_for_curve_ = 0, samples_ = 0;
  double sum_reward_ = 0, staleness_ = 0;
  uint64_t generate_us_ = 0, reward_us_ = 0;
  int64_t first_batch_ms_ = 0;
  std::optional<messages::weight_manifest> new_manifest_;
  std::vector<nlohmann::json> curve_, timings_, published_;
};

}  // namespace

result<std::unique_ptr<actors::trainer_step>> make_external_trainer_step(
    const config& cfg, external_trainer_setup setup) {
  if (cfg.get_int("trainer.group_size") > 1)
    return error(errc::invalid_config,
                 "trainer.worker runs the trainer in one worker process: trainer.group_size must "
                 "be 1, not " +
                     std::to_string(cfg.get_int("trainer.group_size")));
  auto t = std::make_unique<external_trainer_step>(std::move(setup));
  if (auto st = t->init(cfg); !st) return st.err();
  return std::unique_ptr<actors::trainer_step>(std::move(t));
}

}  // namespace moerl::job
