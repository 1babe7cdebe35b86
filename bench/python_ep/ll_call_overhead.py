"""Where a low-latency dispatch + combine's time goes from Python (issue 25): per call, the
time inside the binding (``_moerl.EpCore.ll_dispatch`` / ``ll_combine``, the exchange
itself) and the rest (moerl/ep_low_latency.py's checks, allocations and handles, the
decorator), plus ``get_next_low_latency_combine_buffer``. The loop is
ep_vs_all_to_all.py's ``moerl_low_latency_zero_copy`` (identity experts into the combine
buffer, a barrier before the combine; both untimed), on its inputs.

The end-to-end bench cannot resolve a few tenths of a millisecond on a shared 2-core box
(its C++ row alone moves 2-3x between runs there); this one times the pieces inside each
call, so the Python-side cost shows apart from the exchange's scheduling noise.

--packages a,b,...: moerl packages (build/python directories) timed in alternation, each
--pairs times, one process group per run, all in one JSON; without it, the imported moerl.
An entry ending in "+buffer" (or --in-dispatch-buffer) writes the tokens into
get_low_latency_dispatch_buffer before each step, untimed, so the dispatch copies no x.

Usage: /usr/bin/python3 bench/python_ep/ll_call_overhead.py --packages OLD,NEW [--pairs 3]
           [--ranks 2] [--tokens 128 --hidden 7168 --experts 256 --topk 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


class _TimedCore:
    """The Buffer's core with each binding call timed (seconds appended to `times`)."""

    def __init__(self, core: Any, times: Dict[str, List[float]]) -> None:
        self._core, self._times = core, times

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._core, name)
        if not callable(fn):
            return fn

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._times.setdefault(name, []).append(time.perf_counter() - start)

        return timed


def rank_main(rank: int, world: int, init_file: str, case: Dict[str, Any], iterations: int, warmup: int,
              results: Any, in_dispatch_buffer: bool = False) -> None:
    import torch
    import torch.distributed as dist

    import moerl.ep
    from ep_vs_all_to_all import routing

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    x, idx, w = routing(rank, case)
    buf = moerl.ep.Buffer(dist.group.WORLD, low_latency_mode=True, op_timeout_ms=600_000)
    core_times: Dict[str, List[float]] = {}
    buf._core_box[0] = _TimedCore(buf._core_box[0], core_times)
    rows: Dict[str, List[float]] = {"dispatch_total": [], "combine_total": [], "next_buffer": []}
    for i in range(warmup + iterations):
        tokens = x
        if in_dispatch_buffer:  # untimed, as the layer before would write its output there
            tokens = buf.get_low_latency_dispatch_buffer(case["tokens"], case["hidden"], case["experts"],
                                                         case["topk"], x.dtype)[:x.shape[0]]
            tokens.copy_(x)
        dist.barrier()
        start = time.perf_counter()
        recv_x, count, handle, _, _ = buf.low_latency_dispatch(tokens, idx, case["tokens"], case["experts"],
                                                               use_fp8=False)
        dispatch = time.perf_counter() - start
        start = time.perf_counter()
        target = buf.get_next_low_latency_combine_buffer(handle)
        next_buffer = time.perf_counter() - start
        for j, n in enumerate(count.tolist()):
            target[j, :n] = recv_x[j, :n]
        dist.barrier()
        start = time.perf_counter()
        buf.low_latency_combine(torch.empty(0), idx, w, handle, zero_copy=True)
        combine = time.perf_counter() - start
        if i >= warmup:
            rows["dispatch_total"].append(dispatch)
            rows["combine_total"].append(combine)
            rows["next_buffer"].append(next_buffer)
    for phase in ("dispatch", "combine"):
        inside = core_times[f"ll_{phase}"][-iterations:]
        rows[f"{phase}_binding"] = inside
        rows[f"{phase}_outside_binding"] = [t - b for t, b in zip(rows[f"{phase}_total"], inside)]
    results.put((rank, {k: round(statistics.median(v) * 1e3, 4) for k, v in rows.items()}))
    dist.barrier()
    dist.destroy_process_group()


