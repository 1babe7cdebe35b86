// Sharded asynchronous checkpoints of a trainer group across processes (issue 27): 2 and 4
// forked member processes with a ~64 MiB model, each writing its own checkpoint shard to one
// local store from its own background writer while member 0 commits; the steps' answer rounds
// carry no optimiser state; a restore command carries only the version and every member
// reads its own shard back (the group's parameters and moments equal those checkpointed).
// A member SIGKILLed in the middle of writing its shard, or right after its step (before its
// answer: during publication), leaves the newest committed checkpoint as it was; a re-formed
// group restores every member's shard of it and announces it past every version the broken
// group may have announced, so no version number is ever announced with two contents.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

#include "fabric/bootstrap.h"
#include "job/ep_trainer.h"
#include "job/group_bootstrap.h"
#include "job/shard_checkpointer.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/trainer.h"
#include "store/digest.h"
#include "store/local_store.h"
#include "tests/job/ep_fixture.h"
#include "tests/support/temp_dir.h"

namespace moerl::job {
namespace {

policy::model_config big_model() { return testing::model_of_64_mib(); }

using batch = testing::training_batch;
batch make_batch(uint64_t seed) { return testing::make_training_batch(big_model(), seed); }

std::vector<store::checkpoint_part> as_parts(std::vector<state_part> state) {
  std::vector<store::checkpoint_part> out;
  for (auto& p : state) out.push_back({std::move(p.name), std::move(p.bytes)});
  return out;
}

// A member's after_step hook: its shard of version v to its background writer.
result<nlohmann::json> checkpoint_in_background(ep_trainer& t, shard_checkpointer& ckpt,
                                                uint64_t v) {
  auto state = t.local_state();
  if (!state) return state.err();
  ckpt.submit(v, as_parts(std::move(*state)), nlohmann::json::object());
  return nlohmann::json{{"durable", ckpt.durable()}};
}

// Every member: an ep_trainer of num_members ranks and its shard_checkpointer (lag 0, so a
// version is committed when member 0's step returns: the test needs no waiting).
void run_group(int num_members) {
  const batch b1 = make_batch(1), b2 = make_batch(2), b3 = make_batch(3);
  ::moerl::testing::temp_dir dir("sharded-state");
  const std::string prefix = "run/checkpoints";
  auto rep = fabric::launch_processes(
      num_members,
      [&](fabric::bootstrap& boot) -> int {
        auto st = store::local_store::open(dir.path(), true);
        if (!st) return 20;
        std::shared_ptr<store::object_store> store(std::move(*st));
        auto span = launched_process_span(boot);
        policy::grpo_config grpo;
        grpo.group_size = 4;
        policy::adam_config adam;
        adam.learning_rate = 1e-2;
        auto made = ep_trainer::create(testing::node_config(), big_model(), grpo, adam, 1.0f,
                                       num_members, 32, &span);
        if (!made) return 21;
        ep_trainer& t = **made;
        const uint32_t me = uint32_t(boot.rank());
        shard_checkpointer ckpt(store, prefix, me, uint32_t(num_members), 0, 1);
        if (me != 0) {
          ep_member_hooks hooks;
          hooks.after_step = [&](uint64_t v) { return checkpoint_in_background(t, ckpt, v); };
          hooks.restore = [&](const std::string& p, uint64_t v, uint64_t) -> status {
            auto own = read_own_shard(*store, p, v, me);
            if (!own) return own.err();
            std::vector<state_part> parts;
            for (auto& q : own->second) parts.push_back({q.name, q.bytes});
            return t.load_local_state(parts);
          };
          return t.serve(hooks).ok() ? 0 : 3;
        }
        uint64_t state_bytes_per_rank = 0;
        uint64_t v = 0;
        for (const auto* b : {&b1, &b2}) {
          if (!t.step(b->samples, b->advantages, ++v).ok()) return 4;
          auto state = t.local_state();
          if (!state) return 5;
          state_bytes_per_rank = 0;
          for (const auto& p : *state) state_bytes_per_rank += p.bytes.size();
          ckpt.submit(v, as_parts(std::move(*state)), {{"policy_version", v}});
          if (!ckpt.throttle(v).ok()) return 6;  // lag 0: waits for the commit
          // Before sharding, the answer carried every other rank's parameters AND moments
          // (3x the parameters), and the coordinator sends every contribution to every member:
          // now at most their parameters cross, never the moments.
          const uint64_t before =
              uint64_t(num_members + 1) * uint64_t(num_members - 1) * state_bytes_per_rank;
          std::fprintf(stderr,
                       "members %d, version %llu: coordinator bytes %llu (state per rank %llu "
                       "bytes; its answer round alone took >= %llu before)\n",
                       num_members, (unsigned long long)v,
                       (unsigned long long)t.coordinator_bytes(),
                       (unsigned long long)state_bytes_per_rank, (unsigned long long)before);
          // The bar: a version's control messages stay under 64 KiB whatever the
          // model size (the batch and the parameter shares cross on the fabric).
          if (t.coordinator_bytes() >= before || t.coordinator_bytes() >= 64 * 1024) return 7;
        }
        if (state_bytes_per_rank < (3u << 20)) return 8;  // the model is not small
        auto committed = store::latest_committed(*store, prefix);
        if (!committed || committed->step != 2) return 9;
        for (int k = 0; k < num_members; ++k) {
          auto own = read_own_shard(*store, prefix, 2, uint32_t(k));
          if (!own || own->second.size() != 2) return 10;  // rank-k/params and rank-k/adam
          if (own->second[0].name != "rank-" + std::to_string(k) + "/adam") return 11;
        }
        auto params2 = t.serialize();
        auto adam2 = t.serialize_adam();
        if (!params2 || !adam2) return 12;
        // A third step moves every member on; restoring checkpoint 2 (each member its own
        // shard, the command carrying only the version) brings the whole group back.
        if (!t.step(b3.samples, b3.advantages, 3).ok()) return 13;
        if (*t.serialize() == *params2) return 14;
        auto mine = read_own_shard(*store, prefix, 2, 0);
        if (!mine) return 15;
        std::vector<state_part> parts;
        for (auto& q : mine->second) parts.push_back({q.name, q.bytes});
        if (!t.load_local_state(parts).ok()) return 16;
        if (!t.restore_members(prefix, 2, 2).ok()) return 17;
        // Which of the two differs, and where (a CI run on 7 Dec saw 18 once for 4 members and
        // did not repeat in 9 runs here: the next one says more).
        auto first_difference = [](const std::string& a, const std::string& b) {
          return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first -
                                     a.begin());
        };
        auto params_back = t.serialize();
        auto adam_back = t.serialize_adam();
        if (!params_back || !adam_back) return 19;
        if (*params_back != *params2 || *adam_back != *adam2) {
          std::fprintf(stderr,
                       "restored state differs: params %s (%zu vs %zu bytes, first difference "
                       "at %zu), adam %s (%zu vs %zu bytes, first difference at %zu)\n",
                       *params_back == *params2 ? "equal" : "DIFFER", params_back->size(),
                       params2->size(), first_difference(*params_back, *params2),
                       *adam_back == *adam2 ? "equal" : "DIFFER", adam_back->size(), adam2->size(),
                       first_difference(*adam_back, *adam2));
          return 18;
        }
        t.stop_members();
        return 0;
      },
      280000);
  ASSERT_TRUE(rep.ok()) << rep.err().to_string();
  EXPECT_EQ(rep->exit_codes, std::vector<int>(size_t(num_members), 0));
}

TEST(sharded_state, a_group_of_two_checkpoints_each_members_shard_and_restores_them) {
  run_group(2);
}

TEST(sharded_state, a_group_of_four_checkpoints_each_members_shard_and_restores_them) {
  run_group(4);
}

// Puts through to a real store, and SIGKILLs this process right after putting a key that
// contains `trigger`: a member dying mid-shard (a part written, its marker not).
class dying_store final : public store::object_store {
 public:
  dying_store(std::shared_ptr<store::object_store> inner, std::string trigger)
      : inner_(std::move(inner)), trigger_(std::move(trigger)) {}
  status put(const std::string& key, const std::string& bytes) override {
    auto st = inner_->put(key, bytes);
    if (!trigger_.empty() && key.find(trigger_) != std::string::npos) ::raise(SIGKILL);
    return st;
  }
  result<std::string> get(const std::string& key) const override { return inner_->get(key); }
  result<std::vector<std::string>> list(const std::string& prefix) const override {
    return inner_->list(prefix);
  }
  status remove(const std::string& key) override { return inner_->remove(key); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::shared_ptr<store::object_store> inner_;
  std::string trigger_;
};

enum class kill_at { shard_write, publication };

// Member 0 "announces" a version by appending "version hash" to a file (what the coordinator
// would hear); the test reads every announcement of both incarnations back.
void announce(const std::string& path, uint64_t version, const std::string& params) {
  std::ofstream(path, std::ios::app) << version << " " << store::sha256_hex(params) << "\n";
}

void kill_and_reform(kill_at when) {
  const batch b1 = make_batch(4), b2 = make_batch(5), b3 = make_batch(6);
  ::moerl::testing::temp_dir dir("sharded-kill");
  const std::string prefix = "run/checkpoints";
  const std::string announced = dir.path() + "/announced.txt";
  constexpr uint64_t kLag = 1;
  auto open_store = [&]() -> std::shared_ptr<store::object_store> {
    auto st = store::local_store::open(dir.path() + "/store", true);
    return st ? std::shared_ptr<store::object_store>(std::move(*st)) : nullptr;
  };
  auto make_trainer = [&](fabric::bootstrap& boot) {
    auto span = launched_process_span(boot);
    policy::grpo_config grpo;
    grpo.group_size = 4;
    return ep_trainer::create(testing::node_config(), big_model(), grpo, policy::adam_config{},
                              1.0f, 2, 32, &span);
  };

  // The first incarnation: version 1 is committed; member 1 dies while version 2 is made.
  auto first = fabric::launch_processes(
      2,
      [&](fabric::bootstrap& boot) -> int {
        auto base = open_store();
        auto made = make_trainer(boot);
        if (!base || !made) return 20;
        ep_trainer& t = **made;
        auto aborted = std::make_shared<std::atomic<bool>>(false);
        if (boot.rank() == 1) {
          auto store = std::make_shared<dying_store>(
              base, when == kill_at::shard_write ? "step-000000000002/parts/shard-0001/" : "");
          shard_checkpointer ckpt(store, prefix, 1, 2, kLag, 1);
          ep_member_hooks hooks;
          hooks.after_step = [&](uint64_t v) -> result<nlohmann::json> {
            if (v == 2 && when == kill_at::publication) ::raise(SIGKILL);
            return checkpoint_in_background(t, ckpt, v);
          };
          (void)t.serve(hooks);
          return 0;  // the dying store or the hook ends this process first
        }
        shard_checkpointer ckpt(base, prefix, 0, 2, kLag, 1, aborted);
        for (uint64_t v = 1; v <= 3; ++v) {
          const batch& b = v == 1 ? b1 : v == 2 ? b2 : b3;
          auto stepped = t.step(b.samples, b.advantages, v);
          if (!stepped) break;  // member 1 is gone: the group broke
          auto params = t.serialize();
          auto state = t.local_state();
          if (!params || !state) break;
          ckpt.submit(v, as_parts(std::move(*state)), {{"max_durability_lag", kLag}});
          if (!ckpt.throttle(v)) break;
          announce(announced, v, *params);
        }
        aborted->store(true);  // what the group's watcher raises once a member is lost
        return 0;
      },
      280000);
  ASSERT_TRUE(first.ok()) << first.err().to_string();
  EXPECT_EQ(first->exit_codes, (std::vector<int>{0, -SIGKILL}));
  {
    auto base = open_store();
    ASSERT_TRUE(base);
    auto committed = store::latest_committed(*base, prefix);
    ASSERT_TRUE(committed.ok()) << committed.err().to_string();
    EXPECT_EQ(committed->step, 1u);  // version 2 never got member 1's shard
    auto torn = store::verify_checkpoint(*base, prefix, 2);
    EXPECT_FALSE(torn.ok());
  }

  // The re-formed group: each member reads its own shard of the newest committed checkpoint
  // (the command carries the version only) and writes it again as the restored version,
  // numbered past every version the broken group may have announced.
  auto second = fabric::launch_processes(
      2,
      [&](fabric::bootstrap& boot) -> int {
        auto store = open_store();
        auto made = make_trainer(boot);
        if (!store || !made) return 20;
        ep_trainer& t = **made;
        const uint32_t me = uint32_t(boot.rank());
        shard_checkpointer ckpt(store, prefix, me, 2, kLag, 1);
        auto load_own = [&](const std::string& p, uint64_t v, uint64_t as) -> status {
          auto own = read_own_shard(*store, p, v, me);
          if (!own) return own.err();
          std::vector<state_part> parts;
          for (auto& q : own->second) parts.push_back({q.name, q.bytes});
          if (auto st = t.load_local_state(parts); !st) return st;
          // What this member now holds is exactly its shard of the checkpoint.
          auto back = t.local_state();
          if (!back || back->size() != parts.size()) return error{errc::internal, "state size"};
          // The shard lists its parts by name; local_state by rank, params first.
          std::map<std::string, std::string> now;
          for (auto& q : *back) now[q.name] = std::move(q.bytes);
          for (const auto& q : parts)
            if (now[q.name] != q.bytes)
              return error{errc::internal, "restored " + q.name + " differs"};
          if (as != v) return ckpt.write_now(as, own->second, {{"max_durability_lag", kLag}});
          return ok_status();
        };
        if (me == 1) {
          ep_member_hooks hooks;
          hooks.restore = load_own;
          hooks.after_step = [&](uint64_t v) { return checkpoint_in_background(t, ckpt, v); };
          return t.serve(hooks).ok() ? 0 : 3;
        }
        auto committed = store::latest_committed(*store, prefix);
        if (!committed) return 4;
        const uint64_t lag = committed->meta.value("max_durability_lag", uint64_t(0));
        const uint64_t as = committed->step + lag + 1;
        // Member 0 commits the restored version after the members wrote their shards of it.
        if (auto st = load_own(prefix, committed->step, committed->step); !st) {
          std::fprintf(stderr, "member 0 restore: %s\n", st.err().to_string().c_str());
          return 5;
        }
        if (!t.restore_members(prefix, committed->step, as)) return 6;
        auto own = read_own_shard(*store, prefix, committed->step, 0);
        if (!own || !ckpt.write_now(as, own->second, {{"max_durability_lag", kLag}})) return 11;
        auto params = t.serialize();
        if (!params) return 7;
        announce(announced, as, *params);
        auto state = t.local_state();
        if (!state || !t.step(b3.samples, b3.advantages, as + 1)) return 8;
        auto next = t.serialize();
        state = t.local_state();
        if (!next || !state) return 9;
        ckpt.submit(as + 1, as_parts(std::move(*state)), {{"max_durability_lag", kLag}});
        if (!ckpt.throttle(as + 1)) return 10;
        announce(announced, as + 1, *next);
        t.stop_members();
        return 0;
      },
      280000);
  ASSERT_TRUE(second.ok()) << second.err().to_string();
  EXPECT_EQ(second->exit_codes, (std::vector<int>{0, 0}));

  // Every version announced, by either incarnation, has one content.
  std::map<uint64_t, std::string> contents;
  std::ifstream in(announced);
  uint64_t v = 0;
  std::string hash;
  int num_announced = 0;
  while (in >> v >> hash) {
    ++num_announced;
    auto [it, fresh] = contents.emplace(v, hash);
    EXPECT_TRUE(fresh || it->second == hash) << "version " << v << " announced with two contents";
  }
  EXPECT_GE(num_announced, 3);  // version 1, the restored version and the one after it
  auto base = open_store();
  ASSERT_TRUE(base);
  auto restored = store::verify_checkpoint(*base, prefix, 1 + kLag + 1);
  ASSERT_TRUE(restored.ok()) << restored.err().to_string();
  EXPECT_EQ(restored->meta["num_shards"], 2);
  EXPECT_EQ(restored->parts.size(), 4u);  // both members' params and moments
}

TEST(sharded_state, a_member_killed_mid_shard_write_leaves_the_last_commit_and_the_group_reforms) {
  kill_and_reform(kill_at::shard_write);
}

TEST(sharded_state,
     a_member_killed_during_publication_leaves_the_last_commit_and_the_group_reforms) {
  kill_and_reform(kill_at::publication);
}

}  // namespace
}  // namespace moerl::job
