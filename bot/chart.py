"""Pictures (matplotlib, no display): a per-GPU stacked bar of the memory budget."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bot.core.budget import Budget  # noqa: E402
from bot.core.health import GpuSample  # noqa: E402

SEGMENTS = (  # label, colour
    ("held before load", "#9e9e9e"),
    ("weights", "#1f77b4"),
    ("draft", "#17becf"),
    ("hybrid state", "#9467bd"),
    ("speculative state", "#e377c2"),
    ("KV cache", "#2ca02c"),
    ("static reserve", "#ff7f0e"),
)


def budget_segments(budget: Budget, total_gib: float) -> list[tuple[str, float]]:
    """GiB per segment, bottom to top; what does not fit shows as a negative KV segment's absence."""
    held = max(0.0, total_gib - budget.pre_gib)
    draft = budget.draft_weights_gib if budget.era == "D" else 0.0
    kv = budget.kv_tokens * budget.kv_cell_bytes / (1 << 30)
    return [("held before load", held), ("weights", budget.weights_gib), ("draft", draft),
            ("hybrid state", budget.mamba_state_gib), ("speculative state", budget.spec_state_gib),
            ("KV cache", kv), ("static reserve", budget.slack_gib)]


def budget_png(budget: Budget, gpu_totals_gib: list[float], title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(2.2 + 1.2 * len(gpu_totals_gib), 4.8), dpi=110)
    colours = dict(SEGMENTS)
    for index, total in enumerate(gpu_totals_gib):
        bottom = 0.0
        for label, gib in budget_segments(budget, total):
            if gib <= 0:
                continue
            shown = "weights (measured)" if label == "weights" and budget.weights_source == "measured" else label
            ax.bar(index, gib, bottom=bottom, color=colours[label], label=shown if index == 0 else None,
                   edgecolor="white", linewidth=0.5)
            bottom += gib
        ax.plot([index - 0.45, index + 0.45], [total, total], color="black", linewidth=1.5)
        pool_top = (total - budget.pre_gib) + budget.pre_gib * budget.mem_fraction_static
        ax.plot([index - 0.45, index + 0.45], [pool_top, pool_top], color="red", linestyle="--", linewidth=1.2,
                label=f"mem_fraction_static {budget.mem_fraction_static:.3f}" if index == 0 else None)
        if bottom > total + 0.01:
            ax.annotate(f"over by {bottom - total:.1f} GiB", (index, total), ha="center", va="bottom",
                        color="red", fontsize=8)
    ax.set_xticks(range(len(gpu_totals_gib)), [f"GPU {i}" for i in range(len(gpu_totals_gib))])
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def health_png(samples: list[GpuSample], now: float, title: str) -> bytes:
    """Per GPU: memory used (% of total) and utilization over the last 24 h."""
    series: dict[tuple[str, int], list[GpuSample]] = {}
    for s in samples:
        if s.at >= now - 24 * 3600:
            series.setdefault((s.target, s.gpu), []).append(s)
    rows = max(1, len(series))
    fig, axes = plt.subplots(rows, 1, figsize=(8, 1.8 * rows + 0.8), dpi=100, sharex=True, squeeze=False)
    for ax, ((target, gpu), points) in zip(axes[:, 0], sorted(series.items()), strict=False):
        points.sort(key=lambda s: s.at)
        hours = [(s.at - now) / 3600 for s in points]
        memory = [100 * (s.memory_used_mib or 0) / s.memory_total_mib if s.memory_total_mib else 0 for s in points]
        util = [s.utilization_pct or 0 for s in points]
        ax.plot(hours, memory, label="memory %", color="#1f77b4")
        ax.plot(hours, util, label="utilization %", color="#ff7f0e")
        ax.set_ylim(0, 105)
        ax.set_ylabel(f"{target}\nGPU {gpu}", fontsize=7)
        ax.legend(fontsize=6, loc="upper left")
    axes[-1, 0].set_xlabel("hours before now")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
