"""``clipping_bound.png``: central DP's clipping bound C_t against virtual time, for runs with adaptive clipping.

Under ``privacy.adaptive_clip`` (privacy/adaptive.py) the server moves C after every aggregation towards the target
quantile of the update norms; each aggregate event of events.jsonl records the C_t it clipped at
(``privacy.clipping_bound``); a DP run with a fixed C clipped every aggregation at its config's
``privacy.clipping_bound``. This figure draws C_t of every run whose C moved, one colour and marker per grid point
(report/figures.py ``arms``), each seed a line, on a logarithmic C axis (a bound started ten times too small or too
large is the case adaptive clipping is for). The runs with a fixed C of the same report are drawn too, as flat
dashed lines, so a reader sees where the adaptive bound settles against the fixed ones.

:func:`write_clipping_bound` writes ``clipping_bound.{png,pdf,csv}`` (one CSV row per aggregation and run: the point,
the run, the seed, the version, its virtual time and C_t) when a run's C moved; nothing otherwise.
"""
from __future__ import annotations

from pathlib import Path

from matplotlib.lines import Line2D

from seafl_dist.report.figures import arms, new_figure, paper_style, save, title_of, wrap
from seafl_dist.report.sinks import read_events
from seafl_dist.settings.privacy import PrivacyConfig


def bound_rows(groups) -> list[dict]:
    """Every aggregation's C_t of the groups' DP runs: point, run, seed, version, time, clipping_bound."""
    rows = []
    for g in groups:
        for r in g.runs:
            path = r.dir / "events.jsonl"
            if not path.exists():
                continue
            fixed = r.config.get("privacy.clipping_bound", PrivacyConfig().clipping_bound)  # config.yaml omits defaults
            for ev in read_events(path):
                if ev.get("event") != "aggregate" or not ev.get("privacy"):
                    continue  # no DP: no bound
                c = ev["privacy"].get("clipping_bound", fixed)  # adaptive runs record C_t; a fixed C is the config's
                if c is not None:
                    rows.append({"point": g.label, "run": r.name, "seed": r.seed, "version": ev["version"],
                                 "time": ev["time"], "clipping_bound": c})
    return rows


def write_clipping_bound(groups, out: Path) -> dict:
    """``clipping_bound.{png,pdf,csv}`` ({} unless some run's C moved): {file name: path}."""
    rows = bound_rows(groups)
    by_run: dict = {}
    for row in rows:
        by_run.setdefault(row["run"], []).append(row)
    if not any(len({x["clipping_bound"] for x in rs}) > 1 for rs in by_run.values()):
        return {}
    labels, looks = arms(groups)
    look = {g.label: (label, style) for g, label, style in zip(groups, labels, looks)}
    out = Path(out)
    plot_clipping_bound(by_run, look, title_of(groups, 70), out / "clipping_bound.png", rows)
    return {f"clipping_bound.{ext}": out / f"clipping_bound.{ext}" for ext in ("png", "pdf", "csv")}


def plot_clipping_bound(by_run: dict, look: dict, title: str, path: str | Path, rows: list[dict]):
    """The figure of :func:`write_clipping_bound` ({run: its rows}, {point: (label, style)}); returns the Figure."""
    with paper_style():
        fig = new_figure((6.4, 4.4))
        ax = fig.subplots()
        seen = {}
        for rs in by_run.values():
            label, style = look[rs[0]["point"]]
            moved = len({x["clipping_bound"] for x in rs}) > 1
            ax.plot([x["time"] for x in rs], [x["clipping_bound"] for x in rs], color=style["color"],
                    ls="-" if moved else "--", lw=1.1 if moved else 0.9, alpha=0.8, zorder=3 if moved else 2)
            seen.setdefault(label, (style["color"], moved))
        ax.set_yscale("log")
        ax.set_xlabel("virtual time (s)")
        ax.set_ylabel("clipping bound C_t (log scale)")
        ax.grid(alpha=0.3, which="both")
        handles = [Line2D([], [], color=color, ls="-" if moved else "--", label=wrap(label, 30))
                   for label, (color, moved) in seen.items()]
        fig.legend(handles=handles, loc="outside right center", frameon=False, fontsize=8)
        fig.suptitle(wrap(title, 80) + "\ncentral DP's clipping bound per aggregation (solid: adaptive, dashed: "
                     "fixed; each seed a line)", fontsize=9.5)
    save(fig, Path(path), rows)
    return fig
