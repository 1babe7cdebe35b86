"""A Python trainer group's pieces (python/WORKERS.md, "Trainer groups"), on 2 ranks of a gloo
group spawned here: the example's sharded GRPO step (experts through moerl.ep.Buffer, dense
gradients all-reduced) against the one-process step on the same rows, the per-expert published
form loaded back by a one-process policy, and the SDK's check that every rank makes the same
collective call. The whole group under `moerl up`: tests/workers/python_trainer_test.py."""
import pytest
import torch
import torch.distributed as dist
from spawned_ranks import run_spawned_ranks  # tests/python/spawned_ranks.py

from moerl.examples.torch_moe import grpo
from moerl.examples.torch_moe.policy import SortPolicy, random_prompt, sort_reward

WORLD = 2
STEPS = 2


def make_rows(num_groups=4, seed=3):
    """Rows (prompt, tokens, behaviour logprobs, advantage) of num_groups groups of 8."""
    rng = torch.Generator().manual_seed(seed)
    policy = SortPolicy()
    rows = []
    for _ in range(num_groups):
        p = random_prompt(rng)
        toks, lps = policy.generate([p] * 8, rng=rng)
        rewards = [sort_reward(p, t) for t in toks]
        rows += [(p, t, lp, a) for t, lp, a in zip(toks, lps, grpo.advantages(rewards))]
    return rows


def sharded_rank(rank, port, num_groups, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    from moerl import ep
    buf = ep.Buffer(dist.group.WORLD, num_nvl_bytes=3 * WORLD * 320 * 4096)
    policy = SortPolicy(buffer=buf)
    opt = grpo.optimizer(policy)
    rows = make_rows(num_groups)
    stats = [grpo.step_sharded(policy, opt, rows, rank, WORLD, dist.group.WORLD)
             for _ in range(STEPS)]
    out.put((rank, {k: v.numpy().copy() for k, v in policy.published_state().items()}, stats,
             [d["peer_paths"] for d in buf.transport_report()]))
    dist.barrier()


def run_ranks(target, *args):
    return run_spawned_ranks(target, WORLD, *args)


@pytest.mark.parametrize("num_groups", [4, 1])
def test_sharded_step_equals_the_one_process_step(num_groups):
    """num_groups 1: 8 rows, 4 per rank, so some positions route no token to a rank's experts
    (the case that once left one rank's backward without its collective calls)."""
    rows = make_rows(num_groups)
    ref = SortPolicy()
    opt = grpo.optimizer(ref)
    ref_stats = [grpo.step(ref, opt, rows) for _ in range(STEPS)]
    want = ref.published_state()
    got = run_ranks(sharded_rank, num_groups)
    merged = {}
    for rank, part, stats, paths in got:
        # shared memory between the ranks (libfabric's shm provider on one host)
        assert all(sorted(p) == ["same_host", "same_process"] for p in paths), paths
        for (a, b) in zip(stats, ref_stats):
            assert abs(a["loss"] - b["loss"]) < 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5
        for k, v in part.items():
            t = torch.from_numpy(v)
            if k in merged:  # replicated: equal on every rank, bit for bit
                assert torch.equal(merged[k], t), k
            merged.setdefault(k, t)
    assert set(merged) == set(want), set(merged) ^ set(want)
    worst = max(float((merged[k] - want[k]).abs().max()) for k in want)
    assert worst < 2e-5, worst  # float summation order, through 8 Adam steps
    one = SortPolicy()
    one.load_published(merged)
    for k, v in one.state_dict().items():
        assert float((v - ref.state_dict()[k]).abs().max()) < 2e-5, k


def mismatched_rank(rank, port, out):
    from moerl import worker
    from moerl.worker import CollectiveMismatch, Trainer
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    t = Trainer.__new__(Trainer)  # the group's part of a Trainer, without a node
    t.rank, t.world_size, t.process_group = rank, WORLD, dist.group.WORLD
    t._collectives = worker._Collectives("trainer group", "every rank must call batches(), "
                                         "publish() and checkpoint() in the same order")
    t._collective("batches")  # the same first call on both ranks
    try:
        t._collective("publish" if rank == 0 else "checkpoint")
        out.put((rank, "no error"))
    except CollectiveMismatch as e:
        out.put((rank, str(e)))


def test_ranks_calling_different_collectives_get_an_error_naming_both():
    got = run_ranks(mismatched_rank)
    for rank, msg in got:
        assert "rank 0 called publish() (its collective call #2)" in msg, msg
        assert "rank 1 called checkpoint() (its collective call #2)" in msg, msg
