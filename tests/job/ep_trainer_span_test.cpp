// The expert-parallel trainer step across processes (a trainer group across nodes): two
// forked member processes, one rank each, exchanging experts over fabric shm between the
// processes and all-reducing dense gradients across them; member 0 drives (the batch, the
// parameter and Adam gathers, loads go to member 1 as commands) and member 1 serves. The
// parameters and Adam moments after two steps are bit-identical to the same two ranks as
// threads of one process. A member that dies mid-run makes member 0's next operation fail
// (never a hang).
#include <gtest/gtest.h>

#include <signal.h>

#include <random>

#include "fabric/bootstrap.h"
#include "job/ep_trainer.h"
#include "job/group_bootstrap.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/trainer.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

policy::model_config model() {
  auto c = testing::small_model(13);
  c.aux_loss_coef = 0.0f;
  return c;
}

policy::adam_config adam_cfg() {
  policy::adam_config a;
  a.learning_rate = 1e-2;
  a.eps = 1e-3;
  a.grad_clip = 0.05;
  return a;
}

using batch = testing::training_batch;
batch make_batch(uint64_t seed) { return testing::make_training_batch(model(), seed); }

std::unique_ptr<ep_trainer> make(const ep_trainer_span* span) {
  policy::grpo_config grpo;
  grpo.group_size = 4;
  auto t = ep_trainer::create(testing::node_config(), model(), grpo, adam_cfg(), 1.0f, 2, 32, span);
  EXPECT_TRUE(t.ok()) << t.err().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(ep_trainer_span, two_member_processes_step_exactly_like_two_rank_threads) {
  const batch b1 = make_batch(1);
  // Multi-turn samples: the tokens an environment wrote carry no loss on any member either.
  const batch b2 = [] {
    batch b = make_batch(2);
    for (auto& s : b.samples) {
      s.from_env.assign(s.completion.size(), 0);
      s.from_env[s.completion.size() / 2] = 1;
    }
    return b;
  }();
  auto rep = fabric::launch_processes(
      2,
      [&](fabric::bootstrap& boot) -> int {
        auto span = launched_process_span(boot);
        auto t = make(&span);
        if (!t) return 2;
        if (boot.rank() == 1) return t->serve().ok() ? 0 : 3;
        for (const auto* b : {&b1, &b2})
          if (!t->step(b->samples, b->advantages).ok()) return 4;
        auto params = t->serialize();
        auto moments = t->serialize_adam();
        if (!params || !moments) return 5;
        // A load travels to member 1 too: the group still steps after it.
        if (!t->load(*params).ok() || !t->load_adam(*moments).ok()) return 6;
        // After a load the state is gathered by its own commands (a step's answer round
        // carried it before): the same bytes.
        if (*t->serialize() != *params || *t->serialize_adam() != *moments) return 10;
        t->stop_members();
        t.reset();
        // The same two steps with both ranks as threads of this process.
        auto ref = make(nullptr);
        for (const auto* b : {&b1, &b2})
          if (!ref->step(b->samples, b->advantages).ok()) return 7;
        if (*ref->serialize() != *params) return 8;
        if (*ref->serialize_adam() != *moments) return 9;
        return 0;
      },
      240000);
  ASSERT_TRUE(rep.ok()) << rep.err().to_string();
  EXPECT_EQ(rep->exit_codes, (std::vector<int>{0, 0}));
}

TEST(ep_trainer_span, a_dead_member_fails_the_drivers_next_operation) {
  const batch b1 = make_batch(3);
  auto rep = fabric::launch_processes(
      2,
      [&](fabric::bootstrap& boot) -> int {
        auto span = launched_process_span(boot);
        auto t = make(&span);
        if (!t) return 2;
        if (boot.rank() == 1) {
          ::raise(SIGKILL);  // gone before the first command
          return 0;
        }
        auto st = t->step(b1.samples, b1.advantages);
        return st.ok() ? 1 : (st.err().code == errc::peer_dead ? 0 : 10);
      },
      240000);
  ASSERT_TRUE(rep.ok()) << rep.err().to_string();
  EXPECT_EQ(rep->exit_codes[0], 0);
  EXPECT_EQ(rep->exit_codes[1], -SIGKILL);
}

}  // namespace
}  // namespace moerl::job
