"""``dp_sgd_tradeoff.png``: accuracy against the largest device ε, over a report's DP-SGD runs.

What record-level DP-SGD costs a rule: each DP-SGD run is a dot at (its largest device ε, summary.json's
``dp_sgd.epsilon.max``; its final accuracy, the last evaluation's), one colour per rule (summary.json's
``algorithm``). Each (rule, σ) pair's mean over its seeds is a larger marker, joined over σ by a line and labelled
with its σ. A rule's runs without DP-SGD in the same report are its reference: a dashed line at their mean final
accuracy. A rule's DP-SGD runs at σ = 0 (clipping without noise: ε infinite) are a dotted line at their mean, so that
what the clipping costs and what the noise costs can be told apart. The ε axis is logarithmic when the largest ε is
over 10 times the smallest. A run that charged no device (ε 0) is not drawn, and the title counts it; the CSV keeps
every run.

:func:`write_dp_sgd_tradeoff` writes ``dp_sgd_tradeoff.{png,pdf,csv}`` (one CSV row per run: the point, the run,
the seed, the rule, σ, the largest and median ε, the final and best accuracy) when the report holds a DP-SGD run;
nothing otherwise.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from seafl_dist.report.figures import new_figure, paper_style, save, title_of, wrap

CSV = ["point", "run", "seed", "algorithm", "noise_multiplier", "epsilon_max", "epsilon_p50", "final_accuracy",
       "best_accuracy"]
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
LOG_SPAN = 10.0


def tradeoff_rows(groups) -> tuple[list[dict], list[dict]]:
    """(DP-SGD runs' rows, runs' rows without DP-SGD) of the groups, each as :data:`CSV` says."""
    dp, plain = [], []
    for g in groups:
        for r in g.runs:
            s = r.summary
            if s.get("final_accuracy") is None:
                continue
            eps = ((s.get("dp_sgd") or {}).get("epsilon") or {})
            row = {"point": g.label, "run": r.name, "seed": r.seed, "algorithm": s.get("algorithm"),
                   "noise_multiplier": (s.get("dp_sgd") or {}).get("noise_multiplier"),
                   "epsilon_max": eps.get("max"), "epsilon_p50": (eps.get("quantiles") or {}).get("p50"),
                   "final_accuracy": s.get("final_accuracy"), "best_accuracy": s.get("best_accuracy")}
            (dp if s.get("dp_sgd") else plain).append(row)
    return dp, plain


def write_dp_sgd_tradeoff(groups, out: Path) -> dict:
    """``dp_sgd_tradeoff.{png,pdf,csv}`` of the groups' runs ({} without a DP-SGD run): {file name: path}."""
    dp, plain = tradeoff_rows(groups)
    if not dp:
        return {}
    out = Path(out)
    plot_dp_sgd_tradeoff(dp, plain, title_of(groups, 70), out / "dp_sgd_tradeoff.png")
    return {f"dp_sgd_tradeoff.{ext}": out / f"dp_sgd_tradeoff.{ext}" for ext in ("png", "pdf", "csv")}


def _drawn(row: dict) -> bool:
    e = row["epsilon_max"]
    return e is not None and math.isfinite(e) and e > 0


def _unnoised(row: dict) -> bool:
    """σ = 0: ε is infinite (summary.json writes it as null, JSON having no infinity)."""
    e = row["epsilon_max"]
    return row["noise_multiplier"] == 0 or (e is not None and math.isinf(e))


def plot_dp_sgd_tradeoff(dp: list[dict], plain: list[dict], title: str, path: str | Path):
    """The figure of :func:`write_dp_sgd_tradeoff`, saved as PNG and PDF with every row (DP-SGD runs first) as its
    CSV; returns the Figure."""
    rules = sorted({r["algorithm"] for r in dp}, key=str)
    color = {rule: COLORS[i % len(COLORS)] for i, rule in enumerate(rules)}
    drawn = [r for r in dp if _drawn(r)]
    eps = [r["epsilon_max"] for r in drawn]
    log = bool(eps) and max(eps) / min(eps) > LOG_SPAN
    with paper_style():
        fig = new_figure((6.4, 4.6))
        ax = fig.subplots()
        for rule in rules:
            mine = [r for r in drawn if r["algorithm"] == rule]
            ax.scatter([r["epsilon_max"] for r in mine], [r["final_accuracy"] for r in mine], s=18, alpha=0.55,
                       color=color[rule], edgecolor="none", zorder=3)
            sigmas = sorted({r["noise_multiplier"] for r in mine}, reverse=True)
            means = [(statistics.mean(r["epsilon_max"] for r in mine if r["noise_multiplier"] == z),
                      statistics.mean(r["final_accuracy"] for r in mine if r["noise_multiplier"] == z), z)
                     for z in sigmas]
            ax.plot([m[0] for m in means], [m[1] for m in means], "-o", color=color[rule], ms=6, mec="black",
                    mew=0.5, lw=1.2, zorder=4)
            for x, y, z in means:
                ax.annotate(f"σ {z:g}", (x, y), textcoords="offset points", xytext=(5, -11), fontsize=8,
                            color=color[rule])
            ref = [r["final_accuracy"] for r in plain if r["algorithm"] == rule]
            if ref:
                ax.axhline(statistics.mean(ref), ls="--", lw=1.0, color=color[rule], zorder=2)
            clip_only = [r["final_accuracy"] for r in dp if r["algorithm"] == rule and _unnoised(r)]
            if clip_only:
                ax.axhline(statistics.mean(clip_only), ls=":", lw=1.2, color=color[rule], zorder=2)
        ax.margins(x=0.1)  # room for the σ labels at either end
        if log:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("the largest device ε (record level, over its arrived jobs)" + (", log scale" if log else ""))
        ax.set_ylabel("final accuracy")
        ax.grid(alpha=0.3)
        handles = [Line2D([], [], color=color[rule], marker="o", mec="black", mew=0.5, label=str(rule))
                   for rule in rules]
        handles += [Line2D([], [], color="0.4", ls="none", marker="o", alpha=0.55, mec="none", label="a run"),
                    Line2D([], [], color="0.4", ls="--", label="no DP-SGD (mean)")]
        if any(_unnoised(r) for r in dp):
            handles.append(Line2D([], [], color="0.4", ls=":", lw=1.2, label="σ 0: clipping only, ε ∞ (mean)"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), frameon=False)
        skipped = sum(not _drawn(r) and not _unnoised(r) for r in dp)
        fig.suptitle(wrap(title, 80) + "\naccuracy against the largest device ε under DP-SGD (σ: the mean of its "
                     "seeds)" + (f"; {skipped} run(s) with ε 0 not drawn" if skipped else ""), fontsize=9.5)
    save(fig, Path(path), dp + plain)
    return fig
