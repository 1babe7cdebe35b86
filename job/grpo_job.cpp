#include "job/grpo_job.h"

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/percentile.h"
#include "job/checkpointed_curve.h"
#include "job/device.h"
#include "job/durable_writer.h"
#include "job/ep_policy_group.h"
#include "job/ep_trainer.h"
#include "job/external_trainer_step.h"
#include "job/group_bootstrap.h"
#include "job/internal/rollout_group.h"
#include "job/modpow_job.h"
#include "job/multi_turn.h"
#include "job/prompt_dataset.h"
#include "job/shard_checkpointer.h"
#include "job/sharded_publication.h"
#include "job/weights_feed.h"
#include "job/whole_checkpoint.h"
#include "policy/adam.h"
#include "policy/grpo.h"
#include "policy/model.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/tasks/guess.h"
#include "policy/trainer.h"
#include "store/checkpoint.h"
#include "store/digest.h"
#include "store/object_store.h"
#include "weights/cache_client.h"
#include "weights/cache_directory.h"
#include "weights/fabric_push.h"

namespace moerl::job {
namespace {

using policy::token_id;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: decorrelates seeds built from ids
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// What every part of the job shares, built once per node from its config.
struct job_setup {
  config cfg;
  std::unique_ptr<policy::task> task;  // a single-turn task; null for a multi-turn one
  int guess_turns = 0;                 // task.name=guess: the turn budget (multi-turn)
  policy::model_config model;
  policy::grpo_config grpo;
  policy::adam_config adam;
  float temperature = 1.0f;
  uint64_t seed = 1;
  int rollout_ep_ranks = 1;       // job.rollout_ep_ranks
  int rollout_members = 1;        // rollout.group_size: rollout node processes per model instance
  int generate_batch_groups = 1;  // rollout.generate_batch_groups
  int trainer_ep_ranks = 1;       // job.trainer_ep_ranks
  // job.device=cuda: the rollout worker and the trainer always run an expert-parallel group
  // (job/ep_policy_group.h: one of one rank holds every expert), whose ranks hold device
  // policies; job.device=cpu keeps the single host policy for one rank.
  bool on_device = false;
  std::string prefix;
  std::shared_ptr<store::object_store> store;
  // The weight plane (weights/): set by the runtime before any work is made; null, or
  // weights.from_cache false, means every version goes through the store.
  std::shared_ptr<weights::cache_directory> caches;
  bool from_cache = true;
  uint64_t chunk_bytes = 1 << 20;
  int cache_timeout_ms = 2000;
  bool same_host_shm = false;  // weights.same_host_shm
  // weights.shard_push fabric: the trainer's pushes go over the fabric first (null: zmq).
  std::shared_ptr<weights::fabric_pusher> fabric_push;
  // The trainer's connections to the caches, kept between its pushes (push_to_cache).
  std::mutex push_mu;
  std::unique_ptr<weights::cache_connections> push_connections;
  std::mutex feed_mu;
  std::unique_ptr<weights_feed> feed;  // the rollout node's, made with its first rollout work

  bool use_caches() const { return caches && from_cache; }
  // A trainer group of `num_members` publishes each version as shards, one per rank, each
  // pushed by the member holding it (job/sharded_publication.h). With weights.fanout the first
  // reader assembles them and passes the version on whole (weights/FANOUT.md).
  bool shard_versions(uint32_t num_members) const { return num_members > 1 && use_caches(); }

  // How many versions' store copies are kept (version_store_copy prunes the older ones).
  uint64_t store_copies_kept() const {
    return static_cast<uint64_t>(cfg.get_int("buffer.max_staleness")) + 3;
  }

