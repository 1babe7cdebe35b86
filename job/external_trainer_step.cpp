#include "job/external_trainer_step.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "actors/group_rounds.h"
#include "common/log.h"
#include "job/group_bootstrap.h"
#include "job/shard_checkpointer.h"
#include "policy/params.h"
#include "store/checkpoint.h"
#include "store/digest.h"
#include "workers/external_trainer.h"
#include "workers/worker_group.h"

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

// The worker's keys, as every trainer node (member) reads them.
workers::external_trainer_options worker_options(const config& cfg) {
  workers::external_trainer_options o;
  o.worker = cfg.get_string("trainer.worker");
  o.python = cfg.get_string("worker.python");
  o.start_timeout_ms = cfg.get_int("worker.start_timeout_ms");
  o.restart_backoff_ms = cfg.get_int("worker.restart_backoff_ms");
  o.step_timeout_ms = cfg.get_int("trainer.worker_timeout_ms");
  o.file_prefix = tensor_file_prefix();
  return o;
}

// job.checkpoint_every=0 turns the native checkpoints off; a worker's checkpoints are its
// own to ask for, and of the older ones every this many stay.
constexpr uint64_t kKeepEveryWhenUnset = 10;

// The versions a worker's checkpoint_due() names: job.checkpoint_interval as the native
// trainer applies it, so that a worker that checkpoints only those writes what it would.
uint64_t worker_checkpoint_interval(const config& cfg) {
  return checkpoint_interval(cfg.get_int("job.checkpoint_interval"),
                             cfg.get_int("job.max_durability_lag"));
}

uint64_t checkpoints_kept_every(const config& cfg) {
  const int64_t keep_every = cfg.get_int("job.checkpoint_every");
  return keep_every > 0 ? static_cast<uint64_t>(keep_every) : kKeepEveryWhenUnset;
}

// ---- Python trainer groups (python/WORKERS.md, "Trainer groups") --------------------------
// The rendezvous (workers/worker_group.h) also names the version the workers continue from and
// the committed checkpoint every rank resumes its own shard of (0: none).
using workers::group_place;
using workers::group_rendezvous;

// The welcome's "checkpoint": checkpoint `m`'s "state" part written as the file the worker's
// resume() reads (and removes), or null when it has none or the file cannot be written
// (logged). `path` is set to the file, for the caller to remove if the worker does not.
nlohmann::json offer_checkpoint(const std::string& file_prefix, const store::checkpoint_manifest& m,
                                const std::vector<store::checkpoint_part>& parts,
                                std::string& path) {
  for (const auto& p : parts) {
    if (p.name != "state") continue;
    const std::string file = file_prefix + "resume-" + std::to_string(m.step);
    FILE* f = std::fopen(file.c_str(), "wb");
    const bool ok = f && std::fwrite(p.bytes.data(), 1, p.bytes.size(), f) == p.bytes.size();
    if (f) std::fclose(f);
    if (!ok) {
      logger("trainer")->warn("cannot write the resume file {}", file);
      ::unlink(file.c_str());
      return nullptr;
    }
    path = file;
    return {{"path", file}, {"bytes", p.bytes.size()}, {"version", m.step}, {"meta", m.meta}};
  }
  return nullptr;
}

// How long a member waits for a rendezvous or a stop round before it counts the group broken.
constexpr int64_t kRendezvousRoundMs = 60000;
constexpr int64_t kStopRoundMs = 5000;

class external_trainer_step final : public actors::trainer_step {
 public:
  explicit external_trainer_step(external_trainer_setup s)
      : s_(std::move(s)),
        ckpt_prefix_(s_.store_prefix + "/external/ckpt"),
        marker_key_(s_.store_prefix + "/external/published") {}