def run_once(args: argparse.Namespace) -> Dict[str, Any]:
    import torch
    import torch.multiprocessing as mp

    import moerl
    case = dict(seed=1, tokens=args.tokens, hidden=args.hidden, experts=args.experts, topk=args.topk,
                dtype=torch.bfloat16, routing=args.routing)
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        results = ctx.SimpleQueue()
        procs = [ctx.Process(target=rank_main, args=(r, args.ranks, os.path.join(tmp, "init"), case, args.iterations,
                                                     args.warmup, results, args.in_dispatch_buffer))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit("a rank failed")
        per_rank = dict(results.get() for _ in procs)
    return dict(package=os.path.dirname(os.path.dirname(os.path.abspath(moerl.__file__))),
                provenance=moerl.provenance(), load_average=os.getloadavg(),
                ms_p50_per_rank=[per_rank[r] for r in range(args.ranks)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", help="comma-separated build/python directories, timed in alternation")
    ap.add_argument("--pairs", type=int, default=3, help="runs of each package (with --packages)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--routing", choices=["uniform", "zipf"], default="zipf")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--in-dispatch-buffer", action="store_true",
                    help="write the tokens into get_low_latency_dispatch_buffer (untimed) and dispatch from there "
                         "(no copy of x); a package entry ending in '+buffer' (--packages) sets it for that entry")
    ap.add_argument("--json", help="write the results here (else print them)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    if not args.packages:
        print(json.dumps(run_once(args)))
        return
    from ep_vs_all_to_all import uptime
    runs = []
    load_before, uptime_before = os.getloadavg(), uptime()
    for pair in range(args.pairs):
        for entry in args.packages.split(","):
            package = entry[:-len("+buffer")] if entry.endswith("+buffer") else entry
            env = dict(os.environ, PYTHONPATH=os.path.abspath(package))
            cmd = [sys.executable, os.path.abspath(__file__), "--ranks", str(args.ranks), "--tokens", str(args.tokens),
                   "--hidden", str(args.hidden), "--experts", str(args.experts), "--topk", str(args.topk),
                   "--routing", args.routing, "--iterations", str(args.iterations), "--warmup", str(args.warmup)]
            if package != entry or args.in_dispatch_buffer:
                cmd.append("--in-dispatch-buffer")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if out.returncode:
                raise SystemExit(f"{package}: {out.stderr[-2000:]}")
            run = json.loads(out.stdout.strip().splitlines()[-1])
            run["pair"] = pair + 1
            run["in_dispatch_buffer"] = "--in-dispatch-buffer" in cmd
            runs.append(run)
            slowest = {k: max(r[k] for r in run["ms_p50_per_rank"]) for k in run["ms_p50_per_rank"][0]}
            print(f"pair {pair + 1} {entry}: " + ", ".join(f"{k} {v:.3f}" for k, v in slowest.items()))
    result = dict(
        benchmark="python_ep_ll_call_overhead",
        definition=("per rank, the p50 over iterations (ms) of: dispatch_total / combine_total (the moerl.ep call "
                    "from Python), *_binding (the EpCore call inside it: the exchange), *_outside_binding (total "
                    "minus binding, per iteration: what the Python side adds), next_buffer "
                    "(get_next_low_latency_combine_buffer); ep_vs_all_to_all.py's zero-copy loop"),
        command=" ".join([os.path.basename(sys.executable)] + sys.argv),
        shape=dict(ranks=args.ranks, tokens=args.tokens, hidden=args.hidden, experts=args.experts, topk=args.topk,
                   dtype="bf16", routing=args.routing),
        iterations=args.iterations, warmup=args.warmup, cpus=os.cpu_count(),
        host_load_average=dict(before=load_before, after=os.getloadavg()),
        uptime=dict(before=uptime_before, after=uptime()), runs=runs)
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