  // Version v's durable copy, checked against its hash. With the caches in front, the trainer
  // writes the store copy after announcing the version: a reader that missed every cache
  // waits a little for it rather than fail the unit. Not for a version that many newer ones
  // have overtaken: its copy was pruned and never comes back, and waiting for it stalled an
  // external worker's lease 10 s (python/WORKERS.md, "Weights for Python rollouts").
  result<std::string> read_store_version(uint64_t version) const {
    const std::string key = weights_key(prefix, version);
    for (int attempt = 0;; ++attempt) {
      auto bytes = store->get(key);
      auto hash = bytes ? store->get(key + ".hash") : result<std::string>(bytes.err());
      if (bytes && hash) {
        if (policy::content_hash(*bytes) != *hash)
          return error{errc::malformed_message, "weights of policy version " +
                                                    std::to_string(version) +
                                                    " do not match their content hash"};
        return std::move(*bytes);
      }
      const error e = bytes ? hash.err() : bytes.err();
      const bool pruned = caches && version + store_copies_kept() <= caches->announced();
      if (e.code != errc::not_found || !use_caches() || pruned || attempt >= 50)
        return error{e.code,
                     "weights of policy version " + std::to_string(version) + ": " + e.message};
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The bytes of version v for a rollout, through the node's feed: caches first, or (without
  // them) the store; the feed counts what it read either way, for the report.
  result<std::shared_ptr<const std::string>> version_bytes(uint64_t version) {
    weights_feed* f = nullptr;
    {
      std::lock_guard<std::mutex> g(feed_mu);
      if (!feed)
        feed = std::make_unique<weights_feed>(
            use_caches() ? caches : nullptr, cache_timeout_ms, same_host_shm,
            [this](uint64_t v) { return read_store_version(v); }, shard_assembler());
      f = feed.get();
    }
    return f->get(version);
  }
  // Assembles a sharded version (job/sharded_publication.h) in the full layout, made with the
  // first sharded version read.
  weights::shard_assembler shard_assembler() {
    auto full = std::make_shared<std::optional<policy::param_layout>>();
    auto mu = std::make_shared<std::mutex>();
    return [this, full, mu](const std::vector<weights::fetched_shard>& shards,
                            const std::string& version_hash) -> result<std::string> {
      {
        std::lock_guard<std::mutex> g(*mu);
        if (!*full) {
          auto local = policy::make_local_expert_exchange();
          auto whole = policy::moe_policy::create(model, *local);
          if (!whole) return whole.err();
          *full = (*whole)->layout();
        }
      }
      return assemble_shards(**full, shards, version_hash);
    };
  }
  // task.dataset's prompts (job/prompt_dataset.h); null: generated, or not read on this role.
  std::shared_ptr<const prompt_dataset> dataset;

  static result<std::shared_ptr<job_setup>> create(const config& cfg, actors::node_role role) {
    auto s = std::make_shared<job_setup>();
    s->cfg = cfg;
    if (cfg.get_string("task.name") == "guess") {
      s->guess_turns = static_cast<int>(cfg.get_int("task.difficulty"));
      if (s->guess_turns < 1 || s->guess_turns > policy::guess_max_turns)
        return error{errc::invalid_config, "task.difficulty " + std::to_string(s->guess_turns) +
                                               " is outside 1..9 (turns) for task 'guess'"};
    } else {
      auto t = policy::make_task(cfg);
      if (!t) return t.err();
      s->task = std::move(*t);
    }
    auto m = policy::model_config::from_config(cfg);
    if (!m) return m.err();
    s->model = *m;
    auto g = policy::grpo_config::from_config(cfg);
    if (!g) return g.err();
    s->grpo = *g;
    s->grpo.group_size = static_cast<int>(cfg.get_int("ledger.group_size"));
    auto a = policy::adam_config::from_config(cfg);
    if (!a) return a.err();
    s->adam = *a;
    s->temperature = static_cast<float>(cfg.get_double("policy.temperature"));
    s->seed = static_cast<uint64_t>(cfg.get_int("grpo.seed"));
    s->prefix = cfg.get_string("job.store_prefix");
    s->rollout_ep_ranks = static_cast<int>(cfg.get_int("job.rollout_ep_ranks"));
    s->trainer_ep_ranks = static_cast<int>(cfg.get_int("job.trainer_ep_ranks"));
    s->on_device = cfg.get_string("job.device") == "cuda";
    s->rollout_members = static_cast<int>(cfg.get_int("rollout.group_size"));
    s->generate_batch_groups = static_cast<int>(cfg.get_int("rollout.generate_batch_groups"));
    s->from_cache = cfg.get_bool("weights.from_cache");
    s->chunk_bytes = static_cast<uint64_t>(cfg.get_int("weights.chunk_bytes"));
    s->cache_timeout_ms = static_cast<int>(cfg.get_int("weights.request_timeout_ms"));
    s->same_host_shm = cfg.get_bool("weights.same_host_shm");
    auto pusher = weights::fabric_pusher_from_config(cfg);
    if (!pusher) return pusher.err();
    s->fabric_push = std::move(*pusher);
    for (auto [key, n] :
         {std::pair<const char*, int>{"job.rollout_ep_ranks", s->rollout_ep_ranks},
          std::pair<const char*, int>{"job.trainer_ep_ranks", s->trainer_ep_ranks}}) {
      if (n < 1)
        return error{errc::invalid_config,
                     std::string(key) + " must be >= 1, got " + std::to_string(n)};
      if (s->model.num_experts % n != 0)
        return error{errc::invalid_config, std::string(key) + " " + std::to_string(n) +
                                               " does not divide policy.num_experts " +
                                               std::to_string(s->model.num_experts)};
    }
    if (s->rollout_ep_ranks > s->grpo.group_size)
      return error{errc::invalid_config,
                   "job.rollout_ep_ranks " + std::to_string(s->rollout_ep_ranks) +
                       " exceeds ledger.group_size " + std::to_string(s->grpo.group_size) +
                       " (every rank generates at least one row of a group)"};
    if (s->on_device && s->guess_turns > 0)
      return error{errc::invalid_config,
                   "job.device=cuda: task 'guess' (multi-turn) runs its episodes on the host "
                   "policy; use job.device=cpu for it"};
    if (s->on_device && s->grpo.kl_coef > 0)
      return error{errc::invalid_config,
                   "job.device=cuda does not support grpo.kl_coef > 0 in moerl up and node roles "
                   "yet (the trainer group's frozen reference would need its own device shares); "
                   "use grpo.kl_coef=0, moerl learn, or job.device=cpu"};
    if (s->guess_turns > 0 && s->rollout_ep_ranks > 1)
      return error{errc::invalid_config,
                   "task 'guess' (multi-turn) runs on one rollout rank: job.rollout_ep_ranks must "
                   "be 1, got " +
                       std::to_string(s->rollout_ep_ranks)};
    if (s->rollout_members > 1) {
      const int total = s->rollout_members * s->rollout_ep_ranks;
      if (s->guess_turns > 0)
        return error{errc::invalid_config,
                     "task 'guess' (multi-turn) runs on one rollout rank: rollout.group_size must "
                     "be 1, got " +
                         std::to_string(s->rollout_members)};
      if (s->model.num_experts % total != 0 || total > s->grpo.group_size)
        return error{errc::invalid_config,
                     "a rollout group of rollout.group_size " + std::to_string(s->rollout_members) +
                         " x job.rollout_ep_ranks " + std::to_string(s->rollout_ep_ranks) + " = " +
                         std::to_string(total) + " ranks must divide policy.num_experts " +
                         std::to_string(s->model.num_experts) +
                         " and be at most ledger.group_size " + std::to_string(s->grpo.group_size)};
    }
    if (const int64_t lag = cfg.get_int("job.max_durability_lag"),
        interval =
            static_cast<int64_t>(checkpoint_interval(cfg.get_int("job.checkpoint_interval"), lag));
        interval > std::max<int64_t>(lag, 1))
      return error{
          errc::invalid_config,
          "job.checkpoint_interval " + std::to_string(interval) +
              " exceeds job.max_durability_lag " + std::to_string(lag) +
              (lag == 0 ? " (lag 0 commits every version before announcing it: use 1)" : "") +
              ": the trainer would wait at the lag for a version never checkpointed"};
    if (s->model.max_seq_len < s->prompt_length() + s->max_completion_length())
      return error{errc::invalid_config, "policy.max_seq_len " +
                                             std::to_string(s->model.max_seq_len) +
                                             " is shorter than the task's prompt + completion"};
    auto st = store::open_store(cfg.get_string("store.url"), cfg);
    if (!st) return st.err();
    s->store = std::shared_ptr<store::object_store>(std::move(*st));
    // Read where prompts are made: rollout nodes (single-turn prompts) and env nodes (a
    // multi-turn episode's prompt and hidden state come from the env node's reset).
    if (role == actors::node_role::env ||
        (role == actors::node_role::rollout && !s->multi_turn())) {
      auto d = open_task_dataset(cfg, s->task.get());
      if (!d) return d.err();
      s->dataset = std::move(*d);
    }
    return s;
  }

  bool multi_turn() const { return guess_turns > 0; }
  std::string task_name() const { return multi_turn() ? "guess" : task->name(); }
  int prompt_length() const {
    return multi_turn() ? int(policy::guess_prompt(guess_turns).size()) : task->prompt_length();
  }
  // Multi-turn: every guess and every reply but the last.
  int max_completion_length() const {
    return multi_turn() ? 2 * guess_turns - 1 : task->max_completion_length();
  }
};

// ---- rollout ------------------------------------------------------------------------------

// What a rollout group's members (job/internal/rollout_group.h) need: the model, the row count and
// the node's weight feed. `s` outlives the group (the job holds it).
rollout_group_setup group_setup(job_setup& s) {
  rollout_group_setup g;
  g.cfg = s.cfg;
  g.model = s.model;
  g.ranks_per_member = s.rollout_ep_ranks;
  g.rows_per_group = s.grpo.group_size;
  g.max_prompts_per_generate = s.generate_batch_groups;
  g.read_version = [ps = &s](uint64_t v) { return ps->version_bytes(v); };
  return g;
}

class policy_rollout final : public actors::rollout_work {
 public:
  explicit policy_rollout(std::shared_ptr<job_setup> setup)
      : s_(std::move(setup)), rng_(std::random_device{}()) {}

  // `group`: this node leads a rollout group across nodes (rollout.group_size > 1); the
  // model instance is sharded over every member's ranks (job/internal/rollout_group.h).
  status init(actors::trainer_group* group = nullptr) {
    if (group) {
      auto l = rollout_group_leader::create(group_setup(*s_), *group);
      if (!l) return l.err();
      leader_ = std::move(*l);
      logger("rollout")->info(
          "leading a rollout group of {} member processes x {} ranks ({} experts each)",
          group->num_members(), group->ranks_per_member(),
          s_->model.num_experts / int(group->num_members() * group->ranks_per_member()));
      return {};
    }
    if (s_->rollout_ep_ranks > 1 || s_->on_device) return start_ep_group();
    exchange_ = policy::make_local_expert_exchange();
    auto p = policy::moe_policy::create(s_->model, *exchange_);
    if (!p) return p.err();
    policy_ = std::move(*p);
    return {};
  }

  std::string name() const override {
    return leader_                                     ? "grpo-rollout-group"
           : s_->rollout_ep_ranks > 1 || s_->on_device ? "grpo-rollout-ep"
                                                       : "grpo-rollout";
  }

  int64_t group_drain_by_unix_ms() const override {
    return leader_ ? leader_->drain_by_unix_ms() : 0;
  }
  status idle() override { return leader_ ? leader_->ping() : status{}; }
  bool usable() const override { return !leader_ || !leader_->broken(); }

  void use_environments(env::env_link* link) override { env_ = link; }
  void begin_group(uint64_t group_id) override { group_id_ = group_id; }

  // Every group of a lease batch in as few generations as their prompt lengths allow (at
  // most rollout.generate_batch_groups groups each): one pass of decode steps, and in a
  // rollout group one command round, for all of them instead of one per group.
  status prepare(const std::vector<actors::prompt_group>& groups, uint64_t version) override {
    prepared_.clear();
    if (s_->multi_turn() || groups.size() < 2) return {};
    if (auto st = use_version(version); !st) return st;
    std::map<size_t, std::vector<const actors::prompt_group*>> by_length;
    for (const auto& g : groups) by_length[g.prompt.size()].push_back(&g);
    const auto batch = static_cast<size_t>(std::max(s_->generate_batch_groups, 1));
    const auto G = static_cast<size_t>(s_->grpo.group_size);
    for (const auto& [length, same] : by_length) {
      for (size_t first = 0; first < same.size(); first += batch) {
        const size_t n = std::min(batch, same.size() - first);
        std::vector<std::vector<token_id>> prompts;
        for (size_t k = 0; k < n; ++k)
          prompts.emplace_back(same[first + k]->prompt.begin(), same[first + k]->prompt.end());
        auto gen = generate_groups(prompts, version);
        if (!gen) return gen.err();
        for (size_t k = 0; k < n; ++k) {
          prepared_group& p = prepared_[same[first + k]->group_id];
          p.version = version;
          p.prompt = same[first + k]->prompt;
          for (size_t r = k * G; r < (k + 1) * G; ++r) {
            p.rows.completions.push_back(std::move(gen->completions[r]));
            p.rows.logprobs.push_back(std::move(gen->logprobs[r]));
          }
        }
      }
    }
    return {};
  }

  // Generates the whole group on its first sample (one batched, KV-cached generation of G
  // rows; or the rows prepare() made) and hands out its rows one by one.
  result<actors::generated_sample> generate(const std::vector<uint32_t>& prompt, uint32_t group,
                                            uint32_t index_in_group,
                                            uint64_t policy_version) override {
    if (auto st = use_version(policy_version); !st) return st.err();
    if (s_->multi_turn()) return episode(group, index_in_group, policy_version);
    if (prompt != cached_prompt_ || policy_version != cached_version_ || group != cached_group_ ||
        index_in_group >= cached_.completions.size() || index_in_group == 0) {
      auto g = prepared_rows(prompt, policy_version);
      if (!g)
        g = generate_group(std::vector<token_id>(prompt.begin(), prompt.end()), policy_version);
      if (!g) return g.err();
      cached_ = std::move(*g);
      cached_prompt_ = prompt;
      cached_version_ = policy_version;
      cached_group_ = group;
    }
    if (index_in_group >= cached_.completions.size())
      return error{errc::invalid_argument, "index_in_group " + std::to_string(index_in_group) +
                                               " is not below the group size " +
                                               std::to_string(cached_.completions.size())};
    actors::generated_sample out;
    out.group = group;
    out.index_in_group = index_in_group;
    out.prompt = prompt;
    out.tokens.assign(cached_.completions[index_in_group].begin(),
                      cached_.completions[index_in_group].end());
    out.logprobs = cached_.logprobs[index_in_group];
    return out;
  }

 private:
  // A multi-turn group: its G episodes run together on the env nodes at the group's first
  // sample; the rows are handed out one by one.
  result<actors::generated_sample> episode(uint32_t group, uint32_t index_in_group,
                                           uint64_t policy_version) {
    if (!env_) return error{errc::internal, "multi-turn work without an env link"};
    if (index_in_group == 0 || group != cached_group_ || policy_version != cached_version_ ||
        group_id_ != cached_group_id_ || index_in_group >= episodes_.rows.size()) {
      episode_options o;
      o.task = s_->task_name();
      o.episode_seed = mix(s_->seed ^ mix(group_id_ ^ 0x6775657373ull));  // "guess"
      o.group_size = s_->grpo.group_size;
      o.max_turns = s_->guess_turns;
      o.temperature = s_->temperature;
      auto g = run_episodes(*policy_, *env_, o, rng_);
      if (!g) return g.err();
      episodes_ = std::move(*g);
      cached_group_ = group;
      cached_version_ = policy_version;
      cached_group_id_ = group_id_;
    }
    if (index_in_group >= episodes_.rows.size())
      return error{errc::invalid_argument, "index_in_group " + std::to_string(index_in_group) +
                                               " is not below the group size"};
    actors::generated_sample out = episodes_.rows[index_in_group];
    out.group = group;
    return out;
  }

  // The expert-parallel group: job.rollout_ep_ranks rank threads, each generating its
  // share of a group's rows with only its experts (job/ep_policy_group.h).
  status start_ep_group() {
    ep_group_shape shape;
    shape.num_ranks = s_->rollout_ep_ranks;
    shape.max_decode_rows =
        rows_of_rank(int64_t{s_->grpo.group_size} * std::max(s_->generate_batch_groups, 1), 0,
                     shape.num_ranks)
            .count;
    auto g = ep_policy_group::create(s_->cfg, s_->model, shape);
    if (!g) return g.err();
    ep_ = std::move(*g);
    loaded_version_ = 0;
    logger("rollout")->info("expert-parallel rollout group of {} ranks ready ({} experts each)",
                            shape.num_ranks, s_->model.num_experts / shape.num_ranks);
    return {};
  }

  // The rows prepare() made for the group begun last (begin_group), taken out; nullopt-like
  // error when there are none for this prompt and version.
  result<policy::generation> prepared_rows(const std::vector<uint32_t>& prompt, uint64_t version) {
    auto it = prepared_.find(group_id_);
    if (it == prepared_.end() || it->second.version != version || it->second.prompt != prompt)
      return error{errc::not_found, "group not prepared"};
    policy::generation out = std::move(it->second.rows);
    prepared_.erase(it);
    return out;
  }

  result<policy::generation> generate_group(const std::vector<token_id>& prompt, uint64_t version) {
    return generate_groups({prompt}, version);
  }

  // grpo.group_size rows from each prompt (one length), prompt-major, on whatever holds this
  // worker's model: a rollout group across nodes, an EP group of rank threads, one policy.
  result<policy::generation> generate_groups(const std::vector<std::vector<token_id>>& prompts,
                                             uint64_t version) {
    const int max_new = s_->max_completion_length();
    const int G = s_->grpo.group_size;
    if (leader_)  // every member loads `version` itself (its own weight feed)
      return leader_->generate(prompts, G, max_new, s_->temperature, rng_(), version);
    std::vector<std::vector<token_id>> rows;
    for (const auto& p : prompts) rows.insert(rows.end(), static_cast<size_t>(G), p);
    if (!ep_) return policy_->generate(rows, max_new, s_->temperature, rng_);
    return ep_->generate(rows, max_new, s_->temperature, rng_());
  }

  // Loads the weights of `version` unless they are loaded already. Version 0 is the
  // initialisation from policy.seed, which every replica computes itself.
  status use_version(uint64_t version) {
    if (leader_) return {};  // loaded with each command, on every member (generate_group)
    // A group broken by an earlier failure (a rank timed out mid-step) is rebuilt from
    // scratch; it starts at version 0 and loads `version` below.
    if (ep_ && ep_->broken()) {
      ep_.reset();
      logger("rollout")->warn(
          "expert-parallel rollout group broken by an earlier failure: rebuilding it");
      if (auto st = start_ep_group(); !st) return st;
    }
    if (version == loaded_version_) return {};
    if (version == 0 && ep_) {
      if (auto st = ep_->reset_to_init(); !st) return st;
      loaded_version_ = 0;
      return {};
    }
    if (version == 0) {
      auto p = policy::moe_policy::create(s_->model, *exchange_);
      if (!p) return p.err();
      policy_ = std::move(*p);
      loaded_version_ = 0;
      return {};
    }
    auto bytes = s_->version_bytes(version);
    if (!bytes) return bytes.err();
    if (auto st = ep_ ? ep_->load(**bytes) : policy_->load(**bytes); !st) return st;
    loaded_version_ = version;
    logger("rollout")->debug("loaded policy version {}", version);
    return {};
  }

  std::shared_ptr<job_setup> s_;
  std::unique_ptr<policy::expert_exchange> exchange_;
  std::unique_ptr<policy::moe_policy> policy_;
  std::unique_ptr<ep_policy_group> ep_;  // instead of policy_ when job.rollout_ep_ranks > 1
  std::unique_ptr<rollout_group_leader> leader_;  // instead of both: a rollout group's leader
  uint64_t loaded_version_ = 0;
  std::mt19937_64 rng_;
  struct prepared_group {
    uint64_t version = 0;
    std::vector<uint32_t> prompt;
    policy::generation rows;
  };
  std::map<uint64_t, prepared_group> prepared_;  // by group id: what prepare() generated
  policy::generation cached_;
  std::vector<uint32_t> cached_prompt_;
  uint64_t cached_version_ = ~0ull;
  uint32_t cached_group_ = ~0u;
  env::env_link* env_ = nullptr;  // owned by the rollout worker
  uint64_t group_id_ = 0;         // of the group being generated (begin_group)
  uint64_t cached_group_id_ = ~0ull;
  episode_group episodes_;
};

// ---- reward -------------------------------------------------------------------------------

class policy_reward final : public actors::reward_function {
 public:
  policy_reward(std::shared_ptr<job_setup> s, std::unique_ptr<policy::reward_model> rm)
      : s_(std::move(s)), rm_(std::move(rm)) {}
  result<float> score(const std::vector<uint32_t>& prompt,
                      const std::vector<uint32_t>& tokens) const override {
    auto r = rm_->score(std::vector<token_id>(prompt.begin(), prompt.end()),
                        std::vector<token_id>(tokens.begin(), tokens.end()));
    if (!r) return r.err();
    return static_cast<float>(*r);
  }

 private:
  std::shared_ptr<job_setup> s_;  // the reward model refers to its task
  std::unique_ptr<policy::reward_model> rm_;
};

// A multi-turn sample is scored by its environment on the env node; one that arrives
// unscored cannot be scored here (the prompt and trajectory alone do not fix the reward).
class environment_reward final : public actors::reward_function {
 public:
  explicit environment_reward(std::string task) : task_(std::move(task)) {}
  result<float> score(const std::vector<uint32_t>&, const std::vector<uint32_t>&) const override {
    return error{errc::invalid_argument,
                 "task '" + task_ +
                     "' is multi-turn: its reward comes from the environment, "
                     "and this sample carries none"};
  }

 private:
  std::string task_;
};

// ---- trainer ------------------------------------------------------------------------------

// The EP trainer of job.trainer_ep_ranks rank threads, or this member's part of the trainer
// group across nodes (group.num_members() x job.trainer_ep_ranks ranks).
result<std::unique_ptr<ep_trainer>> make_ep_trainer(const std::shared_ptr<job_setup>& s,
                                                    actors::trainer_group* group) {
  // Batches arrive a work unit at a time, so a step may hold up to one unit more than an
  // iteration; twice an iteration's samples bounds it with room to spare.
  const int64_t max_samples = 2 * s->cfg.get_int("actors.units_per_iteration") *
                              s->cfg.get_int("actors.groups_per_unit") * s->grpo.group_size;
  if (!group)
    return ep_trainer::create(s->cfg, s->model, s->grpo, s->adam, s->temperature,
                              s->trainer_ep_ranks, max_samples);
  const auto span = trainer_span_of(*group);
  return ep_trainer::create(s->cfg, s->model, s->grpo, s->adam, s->temperature,
                            span.num_members * span.ranks_per_member, max_samples, &span);
}

// Pushes version v to the least-loaded checkpoint cache: the endpoint of the one that holds
// it, or why none does (the native step and the external trainer's publish alike). `sha256`:
// of bytes, when the caller has it already ("": computed here).
result<std::string> push_to_cache(job_setup& s, uint64_t v, const std::string& bytes,
                                  const weights::shard_tag& tag = {},
                                  const std::string& sha256 = "") {
  s.caches->wait_refreshed(std::chrono::milliseconds(3000));
  const auto caches = s.caches->caches();
  if (caches.empty()) return error{errc::not_found, "no cache is alive"};
  std::lock_guard<std::mutex> g(s.push_mu);
  if (!s.push_connections)
    s.push_connections =
        std::make_unique<weights::cache_connections>(s.caches->zmq(), s.cache_timeout_ms);
  return weights::push_to_a_cache(*s.push_connections, caches, v, bytes,
                                  sha256.empty() ? store::sha256_hex(bytes) : sha256, s.chunk_bytes,
                                  tag, s.fabric_push.get());
}

// This process's shards of version v (a trainer group member's ranks), each pushed to a
// cache: one report per shard for member 0 (job/sharded_publication.h).
result<std::vector<shard_report>> push_own_shards(job_setup& s, const ep_trainer& t, uint64_t v,
                                                  const std::string& version_hash) {
  auto shares = t.own_shares();
  if (!shares) return shares.err();
  auto push = [&s](uint64_t version, const std::string& bytes, const std::string& sha256,
                   const weights::shard_tag& tag) {
    return push_to_cache(s, version, bytes, tag, sha256);
  };
  return push_shards(push, v, t.full_layout(), *shares, static_cast<uint32_t>(t.num_ranks()),
                     version_hash);
}

// Writes version v's store copy (weights, then the hash object) and removes the version
// that no admissible sample can still be generated from (a lease names at most the version
// current when it was granted). Self-contained: it may run after the trainer is gone.
std::function<status()> version_store_copy(std::shared_ptr<job_setup> s, uint64_t v,
                                           std::shared_ptr<const std::string> bytes,
                                           std::string hash) {
  return [s = std::move(s), v, bytes = std::move(bytes), hash = std::move(hash)]() -> status {
    // Unsynced: a copy for readers while the run lives, not a durable state (the checkpoints
    // are). A reader checks it against the version's content hash, and a restored trainer
    // writes the copy of the version it announces again; a copy torn by a power cut fails
    // the hash check (read_store_version) and is never used.
    if (auto st = s->store->put_unsynced(weights_key(s->prefix, v), *bytes); !st) return st;
    if (auto st = s->store->put_unsynced(weights_key(s->prefix, v) + ".hash", hash); !st) return st;
    const uint64_t keep = s->store_copies_kept();
    // Unsynced: a version a crash brings back is content-hashed and no longer asked for.
    if (v > keep)
      (void)s->store->remove_unsynced(
          {weights_key(s->prefix, v - keep), weights_key(s->prefix, v - keep) + ".hash"});
    return {};
  };
}

// trainer.worker: the learning step is a user's process (job/external_trainer_step.h); its
// versions reach the rollouts as the native step's do: a cache first, the store copy behind.
external_trainer_setup external_setup(std::shared_ptr<job_setup> s) {
  external_trainer_setup e;
  auto writer = std::make_shared<durable_writer>(4);
  e.publish = [s, writer](uint64_t v,
                          std::shared_ptr<const std::string> bytes) -> result<std::string> {
    auto copy = version_store_copy(s, v, bytes, policy::content_hash(*bytes));
    if (s->use_caches()) {
      auto ep = push_to_cache(*s, v, *bytes);
      if (ep) {
        writer->submit("weights of policy version " + std::to_string(v), copy);
        return std::string("cache");
      }
      logger("trainer")->warn(
          "policy version {}: no checkpoint cache took it ({}): publishing "
          "through the store",
          v, ep.err().message);
    }
    if (auto st = copy(); !st) return st.err();
    return std::string("store");
  };
  e.store = s->store;
  e.store_prefix = s->prefix;
  const bool mt = s->multi_turn();
  e.facts = {
      {"kind", "grpo"},
      {"task", s->task_name()},
      {"difficulty", mt ? s->guess_turns : s->task->difficulty()},
      {"reward_random",
       mt ? policy::guess_reward_random(s->guess_turns) : s->task->reward_random()},
      {"reward_max", mt ? policy::guess_closed_loop_bound(s->guess_turns) : s->task->reward_max()}};
  e.groups_per_iteration = static_cast<uint64_t>(s->cfg.get_int("actors.units_per_iteration") *
                                                 s->cfg.get_int("actors.groups_per_unit"));
  return e;
}

// `group`: the trainer group this node is member 0 of (a Python trainer group), or null.
result<std::unique_ptr<actors::trainer_step>> make_external_trainer(std::shared_ptr<job_setup> s,
                                                                    actors::trainer_group* group) {
  external_trainer_setup e = external_setup(s);
  e.group = group;
  return make_external_trainer_step(s->cfg, std::move(e));
}

class grpo_trainer final : public actors::trainer_step {
 public:
  explicit grpo_trainer(std::shared_ptr<job_setup> s) : s_(std::move(s)) {}

  // `group`: the trainer group across nodes this member drives (member 0), or null.
  status init(actors::trainer_group* group) {
    const auto& cfg = s_->cfg;
    groups_per_step_ = static_cast<size_t>(cfg.get_int("actors.units_per_iteration") *
                                           cfg.get_int("actors.groups_per_unit"));
    keep_every_ = static_cast<uint64_t>(cfg.get_int("job.checkpoint_every"));
    interval_ = checkpoint_interval(cfg.get_int("job.checkpoint_interval"),
                                    cfg.get_int("job.max_durability_lag"));
    // One checkpoint shard per member process (a single trainer is a group of one).
    sharded_ = group && s_->shard_versions(group->num_members());
    ckpt_ = std::make_unique<shard_checkpointer>(
        s_->store, checkpoint_prefix(s_->prefix), 0, group ? group->num_members() : 1,
        static_cast<uint64_t>(cfg.get_int("job.max_durability_lag")), keep_every_,
        group ? group->abort_flag() : nullptr);
    if (s_->trainer_ep_ranks > 1 || group || s_->on_device) {
      auto t = make_ep_trainer(s_, group);
      if (!t) return t.err();
      ep_ = std::move(*t);
      return restore();
    }
    exchange_ = policy::make_local_expert_exchange();
    auto p = policy::moe_policy::create(s_->model, *exchange_);
    if (!p) return p.err();
    policy_ = std::move(*p);
    opt_ = std::make_unique<policy::adam>(s_->adam, policy_->layout().num_floats());
    if (s_->grpo.kl_coef > 0) {
      ref_exchange_ = policy::make_local_expert_exchange();
      auto r = policy::moe_policy::create(s_->model, *ref_exchange_);
      if (!r) return r.err();
      ref_ = std::move(*r);
    }
    return restore();
  }

  // Where every trainer step starts, a single trainer node's or a trainer group's: the newest
  // committed checkpoint of this run (a recreated trainer node, a re-formed group: weights
  // plus optimiser state at most job.max_durability_lag versions behind the newest announced),
  // else job.resume_from's (an earlier run), else fresh weights (RUNTIME.md, "Groups across
  // nodes"; README, job.checkpoint_every; job/README.md, "Checkpoints").
  status restore() {
    if (keep_every_ > 0) {
      auto have = store::latest_committed(*s_->store, checkpoint_prefix(s_->prefix));
      if (have) return resume_from(s_->prefix);
      if (have.err().code != errc::not_found) return have.err();
    }
    const std::string resume = s_->cfg.get_string("job.resume_from");
    if (!resume.empty()) return resume_from(resume);
    return {};
  }

  uint64_t version() const override { return version_; }
  uint64_t num_held_groups() const override { return pending_groups_; }
  uint64_t num_groups_wanted() const override {
    return groups_per_step_ > pending_groups_ ? groups_per_step_ - pending_groups_ : 1;
  }

  void drop_held() override {
    generate_us_ = reward_us_ = env_us_ = env_steps_ = 0;
    pending_.clear();
    pending_groups_ = 0;
    first_batch_.reset();
  }

  ~grpo_trainer() override {
    // Queued checkpoint shards are finished before the step's state goes (they own copies).
    ckpt_.reset();
  }

  result<actors::train_result> train(const std::vector<messages::sample>& batch) override {
    actors::train_result out;
    const auto t_recv = std::chrono::steady_clock::now();
    std::map<uint64_t, size_t> groups_in_batch;
    for (const auto& m : batch) {
      if (m.logprobs.size() != m.tokens.size() || !m.rewarded) {
        ++out.bad;
        continue;
      }
      policy::sample s;
      s.prompt.assign(m.prompt_tokens.begin(), m.prompt_tokens.end());
      s.completion.assign(m.tokens.begin(), m.tokens.end());
      s.behaviour_logprobs = m.logprobs;
      s.reward = m.reward;
      s.group = static_cast<int64_t>(m.group_id);
      s.policy_version = m.policy_version;
      s.from_env.assign(m.from_env.begin(), m.from_env.end());
      groups_in_batch[m.group_id]++;
      pending_.push_back(std::move(s));
      generate_us_ += m.generate_us;
      reward_us_ += m.reward_us;
      env_us_ += m.env_us;
      env_steps_ += m.env_steps;
      if (m.env_steps > 0) {
        ++num_episodes_;
        num_env_steps_total_ += m.env_steps;
        episode_step_ms_.push_back(double(m.env_us) * 1e-3 / m.env_steps);
      }
    }
    out.groups = groups_in_batch.size();
    pending_groups_ += groups_in_batch.size();
    if (!first_batch_) first_batch_ = t_recv;
    // An empty batch is the runtime's flush: no data came for a while, so step on what is
    // held rather than leave consumed groups untrained (the last, short iteration).
    if (pending_groups_ == 0 || (pending_groups_ < groups_per_step_ && !batch.empty())) return out;

    // One policy iteration's worth of groups: one GRPO step.
    const double t_wait = std::chrono::duration<double>(t_recv - *first_batch_).count();
    auto t0 = std::chrono::steady_clock::now();
    const auto adv = policy::group_advantages(pending_);
    double mean_reward = 0, staleness = 0;
    for (const auto& s : pending_) {
      mean_reward += s.reward;
      staleness += double(version_ - std::min(version_, s.policy_version));
    }
    mean_reward /= double(pending_.size());
    staleness /= double(pending_.size());
    policy::update_stats us;
    double grad_norm = 0;
    // The version's bytes and content hash; a trainer group's member 0 makes them, and pushes
    // its own shards, inside the step before its answer round (ep_trainer::step's
    // before_answers), while the other members push theirs: one push time on the step's
    // path instead of two in a row.
    version_bytes made;
    if (ep_) {
      auto r = ep_->step(pending_, adv, version_ + 1,
                         [&]() -> status { return make_version(version_ + 1, made); });
      if (!r) return r.err();
      us = r->update;
      grad_norm = r->grad_norm;
    }
    for (int e = 0; !ep_ && e < s_->grpo.epochs; ++e) {
      auto u = policy::grpo_gradient(*policy_, pending_, adv, s_->grpo, s_->temperature, ref_.get(),
                                     &grads_);
      if (!u) return u.err();
      us = *u;
      auto norm = opt_->step(policy_->params(), grads_);
      if (!norm) return norm.err();
      grad_norm = *norm;
    }
    if (!made.bytes)
      if (auto st = make_version(version_ + 1, made); !st) return st.err();
    // make_version's time is the publication's (t_weights), not the step's.
    const double t_train = seconds_since(t0) - made.seconds;
    ++version_;

    t0 = std::chrono::steady_clock::now();
    const auto bytes_ptr = made.bytes;
    const std::string& bytes = *bytes_ptr;
    const std::string& hash = made.hash;
    // The version is announced (when train() returns) once a checkpoint cache holds it; its
    // store copy is then written in the background, by a single trainer and a trainer group's
    // rank 0 alike (a recreated trainer or a re-formed group rewrites the copy of the version
    // it restores). Without a cache the store copy comes first: a rollout that hears of
    // version v always finds it complete somewhere. The checkpoint is written behind the
    // announcement too, at most job.max_durability_lag versions behind (below; restore()
    // announces the restored state past every version that may have been announced).
    std::vector<messages::weight_part> shard_parts;  // a sharded version's manifest parts
    const bool in_cache =
        sharded_ ? publish_shards(bytes.size(), made, &shard_parts) : publish_to_cache(bytes);
    auto store_copy = store_copy_of(version_, bytes_ptr, hash);
    if (in_cache)
      writer_->submit("weights of policy version " + std::to_string(version_), store_copy);
    else if (auto st = store_copy(); !st)
      return st.err();
    if (!in_cache) note_published(bytes.size(), seconds_since(t0), "store");
    const double t_weights = made.seconds + seconds_since(t0);

    curve_.push_back({{"iteration", version_},
                      {"mean_reward", mean_reward},
                      {"samples", pending_.size()},
                      {"groups", pending_groups_},
                      {"staleness", staleness},
                      {"clip_fraction", us.grpo.clip_fraction},
                      {"grad_norm", grad_norm},
                      {"load_imbalance", us.load_imbalance}});
    double t_checkpoint = 0;
    if (keep_every_ > 0) {
      // Copies this process's state and queues its shard; the store is written behind the
      // announcement, up to job.max_durability_lag versions behind (job/README.md).
      t0 = std::chrono::steady_clock::now();
      if (checkpoint_due(version_, interval_))
        if (auto st = checkpoint(hash); !st) return st.err();
      if (auto st = ckpt_->throttle(version_); !st) return st.err();
      t_checkpoint = seconds_since(t0);
    }
    // t_generate / t_reward: time the rollout and reward nodes spent on this iteration's
    // samples, summed over samples (worker-seconds: workers run in parallel, so this is work,
    // not wall time); the per-sample means sit beside them.
    const double n_samples = double(std::max<size_t>(pending_.size(), 1));
    timings_.push_back({{"iteration", version_},
                        {"t_buffer", t_wait},
                        {"t_train", t_train},
                        {"t_weights", t_weights},
                        {"t_checkpoint", t_checkpoint},
                        {"t_generate", double(generate_us_) * 1e-6},
                        {"t_reward", double(reward_us_) * 1e-6},
                        {"t_env", double(env_us_) * 1e-6},
                        {"generate_ms_per_sample", double(generate_us_) * 1e-3 / n_samples},
                        {"reward_ms_per_sample", double(reward_us_) * 1e-3 / n_samples},
                        {"env_ms_per_step", env_steps_ ? double(env_us_) * 1e-3 / env_steps_ : 0.0},
                        // Wall clock at the step's end: the console's timeline and trace place each
                        // iteration's phases backwards from it.
                        {"end_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count()}});
    generate_us_ = reward_us_ = env_us_ = env_steps_ = 0;
    pending_.clear();
    pending_groups_ = 0;
    first_batch_.reset();

    out.new_version = true;
    out.manifest.version = version_;
    out.manifest.content_hash = hash;
    out.manifest.total_bytes = bytes.size();
    if (!shard_parts.empty())
      out.manifest.parts = std::move(shard_parts);  // one per shard, each its size and sha256
    else
      out.manifest.parts.push_back({weights_key(s_->prefix, version_), 0, bytes.size(), hash});
    out.manifest.created_unix_ms =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    return out;
  }

  nlohmann::json stats(const actors::history_cursor& from) const override {
    nlohmann::json out = stats_common(from);
    if (ep_) out["expert_plane"] = ep_->expert_plane();
    if (!s_->multi_turn()) return out;
    const int t = s_->guess_turns;
    out["reward_single_turn_bound"] = policy::guess_single_turn_bound();
    out["reward_open_loop_bound"] = policy::guess_open_loop_bound(t);
    // Over the episodes trained so far; a step's latency is its round trip from the rollout
    // worker, emulated environment time (env.step_latency_ms) included. Percentiles are of
    // each episode's mean step time (samples carry per-episode sums, not every step).
    out["env"] = {{"steps", num_env_steps_total_},
                  {"episodes", num_episodes_},
                  {"step_latency_ms",
                   {{"p50", percentile_of(episode_step_ms_, 50)},
                    {"p99", percentile_of(episode_step_ms_, 99)}}},
                  {"turns_per_episode_mean",
                   num_episodes_ ? double(num_env_steps_total_) / double(num_episodes_) : 0.0}};
    return out;
  }

 private:
  nlohmann::json stats_common(const actors::history_cursor& from) const {
    const bool mt = s_->multi_turn();
    nlohmann::json out{{"kind", "grpo"},
                       {"task", s_->task_name()},
                       {"difficulty", mt ? s_->guess_turns : s_->task->difficulty()},
                       {"reward_random", mt ? policy::guess_reward_random(s_->guess_turns)
                                            : s_->task->reward_random()},
                       {"reward_max", mt ? policy::guess_closed_loop_bound(s_->guess_turns)
                                         : s_->task->reward_max()},
                       {"policy_version", version_},
                       {"trainer_ep_ranks", s_->trainer_ep_ranks},
                       {"resumed_from_version", resumed_from_},
                       {"pending_groups", pending_groups_},
                       {"weights",
                        {{"durable_writes", writer_->num_written()},
                         {"durable_writes_failed", writer_->num_failed()},
                         {"checkpoint_shards_written", ckpt_->num_written()},
                         {"checkpoint_shards_failed", ckpt_->num_failed()},
                         {"durable_version", ckpt_->durable()},
                         {"durability_throttled", ckpt_->num_throttled()},
                         // A store that refuses checkpoint writes: tries refused, and the newest
                         // refusal while it lasts ("" when the store answers).
                         {"store_failures", ckpt_->num_store_failures()},
                         {"store_failing", ckpt_->store_failing()}}}};
    actors::put_history(out, "/reward_curve", curve_, from);
    actors::put_history(out, "/iterations", timings_, from);
    actors::put_history(out, "/weights/versions", published_, from, published_dropped_);
    return out;
  }

 private:
  // The full parameter set (every expert), however the trainer holds it.
  result<std::string> serialize_params() const {
    if (ep_) return ep_->serialize();
    return policy_->serialize();
  }

  // Pushes version_ to the least-loaded checkpoint cache; true when one holds it. The time it
  // took is the version's t_publish (trainer -> a cache holds it).
  bool publish_to_cache(const std::string& bytes) {
    if (!s_->use_caches()) return false;
    const auto t0 = std::chrono::steady_clock::now();
    auto ep = push_to_cache(*s_, version_, bytes);
    if (!ep) {
      logger("trainer")->warn(
          "policy version {}: no checkpoint cache took it ({}): publishing through the store",
          version_, ep.err().message);
      return false;
    }
    note_published(bytes.size(), seconds_since(t0), "cache");
    return true;
  }

  // A version as the trainer publishes it: its bytes and content hash and, for a sharded
  // version, member 0's own shards as pushed (the reports publish_shards adds the other
  // members' to). `seconds`: what making it took (serialising, hashing, pushing).
  struct version_bytes {
    std::shared_ptr<const std::string> bytes;
    std::string hash;
    result<std::vector<shard_report>> own_shards = std::vector<shard_report>{};
    std::chrono::steady_clock::time_point push_started;
    double seconds = 0;
  };

  // Serialises the parameters as version v and, when versions are sharded, pushes member 0's
  // own shards of it to the caches (a failed push is reported by publish_shards, which then
  // publishes through the store; only a failed serialisation is an error).
  status make_version(uint64_t v, version_bytes& out) {
    const auto t0 = std::chrono::steady_clock::now();
    auto serialized = serialize_params();
    if (!serialized) return serialized.err();
    out.bytes = std::make_shared<const std::string>(std::move(*serialized));
    out.hash = policy::content_hash(*out.bytes);
    out.push_started = std::chrono::steady_clock::now();
    if (sharded_) out.own_shards = push_own_shards(*s_, *ep_, v, out.hash);
    out.seconds = seconds_since(t0);
    return {};
  }

  // A trainer group's sharded publication (job/sharded_publication.h): member 0 pushes its own
  // ranks' shards (shard 0 naming the version's content hash) inside the step, before its
  // answer round (make_version); the other members pushed theirs meanwhile and said in the
  // answer round which cache holds each. True, with the manifest's
  // parts, when a cache holds every shard; otherwise the version goes through the store (a
  // version with a shard in no cache is never announced as held by the caches).
  bool publish_shards(uint64_t num_bytes, version_bytes& version,
                      std::vector<messages::weight_part>* parts) {
    auto log = logger("trainer");
    auto& mine = version.own_shards;
    if (!mine) {
      log->warn("policy version {}: member 0's shards: {}: publishing through the store", version_,
                mine.err().to_string());
      return false;
    }
    std::vector<shard_report> reports = std::move(*mine);
    for (const auto& a : ep_->member_answers()) {
      if (!a.is_object() || !a.contains("weights") || !a["weights"].is_array()) continue;
      for (const auto& j : a["weights"]) {
        auto r = shard_report_from_json(j);
        if (r)
          reports.push_back(std::move(*r));
        else
          log->warn("policy version {}: {}", version_, r.err().to_string());
      }
    }
    auto made = sharded_manifest_parts(reports, static_cast<uint32_t>(num_ranks()),
                                       weights_key(s_->prefix, version_));
    if (!made) {
      log->warn("policy version {}: {}: publishing through the store", version_,
                made.err().message);
      return false;
    }
    *parts = std::move(*made);
    // t_publish: from member 0's push to every member's shard held (their answers in).
    note_published(num_bytes, seconds_since(version.push_started), "cache", parts);
    return true;
  }

  // What the report's weight-plane figures are made from (bounded: the newest 1024). `shards`:
  // a sharded version's manifest parts (null: one whole version).
  void note_published(uint64_t num_bytes, double t_publish, const char* via,
                      const std::vector<messages::weight_part>* shards = nullptr) {
    nlohmann::json shard_bytes = nlohmann::json::array();
    if (shards)
      for (const auto& p : *shards) shard_bytes.push_back(p.bytes);
    published_.push_back({{"version", version_},
                          {"bytes", num_bytes},
                          {"t_publish", t_publish},
                          {"via", via},
                          // The trainer group's rounds through the coordinator for the step
                          // that made this version (0: a one-process trainer).
                          {"coordinator_bytes", ep_ ? ep_->coordinator_bytes() : 0},
                          // Shards published (1: one whole version; a trainer group's: one per
                          // rank, each pushed by its member); checkpoints are per member.
                          {"num_shards", shards ? shards->size() : 1},
                          {"shard_bytes", shard_bytes},
                          {"checkpoint_shards", ckpt_->num_shards()},
                          {"held_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count()}});
    if (published_.size() > 1024) {
      published_.erase(published_.begin());
      ++published_dropped_;
    }
  }

  // Writes version v's store copy (weights, then the hash object) and removes the version
  // that no admissible sample can still be generated from (a lease names at most the version
  // current when it was granted). Self-contained: it may run after the trainer is gone.
  std::function<status()> store_copy_of(uint64_t v, std::shared_ptr<const std::string> bytes,
                                        std::string hash) const {
    return version_store_copy(s_, v, std::move(bytes), std::move(hash));
  }

  // This process's state as checkpoint parts (ep_trainer.h's "rank-<R>/params|adam"; a
  // one-rank trainer's rank 0 holds the whole model).
  result<std::vector<store::checkpoint_part>> my_state() const {
    std::vector<store::checkpoint_part> out;
    if (!ep_) {
      out.push_back({"rank-0/params", policy_->serialize()});
      out.push_back({"rank-0/adam", opt_->serialize()});
      return out;
    }
    auto parts = ep_->local_state();
    if (!parts) return parts.err();
    for (auto& p : *parts) out.push_back({std::move(p.name), std::move(p.bytes)});
    return out;
  }
  status load_my_state(const std::vector<store::checkpoint_part>& parts) {
    if (ep_) {
      std::vector<state_part> mine;
      for (const auto& p : parts) mine.push_back({p.name, p.bytes});
      return ep_->load_local_state(mine);
    }
    const std::string* params = nullptr;
    const std::string* adam = nullptr;
    for (const auto& p : parts) {
      if (p.name == "rank-0/params") params = &p.bytes;
      if (p.name == "rank-0/adam") adam = &p.bytes;
    }
    if (!params || !adam)
      return error{errc::malformed_message,
                   "checkpoint shard 0 has no rank-0/params or rank-0/adam"};
    if (auto st = policy_->load(*params); !st) return st;
    return opt_->load(*adam);
  }
  int num_ranks() const { return ep_ ? ep_->num_ranks() : 1; }

  // The manifest's meta; `curve_objects`: the reward curve's and the timings' segments it
  // names that are not in the store yet (put before the commit).
  nlohmann::json checkpoint_meta(const std::string& hash,
                                 std::vector<named_object>* curve_objects) {
    nlohmann::json meta{
        {"policy_version", version_},
        {"content_hash", hash},
        {"task", s_->task_name()},
        {"difficulty", s_->multi_turn() ? s_->guess_turns : s_->task->difficulty()},
        {"num_ranks", num_ranks()},
        // A restore numbers on past every version this run may have announced beyond it.
        {"max_durability_lag", ckpt_->max_lag()}};
    meta.update(checkpointed_curve_.meta(curve_, curve_objects));
    meta.update(checkpointed_timings_.meta(timings_, curve_objects));
    return meta;
  }

  // Queues shard 0 of version_ (the other members queue theirs after the step: ep_trainer's
  // member hooks); shard 0's writer commits once every shard is durable.
  status checkpoint(const std::string& hash) {
    auto parts = my_state();
    if (!parts) return parts.err();
    std::vector<named_object> curve_objects;
    auto meta = checkpoint_meta(hash, &curve_objects);
    ckpt_->submit(version_, std::move(*parts), std::move(meta), std::move(curve_objects));
    return {};
  }

  status resume_from(const std::string& prefix) {
    auto m = store::latest_committed(*s_->store, checkpoint_prefix(prefix));
    if (!m) return error{m.err().code, "job.resume_from " + prefix + ": " + m.err().message};
    const bool whole =
        std::any_of(m->parts.begin(), m->parts.end(),
                    [](const store::manifest_entry& e) { return e.name == "params"; });
    uint64_t as_version = m->step;
    bool reshaped = false;
    if (whole) {
      // A checkpoint of one writer with the whole model (written before sharded checkpoints):
      // any trainer shape loads it.
      auto parts = store::read_checkpoint(*s_->store, checkpoint_prefix(prefix), *m);
      if (!parts) return parts.err();
      for (const auto& p : *parts) {
        if (p.name == "params") {
          if (auto st = ep_ ? ep_->load(p.bytes) : policy_->load(p.bytes); !st) return st;
        } else if (p.name == "adam") {
          if (auto st = ep_ ? ep_->load_adam(p.bytes) : opt_->load(p.bytes); !st) return st;
        }
      }
    } else {
      const uint64_t shards = m->meta.value("num_shards", uint64_t(0));
      const int64_t ranks = m->meta.value("num_ranks", int64_t(0));
      // Versions up to step + lag may have been announced with contents this checkpoint lacks:
      // the restored state is announced as the next version after them, never under one of
      // their numbers (job/README.md, "Checkpoints").
      const uint64_t lag = m->meta.value("max_durability_lag", uint64_t(0));
      as_version = m->step + (lag > 0 ? lag + 1 : 0);
      reshaped = shards != ckpt_->num_shards() || ranks != num_ranks();
      if (!reshaped) {
        auto mine = store::read_checkpoint_shard(*s_->store, checkpoint_prefix(prefix), *m, 0);
        if (!mine) return mine.err();
        if (auto st = load_my_state(*mine); !st) return st;
        if (ep_)
          if (auto st = ep_->restore_members(prefix, m->step, as_version); !st) return st;
      } else {
        // Written by a trainer of another shape: the whole model and moments, assembled here
        // from every shard, load the whole-model way; then each member writes its share of
        // them as the restored version (version 0 in the command: nothing to read).
        auto parts = store::read_checkpoint(*s_->store, checkpoint_prefix(prefix), *m);
        if (!parts) return parts.err();
        auto whole =
            assemble_whole_state(*parts, int(ranks), ep_ ? ep_->full_layout() : policy_->layout());
        if (!whole)
          return error{whole.err().code, "checkpoint " + std::to_string(m->step) + " under " +
                                             prefix + ": " + whole.err().message};
        if (auto st = ep_ ? ep_->load(whole->params) : policy_->load(whole->params); !st) return st;
        if (auto st = ep_ ? ep_->load_adam(whole->adam) : opt_->load(whole->adam); !st) return st;
        if (ep_)
          if (auto st = ep_->restore_members(prefix, 0, as_version); !st) return st;
        logger("trainer")->info(
            "checkpoint {} was written by {} shard(s) of {} rank(s); this trainer has {} of {}: "
            "loaded as the whole model",
            m->step, shards, ranks, ckpt_->num_shards(), num_ranks());
      }
    }
    version_ = as_version;
    resumed_from_ = m->step;
    std::vector<std::string> curve_warnings;
    curve_ = checkpointed_curve_.restore(*s_->store, m->meta, &curve_warnings);
    timings_ = checkpointed_timings_.restore(*s_->store, m->meta, &curve_warnings);
    for (const auto& w : curve_warnings) logger("trainer")->warn("resume from {}: {}", prefix, w);
    auto serialized = serialize_params();
    if (!serialized) return serialized.err();
    const std::string bytes = std::move(*serialized);
    const std::string hash = policy::content_hash(bytes);
    if (as_version != m->step || prefix != s_->prefix || reshaped) {
      // Committed under this run's prefix and number before it is announced (the members
      // wrote their shards of it before answering the restore command).
      auto parts = my_state();
      if (!parts) return parts.err();
      std::vector<named_object> curve_objects;
      auto meta = checkpoint_meta(hash, &curve_objects);
      if (auto st = ckpt_->write_now(version_, *parts, meta, curve_objects); !st) return st;
    } else {
      ckpt_->set_durable(version_);
    }
    // Republish the resumed weights under this run's prefix so rollouts can load them.
    if (auto st = s_->store->put(weights_key(s_->prefix, version_), bytes); !st) return st;
    if (auto st = s_->store->put(weights_key(s_->prefix, version_) + ".hash", hash); !st) return st;
    (void)publish_to_cache(bytes);  // rollouts read it there, else from the store
    logger("trainer")->info("resumed from {} at policy version {}, announced as version {}", prefix,
                            m->step, version_);
    return {};
  }

  std::shared_ptr<job_setup> s_;
  std::unique_ptr<policy::expert_exchange> exchange_, ref_exchange_;
  std::unique_ptr<policy::moe_policy> policy_, ref_;
  std::unique_ptr<policy::adam> opt_;
  std::unique_ptr<ep_trainer> ep_;  // instead of policy_ / opt_ when job.trainer_ep_ranks > 1
  std::vector<float> grads_;
  std::vector<policy::sample> pending_;
  size_t pending_groups_ = 0;
  size_t groups_per_step_ = 1;
  uint64_t keep_every_ = 0;  // job.checkpoint_every: 0 writes none
  uint64_t interval_ = 1;    // job.checkpoint_interval
  bool sharded_ = false;     // versions published as shards (job_setup::shard_versions)
  uint64_t version_ = 0;
  uint64_t resumed_from_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_batch_;
  uint64_t generate_us_ = 0, reward_us_ = 0;             // of the samples in pending_
  uint64_t env_us_ = 0, env_steps_ = 0;                  // of the samples in pending_ (multi-turn)
  uint64_t num_episodes_ = 0, num_env_steps_total_ = 0;  // every multi-turn sample trained
  // Each episode's mean step time, ms. Bounded by what a run trains (one double a sample).
  std::vector<double> episode_step_ms_;
  std::vector<nlohmann::json> curve_, timings_;
  checkpointed_curve checkpointed_curve_{s_->prefix};  // curve_ as the checkpoints carry it
  checkpointed_curve checkpointed_timings_{s_->prefix, "iteration_timings"};  // and timings_
  std::vector<nlohmann::json> published_;  // each version: bytes, t_publish, via, when readable
  size_t published_dropped_ = 0;           // taken off published_'s front (its cap)
  // Store copies behind the announcement; its writes own what they write.
  std::unique_ptr<durable_writer> writer_ = std::make_unique<durable_writer>(4);
  std::unique_ptr<shard_checkpointer> ckpt_;  // this process's checkpoint shard (made in init)
};

// A trainer group member other than member 0: its part of every step, and its own checkpoint
// shard of every version (written in the background; only its size crosses the coordinator).
status serve_member(const std::shared_ptr<job_setup>& s, ep_trainer& t,
                    actors::trainer_group& group) {
  const uint32_t me = group.member_index(), n = group.num_members();
  const uint64_t keep_every = static_cast<uint64_t>(s->cfg.get_int("job.checkpoint_every"));
  const uint64_t interval = checkpoint_interval(s->cfg.get_int("job.checkpoint_interval"),
                                                s->cfg.get_int("job.max_durability_lag"));
  shard_checkpointer ckpt(s->store, checkpoint_prefix(s->prefix), me, n,
                          static_cast<uint64_t>(s->cfg.get_int("job.max_durability_lag")),
                          keep_every, group.abort_flag());
  // A shard the store refused for good (a full disk) breaks the group at once, and is this
  // member's cause rather than the round the break then fails: the supervisor gives up on a
  // full disk instead of restarting into it, and the run ends naming it.
  std::mutex refused_mu;
  std::string refused;
  ckpt.on_refused([&](const std::string& why) {
    {
      std::lock_guard<std::mutex> g(refused_mu);
      refused = why;
    }
    group.report_failure(why);
  });
  auto as_parts = [](std::vector<state_part> state) {
    std::vector<store::checkpoint_part> out;
    for (auto& p : state) out.push_back({std::move(p.name), std::move(p.bytes)});
    return out;
  };
  ep_member_hooks hooks;
  const bool sharded = s->shard_versions(n);
  hooks.after_step = [&](uint64_t version) -> result<nlohmann::json> {
    nlohmann::json answer = nlohmann::json::object();
    if (sharded) {  // this member's shards of the version, to the caches; member 0 hears where
      auto reports = push_own_shards(*s, t, version, "");
      if (!reports) return reports.err();
      nlohmann::json list = nlohmann::json::array();
      for (const auto& r : *reports) list.push_back(r.to_json());
      answer["weights"] = std::move(list);
    }
    if (keep_every == 0 || !checkpoint_due(version, interval)) return answer;
    auto state = t.local_state();
    if (!state) return state.err();
    uint64_t num_bytes = 0;
    for (const auto& p : *state) num_bytes += p.bytes.size();
    ckpt.submit(version, as_parts(std::move(*state)), nlohmann::json::object());
    answer["bytes"] = num_bytes;
    answer["durable"] = ckpt.durable();
    return answer;
  };
  hooks.restore = [&](const std::string& prefix, uint64_t version, uint64_t as_version) -> status {
    if (version == 0) {  // loaded already (a checkpoint of another shape): write it as_version
      auto state = t.local_state();
      if (!state) return state.err();
      return ckpt.write_now(as_version, as_parts(std::move(*state)), nlohmann::json::object());
    }
    auto own = read_own_shard(*s->store, checkpoint_prefix(prefix), version, me);
    if (!own) return own.err();
    if (own->first.meta.value("num_shards", uint64_t(0)) != n)
      return error{errc::invalid_config,
                   "checkpoint " + std::to_string(version) + " has " +
                       own->first.meta.value("num_shards", nlohmann::json()).dump() +
                       " shards; this group has " + std::to_string(n) + " members"};
    std::vector<state_part> parts;
    for (const auto& p : own->second) parts.push_back({p.name, p.bytes});
    if (auto st = t.load_local_state(parts); !st) return st;
    if (as_version != version || prefix != s->prefix)
      return ckpt.write_now(as_version, own->second, nlohmann::json::object());
    ckpt.set_durable(version);
    return ok_status();
  };
  status served = t.serve(hooks);
  // Set before the report that broke the group, so before the round that failed returned.
  std::lock_guard<std::mutex> g(refused_mu);
  if (!served && !refused.empty()) return error{errc::io_error, refused};
  return served;
}

// ---- the job ------------------------------------------------------------------------------

class grpo_job final : public actors::job {
 public:
  explicit grpo_job(std::shared_ptr<job_setup> s) : s_(std::move(s)) {}
  std::string name() const override { return "grpo"; }
  uint32_t vocab_size() const override { return policy::num_vocab; }
  uint32_t max_completion_tokens() const override {
    return static_cast<uint32_t>(s_->max_completion_length());
  }
  nlohmann::json sampling() const override {
    return {{"temperature", s_->temperature},
            {"vocab_size", policy::num_vocab},
            {"max_completion_tokens", s_->max_completion_length()}};
  }

  result<std::vector<uint32_t>> prompt(uint64_t group_id) const override {
    if (s_->multi_turn()) {  // the env node's reset gives the same; every group has one
      auto p = policy::guess_prompt(s_->guess_turns);
      return std::vector<uint32_t>(p.begin(), p.end());
    }
    if (s_->dataset) {
      const auto& p = s_->dataset->row_of(group_id).prompt;
      return std::vector<uint32_t>(p.begin(), p.end());
    }
    std::mt19937_64 rng(mix(s_->seed ^ mix(group_id)));
    auto p = s_->task->generate(rng);
    return std::vector<uint32_t>(p.tokens.begin(), p.tokens.end());
  }
  result<std::unique_ptr<actors::rollout_work>> make_rollout_work() override {
    auto w = std::make_unique<policy_rollout>(s_);
    if (auto st = w->init(); !st) return st.err();
    return std::unique_ptr<actors::rollout_work>(std::move(w));
  }
  result<std::unique_ptr<actors::rollout_work>> make_group_rollout_work(
      actors::trainer_group& group) override {
    auto w = std::make_unique<policy_rollout>(s_);
    if (auto st = w->init(&group); !st) return st.err();
    return std::unique_ptr<actors::rollout_work>(std::move(w));
  }
  status serve_rollout_member(actors::trainer_group& group) override {
    return serve_rollout_group_member(group_setup(*s_), group);
  }
  result<std::unique_ptr<actors::reward_function>> make_reward() override {
    if (s_->multi_turn())
      return std::unique_ptr<actors::reward_function>(new environment_reward(s_->task_name()));
    auto rm = policy::make_reward(s_->cfg, *s_->task);
    if (!rm) return rm.err();
    return std::unique_ptr<actors::reward_function>(new policy_reward(s_, std::move(*rm)));
  }
  result<std::unique_ptr<actors::trainer_step>> make_trainer(
      actors::trainer_ranks& ranks) override {
    if (!s_->cfg.get_string("trainer.worker").empty())
      return make_external_trainer(s_, ranks.group());
    auto t = std::make_unique<grpo_trainer>(s_);
    if (auto st = t->init(ranks.group()); !st) return st.err();
    return std::unique_ptr<actors::trainer_step>(std::move(t));
  }
  status serve_trainer_member(actors::trainer_ranks& ranks) override {
    if (!ranks.group()) return error{errc::internal, "serve_trainer_member without a group"};
    if (!s_->cfg.get_string("trainer.worker").empty())  // a Python trainer group's rank k
      return serve_external_trainer_member(s_->cfg, external_setup(s_), *ranks.group());
    auto t = make_ep_trainer(s_, ranks.group());
    if (!t) return t.err();
    return serve_member(s_, **t, *ranks.group());
  }
  void use_weight_caches(std::shared_ptr<weights::cache_directory> caches) override {
    s_->caches = std::move(caches);
  }
  nlohmann::json weights_stats() const override {
    std::lock_guard<std::mutex> g(s_->feed_mu);
    return s_->feed ? s_->feed->stats() : nlohmann::json();
  }
  result<std::shared_ptr<const std::string>> policy_version_bytes(uint64_t version) override {
    if (version == 0)
      return error{errc::not_found,
                   "policy version 0 is the initial weights: no version was published yet"};
    return s_->version_bytes(version);
  }
  result<std::unique_ptr<env::environment>> make_environment(const std::string& task) override {
    if (task == "guess" && s_->multi_turn())
      return make_guess_environment(s_->guess_turns, s_->dataset);
    return error{errc::invalid_argument, "unknown task '" + task + "': this job's env nodes run " +
                                             (s_->multi_turn() ? "'guess'" : "no environment")};
  }

 private:
  std::shared_ptr<job_setup> s_;
};

}  // namespace

std::string weights_key(const std::string& prefix, uint64_t version) {
  return prefix + "/weights/v" + std::to_string(version);
}
std::string checkpoint_prefix(const std::string& prefix) { return prefix + "/checkpoints"; }

result<std::shared_ptr<actors::job>> make_job(const config& cfg, actors::node_role role) {
  if (auto st = check_job_device(cfg); !st) return st.err();
  const std::string kind = cfg.get_string("job.kind");
  if (kind == "modpow") return make_modpow_job(cfg);
  auto s = job_setup::create(cfg, role);
  if (!s) return s.err();
  return std::shared_ptr<actors::job>(std::make_shared<grpo_job>(*s));
}

}  // namespace moerl::job
