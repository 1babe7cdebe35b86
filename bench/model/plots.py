"""The model's three figures (PNG, matplotlib's Agg backend: no display needed)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"top_k": "experts per token (top-k of 256: sparsity 256/k)",
          "tokens_per_gpu": "decode tokens per GPU per step",
          "env_s": "environment execution per sample (s)",
          "generation_tokens": "generation length (tokens)"}
SIZE_NAMES = {"seed": "48 p5en (16 + 32)", "large": "1,024 H200 (43 + 85 p5en)"}


def throughput(sweeps, published_gain, path):
    params = list(sweeps)
    fig, axes = plt.subplots(2, len(params), figsize=(4.2 * len(params), 7.5))
    for col, param in enumerate(params):
        rows = sweeps[param]
        top, bottom = axes[0][col], axes[1][col]
        for size, color in (("seed", "tab:blue"), ("large", "tab:orange")):
            pts = [r for r in rows if r["size"] == size]
            xs = [r[param] for r in pts]
            top.plot(xs, [r["rollout_specialised_samples_per_s"] for r in pts], "-o", color=color,
                     label=f"{SIZE_NAMES[size]}, specialised", markersize=3)
            top.plot(xs, [r["rollout_generic_samples_per_s"] for r in pts], "--o", color=color,
                     label=f"{SIZE_NAMES[size]}, generic", markersize=3, alpha=0.7)
            bottom.plot(xs, [100 * r["rollout_gain"] for r in pts], "-o", color=color,
                        label=f"{SIZE_NAMES[size]}, rollout side", markersize=3)
            bottom.plot(xs, [100 * r["end_to_end_gain"] for r in pts], ":s", color=color,
                        label=f"{SIZE_NAMES[size]}, end to end", markersize=3)
        bottom.axhline(100 * published_gain, color="grey", linewidth=0.8)
        bottom.text(xs[0], 100 * published_gain + 1, f"+{100 * published_gain:.0f}% published",
                    fontsize=7, color="grey")
        for ax in (top, bottom):
            if param in ("tokens_per_gpu", "generation_tokens"):
                ax.set_xscale("log", base=2)
            elif param == "env_s":
                ax.set_xscale("symlog", linthresh=1)
                ax.set_xlim(left=0)
            ax.grid(alpha=0.3)
        top.set_ylabel("rollout samples/s")
        bottom.set_ylabel("specialised over generic (%)")
        bottom.set_xlabel(LABELS[param])
        top.set_title(LABELS[param], fontsize=9)
    axes[0][0].legend(fontsize=6)
    axes[1][0].legend(fontsize=6)
    fig.suptitle("Rollout throughput: specialised EP layer vs generic all-to-all "
                 "(simulated, p5en, DeepSeek-V3 shape)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ettr(curves, path):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, data in curves.items():
        rows = data["rows"]
        xs = [100 * r["rate_per_hour"] for r in rows]
        ax.plot(xs, [r["ettr_mean"] for r in rows], "-o", markersize=3, label=label)
        ax.fill_between(xs, [r["ettr_min"] for r in rows], [r["ettr_max"] for r in rows], alpha=0.15)
    ax.axvline(5, color="grey", linewidth=0.8)
    ax.set_xlabel("Spot interruptions per instance-hour (%)")
    ax.set_ylabel("ETTR (time without / with interruptions)")
    ax.set_title("Effective training time ratio, 48 p5en (simulated; band: min-max over seeds)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def weights(data, path):
    rows = data["rows"]
    params = sorted({r["params"] for r in rows})
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(params):
        pts = [r for r in rows if r["params"] == p]
        xs = [r["rollout_instances"] for r in pts]
        color = cmap(i / max(1, len(params) - 1))
        ax.plot(xs, [r["fanout_s"] for r in pts], "-o", color=color, markersize=3,
                label=f"{p / 1e9:g}B fan-out")
        ax.plot(xs, [r["store_s"] for r in pts], "--s", color=color, markersize=3,
                label=f"{p / 1e9:g}B S3 pull")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rollout instances (p5en)")
    ax.set_ylabel("seconds until every instance holds the version")
    ax.set_title("Weight redistribution: fan-out tree over EFA vs every instance pulling from S3",
                 fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