  ~external_trainer_step() override {
    if (worker_) worker_->stop(1000);
    if (!resume_path_.empty()) ::unlink(resume_path_.c_str());
    // The group's other members serve their workers until this round (a broken group's
    // round fails at once: they have left already).
    if (group_ && rv_)
      (void)all_members_allgather(*group_, nlohmann::json{{"op", "stop"}}.dump(), kStopRoundMs);
  }

  status init(const config& cfg) {
    workers::external_trainer_options o = worker_options(cfg);
    file_prefix_ = o.file_prefix;
    checkpoint_interval_ = worker_checkpoint_interval(cfg);
    const uint32_t num_shards = group_ ? group_->num_members() : 1;
    if (group_) {
      o.group_abort = group_->abort_flag();
      o.world_size = num_shards;
    }
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
    // A group's checkpoint is one shard per member (each rank's own state), member 0
    // committing once every shard is durable.
    ckpt_ = std::make_unique<shard_checkpointer>(
        s_.store, ckpt_prefix_, 0, num_shards,
        static_cast<uint64_t>(cfg.get_int("job.max_durability_lag")), checkpoints_kept_every(cfg),
        group_ ? group_->abort_flag() : nullptr);
    if (auto c = store::latest_committed(*s_.store, ckpt_prefix_); c) {
      version_ = std::max(version_, c->step);
      resumed_from_ = c->step;
      ckpt_->set_durable(c->step);
      const uint64_t shape = c->meta.value("num_shards", uint64_t(1));
      if (shape == num_shards) {
        resume_step_ = c->step;
      } else {
        logger("trainer")->warn(
            "checkpoint {} was written by a trainer of {} worker(s); this one has {}: not "
            "offered to the workers (they start from their initial weights at version {})",
            c->step, shape, num_shards, version_);
      }
    } else if (c.err().code != errc::not_found) {
      return c.err();
    }
    if (group_) {  // the incarnation's rendezvous, before the worker starts
      auto picked = workers::pick_rendezvous(cfg, group_->incarnation());
      if (!picked) return error{picked.err().code, "trainer group " + picked.err().message};
      group_rendezvous r = *picked;
      r.version = version_;
      r.resume_step = resume_step_;
      auto round = all_members_allgather(*group_, workers::to_json(r).dump(), kRendezvousRoundMs);
      if (!round) return round.err();
      rv_ = r;
      logger("trainer")->info(
          "trainer group incarnation {}: {} Python ranks meet at {}:{} (version {}, resuming "
          "checkpoint {})",
          r.incarnation, num_shards, r.addr, r.port, r.version, r.resume_step);
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
    // A group's workers live and die together: rank 0's worker is not restarted inside an
    // incarnation (the others would wait for the old one in their collectives); the driver's
    // restart re-forms the group and every member starts a new worker.
    if (group_ && group_->abort_flag() && group_->abort_flag()->load())
      return error(errc::peer_dead, "the trainer group broke (a member was lost)");
    if (group_ && worker_->starts() > 0 && !worker_->running())
      return error(errc::peer_dead, "trainer rank 0's worker is gone; the group re-forms");
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

  nlohmann::json stats(const actors::history_cursor& from) const override {
    nlohmann::json out = s_.facts;
    out["trainer"] = "external";
    out["policy_version"] = version_;
    out["pending_groups"] = held_groups_;
    out["resumed_from_version"] = resumed_from_;
    out["external_worker"] = worker_->stats();
    actors::put_history(out, "/reward_curve", curve_, from, dropped_[0]);
    actors::put_history(out, "/iterations", timings_, from, dropped_[1]);
    actors::put_history(out, "/weights/versions", published_, from, dropped_[2]);
    // durable_version: the newest checkpoint committed (every member's shard written).
    out["checkpoints"] = {{"num_shards", ckpt_->num_shards()},
                          {"durable_version", ckpt_->durable()},
                          {"written", ckpt_->num_written()},
                          {"failed", ckpt_->num_failed()}};
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
    for (size_t i = 0; i < 3; ++i)
      if (lists_[i]->size() > 4096) {
        lists_[i]->erase(lists_[i]->begin());
        ++dropped_[i];
      }
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
    // A group's ranks name the version their shard is of: all must be rank 0's newest.
    if (auto v = req.find("version");
        v != req.end() && !(v->is_number_unsigned() && *v == version_))
      return error(errc::invalid_argument, "checkpoint of version " + v->dump() +
                                               " on trainer rank 0, whose newest published "
                                               "version is " +
                                               std::to_string(version_));
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
                     {"checkpoint_interval", checkpoint_interval_},
                     {"file_prefix", file_prefix_},
                     {"checkpoint", nullptr}};
    if (group_) {
      // Every rank resumes its own shard of the checkpoint the rendezvous named.
      w["group"] = group_place(*rv_, 0, group_->num_members());
      if (rv_->resume_step == 0) return w;
      auto own = read_own_shard(*s_.store, ckpt_prefix_, rv_->resume_step, 0);
      if (!own) {
        logger("trainer")->warn("no checkpoint offered to trainer rank 0: {}",
                                own.err().to_string());
        return w;
      }
      w["checkpoint"] = offer_checkpoint(file_prefix_, own->first, own->second, resume_path_);
      return w;
    }
    auto c = newest_checkpoint();
    if (!c) {
      if (c.err().code != errc::not_found)
        logger("trainer")->warn("no checkpoint offered to the trainer worker: {}",
                                c.err().to_string());
      return w;
    }
    w["checkpoint"] = offer_checkpoint(file_prefix_, c->first, c->second, resume_path_);
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

  external_trainer_setup s_;
  actors::trainer_group* const group_ = s_.group;
  std::optional<group_rendezvous> rv_;  // a group's, once its rendezvous round is done
  uint64_t resume_step_ = 0;  // the checkpoint of this trainer's shape to resume (0: none)
  const std::string ckpt_prefix_, marker_key_;
  std::unique_ptr<shard_checkpointer> ckpt_;
  std::string file_prefix_, resume_path_;
  uint64_t checkpoint_interval_ = 1;  // told to the worker (checkpoint_due)
  std::unique_ptr<workers::external_trainer> worker_;
  uint64_t version_ = 0, resumed_from_ = 0, wanted_ = 0;
  uint64_t held_groups_ = 0, held_for_curve_ = 0, samples_ = 0;
  double sum_reward_ = 0, staleness_ = 0;
  uint64_t generate_us_ = 0, reward_us_ = 0;
  int64_t first_batch_ms_ = 0;
  std::optional<messages::weight_manifest> new_manifest_;
  std::vector<nlohmann::json> curve_, timings_, published_;
  // The three lists capped at 4096 entries, and how many each lost off its front.
  std::vector<nlohmann::json>* const lists_[3] = {&curve_, &timings_, &published_};
  size_t dropped_[3] = {0, 0, 0};
};

}  // namespace

result<std::unique_ptr<actors::trainer_step>> make_external_trainer_step(
    const config& cfg, external_trainer_setup setup) {
  if (cfg.get_int("trainer.group_size") > 1 && !setup.group)
    return error(errc::invalid_config,
                 "trainer.worker with trainer.group_size " +
                     std::to_string(cfg.get_int("trainer.group_size")) +
                     ": member 0's trainer step needs the formed trainer group");
  auto t = std::make_unique<external_trainer_step>(std::move(setup));
  if (auto st = t->init(cfg); !st) return st.err();
  return std::unique_ptr<actors::trainer_step>(std::move(t));
}

status serve_external_trainer_member(const config& cfg, external_trainer_setup setup,
                                     actors::trainer_group& group) {
  const uint32_t me = group.member_index(), n = group.num_members();
  if (me == 0) return error(errc::internal, "serve_external_trainer_member on member 0");
  auto log = logger("trainer");
  auto first = all_members_allgather(group, "{}", kRendezvousRoundMs);
  if (!first) return first.err();
  if (first->empty()) return error(errc::internal, "trainer group round without member 0");
  auto rv = workers::parse_rendezvous((*first)[0], "trainer group");
  if (!rv) return rv.err();
  const std::string ckpt_prefix = setup.store_prefix + "/external/ckpt";
  shard_checkpointer ckpt(setup.store, ckpt_prefix, me, n,
                          static_cast<uint64_t>(cfg.get_int("job.max_durability_lag")),
                          checkpoints_kept_every(cfg), group.abort_flag());
  workers::external_trainer_options o = worker_options(cfg);
  o.group_abort = group.abort_flag();
  o.rank = me;
  o.world_size = n;
  std::string resume_path;
  uint64_t last_version = 0;  // the newest shard this member queued
  workers::external_trainer_handlers h;
  h.publish = [me](std::string, const nlohmann::json&) -> result<nlohmann::json> {
    return error(errc::invalid_argument,
                 "publish on trainer rank " + std::to_string(me) + ": only rank 0 publishes");
  };
  // Rank k's own shard of the version rank 0 published (the SDK names it): written in the
  // background; member 0 commits the version once every shard is durable.
  h.checkpoint = [&](std::string bytes, const nlohmann::json& req) -> result<nlohmann::json> {
    auto v = req.find("version");
    if (v == req.end() || !v->is_number_unsigned() || v->get<uint64_t>() == 0)
      return error(errc::invalid_argument,
                   "checkpoint on trainer rank " + std::to_string(me) +
                       " without the version it is of (\"version\": the newest rank 0 published)");
    const uint64_t version = v->get<uint64_t>();
    if (version < last_version || version < rv->version)
      return error(errc::invalid_argument,
                   "checkpoint of version " + std::to_string(version) + " on trainer rank " +
                       std::to_string(me) + ", which checkpointed version " +
                       std::to_string(std::max(last_version, rv->version)) + " already");
    last_version = version;
    const std::string hash = policy::content_hash(bytes);
    std::vector<store::checkpoint_part> parts;
    parts.push_back({"state", std::move(bytes)});
    ckpt.submit(version, std::move(parts), nlohmann::json::object());
    return nlohmann::json{
        {"version", version}, {"content_hash", hash}, {"durable_version", ckpt.durable()}};
  };
  h.welcome = [&]() {
    nlohmann::json w{{"version", rv->version},
                     {"groups_per_iteration", setup.groups_per_iteration},
                     {"checkpoint_interval", worker_checkpoint_interval(cfg)},
                     {"file_prefix", o.file_prefix},
                     {"checkpoint", nullptr},
                     {"group", group_place(*rv, me, n)}};
    if (rv->resume_step == 0) return w;
    auto own = read_own_shard(*setup.store, ckpt_prefix, rv->resume_step, me);
    if (!own) {
      log->warn("no checkpoint offered to trainer rank {}: {}", me, own.err().to_string());
      return w;
    }
    w["checkpoint"] = offer_checkpoint(o.file_prefix, own->first, own->second, resume_path);
    return w;
  };
  auto worker = workers::external_trainer::create(o, std::move(h));
  if (!worker) return worker.err();
  log->info("trainer rank {} of {} (group incarnation {}): its worker meets rank 0 at {}:{}", me, n,
            rv->incarnation, rv->addr, rv->port);
  // Member 0's next round is its stop (its step's end); a thread waits for it while this one
  // serves the worker.
  status st = ok_status();
  {
    actors::member_stop_round stop(group);
    st = (*worker)->serve_member([&] { return stop.ended(); });
    if (st && stop.ended()) st = stop.outcome("trainer group");
    if (!st) group.report_failure(st.err().to_string());  // ends the waiter's round
  }
  (*worker)->stop(1000);
  if (!resume_path.empty()) ::unlink(resume_path.c_str());
  return st;
}

}  // namespace moerl::job
