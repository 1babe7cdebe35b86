"""`python -m moerl.examples.torch_moe --standalone`: the same policy and GRPO loop as the
moerl job (configs/torch-moe.yaml), in one plain PyTorch process with no moerl: generate a
policy iteration's groups, score them, one GRPO step, repeat. Prints one JSON line per
iteration and a summary (time to 90% of the max reward, samples/s): the peer figure."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from moerl.examples.torch_moe import grpo
from moerl.examples.torch_moe.policy import SortPolicy, random_prompt, sort_reward


def standalone(iterations: int, prompts: int, group: int, target: float, seed: int) -> dict:
    torch.set_num_threads(1)
    rng = torch.Generator().manual_seed(seed)
    policy = SortPolicy()
    opt = grpo.optimizer(policy)
    t0 = time.monotonic()
    recent, samples, reached = [], 0, None
    for it in range(1, iterations + 1):
        batch = [random_prompt(rng) for _ in range(prompts)]
        rows, mean = [], 0.0
        for p in batch:
            toks, lps = policy.generate([p] * group, rng=rng)
            rewards = [sort_reward(p, t) for t in toks]
            mean += sum(rewards)
            rows += [(p, t, lp, a) for t, lp, a in zip(toks, lps, grpo.advantages(rewards))]
        mean /= prompts * group
        samples += prompts * group
        stats = grpo.step(policy, opt, rows)
        recent = (recent + [mean])[-10:]
        avg = sum(recent) / len(recent)
        print(json.dumps({"iteration": it, "mean_reward": round(mean, 4), "mean10": round(avg, 4),
                          "t": round(time.monotonic() - t0, 2), **stats}), flush=True)
        if reached is None and len(recent) == 10 and avg >= target:
            reached = {"iteration": it, "seconds": time.monotonic() - t0}
            break
    wall = time.monotonic() - t0
    return {"mode": "standalone", "reached_90": reached, "iterations": it, "samples": samples,
            "samples_per_s": samples / wall, "wall_s": wall,
            "load_average": os.getloadavg()[0]}


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m moerl.examples.torch_moe")
    ap.add_argument("--standalone", action="store_true", required=True,
                    help="plain single-process PyTorch, no moerl (the moerl job: moerl up "
                         "--config configs/torch-moe.yaml)")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--prompts", type=int, default=16, help="prompt groups per iteration")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--target", type=float, default=0.9, help="of reward_max (1.0)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    out = standalone(a.iterations, a.prompts, a.group, a.target, a.seed)
    print(json.dumps(out), flush=True)
    return 0 if out["reached_90"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
