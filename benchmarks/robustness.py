"""Does a config end well whatever the CPU's rounding? Seeds x oneDNN ISAs x thread counts, one run per cell.

    python benchmarks/robustness.py configs/quickstart.yaml configs/digits/*.yaml --out benchmarks/results/robustness
    python benchmarks/robustness.py configs/quickstart.yaml --seeds 0-3 --isa default,AVX2 --threads 1 \
        --set train.lr=0.02 --tag lr0.02                     # one candidate recipe, a quick look

Each config (a run config, or a sweep file: every arm of it) runs at every seed (``run.seed``), under
every ``ONEDNN_MAX_CPU_ISA`` setting (``default`` leaves it unset: the machine's best kernels; ``AVX2``
and ``AVX512_CORE`` make oneDNN use another machine's kernels, so other rounding, on this one; an ISA
the CPU lacks is skipped) and every ``runtime.threads``. Arms that two sweeps share (the same resolved
config) run once. A cell passes when the run did not diverge and its final accuracy is within
``--slack`` (0.02) of its best; the table gives per arm the cells, the failures, the final accuracy's
range, the worst final − best, the time to each target's range, and how many distinct event traces
the cells of one seed made (1: the ISA and thread settings did not change a bit), and the largest update
norm against its buffer's median in any cell (how near a run came to a local job that blew up: the
update guard's measure, algo/guard.py).

Cells run in worker processes (``--jobs`` at a time, each with one ISA in its environment, several
cells in a row), each run in a temporary directory; results are appended to OUT/cells.jsonl as they
come, so rerunning the command goes on where it stopped. OUT/table.md is the table; the CPU is named
in it. Not a test: a matrix of a config takes minutes to hours on two cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISAS = ("default", "AVX2", "AVX512_CORE")
CPU_FLAG = {"AVX2": "avx2", "AVX512_CORE": "avx512f"}  # a setting above what the CPU has means nothing


def cpu_model() -> str:
    """The CPU's name and the vector extensions that decide oneDNN's kernels."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
        flags = set(re.search(r"flags\s*:\s*(.*)", text).group(1).split())
    except (OSError, AttributeError):
        pass
    have = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile") if f in flags]
    return f"{name} ({', '.join(have) or 'no AVX2'}; {os.cpu_count()} CPUs)", flags


def docs_modules(folder: Path) -> list[str]:
    """The modules the README and docs/ write (a ```python block whose first line is ``# name.py``), as files
    in ``folder``: the models and rules of one's own that their examples run."""
    names = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python[^\n]*\n(.*?)```", page.read_text(), flags=re.S):
            m = re.match(r"#\s*([A-Za-z_]\w*)\.py\s*$", block.splitlines()[0]) if block.strip() else None
            if m:
                (folder / f"{m.group(1)}.py").write_text(block)
                names.append(m.group(1))
    return names


def parse_ints(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def arms(paths: list[str], sets: list[str], tag: str | None, modules: Path | None = None) -> dict:
    """arm key -> {"config": resolved config dict without its name, "names": ["file:label", ...]}.
    Two arms with the same resolved config (the sweeps' shared points) are one arm. An arm whose model, rule
    or data is one of ``modules``' files has that file's digest in its key: a module edited is a new arm."""
    import yaml

    from seafl_dist.experiments import load_sweep
    from seafl_dist.settings import dump_config
    out: dict = {}
    for path in paths:
        sweep = load_sweep(path, seeds=[0], overrides=sets)
        for run in sweep.expand():
            tree = yaml.safe_load(dump_config(run.config))  # as config.yaml holds it: keys at their defaults
            # that later code adds are left out, so an arm keeps its key (and its cells) across such changes
            for k in ("name",):
                tree.pop(k, None)
            tree.get("logging", {}).pop("wandb", None)
            tree["run"].pop("seed")
            used = {str(v).split(":")[0] for v in (tree["model"]["name"], tree["algorithm"]["name"], tree["data"]["name"])
                    if ":" in str(v)}
            digests = {m: hashlib.sha256((modules / f"{m}.py").read_bytes()).hexdigest()[:12] for m in sorted(used)
                       if modules is not None and (modules / f"{m}.py").exists()}
            key = json.dumps({**tree, **({"docs_modules": digests} if digests else {})}, sort_keys=True)
            name = f"{Path(path).stem}:{run.label}" + (f" [{tag}]" if tag else "")
            out.setdefault(key, {"config": tree, "names": []})["names"].append(name)
    return out


def cell_id(arm: str, seed: int, isa: str, threads: int) -> str:
    return hashlib.sha256(f"{arm}|{seed}|{isa}|{threads}".encode()).hexdigest()[:16]


def watch_norms(largest: list) -> None:
    """Record, per run, the largest update norm against its buffer's median (the history's where the buffer
    holds fewer than the guard's PEERS): how near a run came to a job that blew up. Reads what the server
    measures anyway (runtime/watch.py); changes no bit of the run."""
    import statistics

    from seafl_dist.algo.guard import PEERS
    from seafl_dist.runtime.watch import Watch
    aggregated = Watch.aggregated

    def recording(self, ev, norms):
        kept = [n for n in (norms or []) if n is not None]
        ref = statistics.median(kept) if len(kept) >= PEERS else self.history.reference()
        if kept:
            largest[1] = max(largest[1], max(kept))
        if kept and ref:
            largest[0] = max(largest[0], max(kept) / ref)
        aggregated(self, ev, norms)

    Watch.aggregated = recording


def worker(todo_file: Path, results: Path) -> None:
    """Run the cells listed in ``todo_file`` (all of one ISA, set in this process's environment)."""
    import seafl_dist
    cells = json.loads(todo_file.read_text())
    largest = [0.0, 0.0]  # the largest update norm against its reference, and the largest norm
    watch_norms(largest)
    for c in cells:
        largest[:] = [0.0, 0.0]
        cfg = json.loads(c["arm"])
        cfg.pop("docs_modules", None)
        cfg["run"]["seed"] = c["seed"]
        cfg.setdefault("runtime", {})["threads"] = c["threads"]
        cfg["name"] = "robustness"
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            try:
                s = seafl_dist.run(cfg, out=Path(tmp) / "run")
                row = {"status": s["status"], "final": s["final"], "best": s["best"], "mode": s["target_mode"],
                       "metric": s["target_metric"], "largest_norm": largest[1],
                       "diverged_at": s["diverged_at"], "time_to_target": s["time_to_target"],
                       "rejected_updates": s["rejected_updates"], "aggregations": s["aggregations"],
                       "events_sha256": s["files"]["events.jsonl"]["sha256"], "largest_norm_ratio": largest[0]}
            except Exception as err:  # a failed run is a failed cell, recorded, not the end of the matrix
                row = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
            row.update(id=c["id"], seed=c["seed"], isa=c["isa"], threads=c["threads"], arm_hash=c["arm_hash"],
                       real_s=round(time.perf_counter() - t0, 2))
        with open(results, "a") as f:
            f.write(json.dumps(row) + "\n")


def run_matrix(out: Path, todo: list[dict], jobs: int, chunk: int) -> None:
    groups = defaultdict(list)  # one arm's cells of one ISA; arms in order, so each arm's table row is done early
    for c in todo:
        groups[(c["arm_hash"], c["isa"])].append(c)
    batches = [(isa, cs[i:i + chunk]) for (_, isa), cs in groups.items() for i in range(0, len(cs), chunk)]
    running: list = []
    done, t0 = 0, time.perf_counter()
    while batches or running:
        while batches and len(running) < jobs:
            isa, cs = batches.pop(0)
            f = out / f"todo-{len(batches)}-{os.getpid()}.json"
            f.write_text(json.dumps(cs))
            env = dict(os.environ)
            env.pop("ONEDNN_MAX_CPU_ISA", None)
            if isa != "default":
                env["ONEDNN_MAX_CPU_ISA"] = isa
            log = open(out / "workers.log", "a")
            p = subprocess.Popen([sys.executable, __file__, "--worker", str(f), str(out / "cells.jsonl")],
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
            running.append((p, f, len(cs), log))
        time.sleep(1)
        for item in [r for r in running if r[0].poll() is not None]:
            p, f, n, log = item
            running.remove(item)
            log.close()
            f.unlink()
            done += n
            rate = (time.perf_counter() - t0) / done
            print(f"robustness: {done}/{len(todo)} cells, {rate:.1f} s a cell, "
                  f"about {rate * (len(todo) - done) / 60:.0f} min left", flush=True)


def read_results(out: Path) -> dict:
    path = out / "cells.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {r["id"]: r for r in rows}


def fmt_range(values: list[float], digits: int = 3) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if lo == hi else f"{lo:.{digits}f}–{hi:.{digits}f}"


def ends_well(r: dict, slack: float) -> bool:
    """Completed, not diverged, and the final value near the best: within ``slack`` below it for a metric to
    maximise (accuracy), within ``slack`` of it relatively above it for one to minimise (a loss)."""
    if r["status"] != "completed" or r.get("diverged_at"):
        return False
    if r.get("mode") == "min":
        return r["final"] <= r["best"] * (1 + slack)
    return r["final"] >= r["best"] - slack


def same_as_default(rows: list[dict]) -> str:
    """Per ISA setting other than the default: of its cells with a default cell at the same seed and thread
    count, how many wrote the default's very trace (the setting changed no kernel of this run on this CPU)."""
    default = {(r["seed"], r["threads"]): r.get("events_sha256") for r in rows if r["isa"] == "default"}
    out = []
    for isa in sorted({r["isa"] for r in rows} - {"default"}):
        pairs = [r.get("events_sha256") == default[(r["seed"], r["threads"])] for r in rows
                 if r["isa"] == isa and (r["seed"], r["threads"]) in default]
        if pairs:
            out.append(f"{isa} {sum(pairs)}/{len(pairs)}")
    return ", ".join(out) or "–"


def table(all_arms: dict, results: dict, slack: float, cpu: str) -> tuple[str, int]:
    """One row per arm over every cell ``results`` holds of it (cells of several invocations included)."""
    lines = [f"CPU: {cpu}. A cell fails if the run diverged, did not complete, or ended more than {slack} below "
             f"its best accuracy (a loss: more than {slack:.0%} above its best).", "",
             "| arm | cells | failed | final value of the target metric | worst final − best (a loss: relative) | "
             "time to targets (virtual s) | largest update / median | ISA settings, threads | traces per seed | "
             "same trace as the default ISA |", "|---|---|---|---|---|---|---|---|---|---|"]
    failures = 0
    for key, arm in all_arms.items():
        arm_hash = hashlib.sha256(key.encode()).hexdigest()[:12]
        rows = [r for r in results.values() if r["arm_hash"] == arm_hash]
        names = "<br>".join(arm["names"])
        if not rows:
            lines.append(f"| {names} | 0 | – | – | – | – | – | – | – | – |")
            continue
        bad = [r for r in rows if not ends_well(r, slack)]
        failures += len(bad)
        finals = [r["final"] for r in rows if "final" in r]
        gaps = [(r["best"] - r["final"]) / r["best"] if r.get("mode") == "min" else r["final"] - r["best"]
                for r in rows if "final" in r]
        targets = sorted({t for r in rows for t in (r.get("time_to_target") or {})}, key=float)
        ttt = "; ".join(f"{float(t):g}: " + fmt_range([r["time_to_target"][t] for r in rows
                                                       if r.get("time_to_target", {}).get(t) is not None], 0)
                        + (f" ({sum(1 for r in rows if r.get('time_to_target', {}).get(t) is None)} never)"
                           if any(r.get("time_to_target", {}).get(t) is None for r in rows) else "")
                        for t in targets)
        per_seed = defaultdict(set)
        for r in rows:
            per_seed[r["seed"]].add(r.get("events_sha256"))
        traces = fmt_range([len(v) for v in per_seed.values()], 0)
        ratios = [r["largest_norm_ratio"] for r in rows if r.get("largest_norm_ratio")]
        norms = [r["largest_norm"] for r in rows if r.get("largest_norm")]
        ratio = f"{max(ratios):.3g} (norm {max(norms):.3g})" if ratios and norms else "–"
        isas = [i for i in ISAS if any(r["isa"] == i for r in rows)]
        threads = sorted({r["threads"] for r in rows})
        settings = f"{', '.join(isas)} × {', '.join(map(str, threads))}"
        lines.append(f"| {names} | {len(rows)} | {len(bad)} | {fmt_range(finals)} | {min(gaps):+.3f} | {ttt} | "
                     f"{ratio} | {settings} | {traces} | {same_as_default(rows)} |")
    return "\n".join(lines) + "\n", failures


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", help="run configs or sweep files")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--isa", default=",".join(ISAS), help="ONEDNN_MAX_CPU_ISA settings; 'default' leaves it unset")
    ap.add_argument("--threads", default="1,2", help="runtime.threads settings")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every run")
    ap.add_argument("--tag", help="a name for the --set overrides in the table")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/robustness"))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes at a time (each runs one cell at a time)")
    ap.add_argument("--chunk", type=int, default=10, help="cells a worker runs in a row")
    ap.add_argument("--slack", type=float, default=0.02, help="a max metric's final may be this far below its "
                    "best; a min metric's this fraction above it")
    ap.add_argument("--docs-modules", action="store_true",
                    help="write the modules the README and docs/ define to OUT/modules and import from there")
    args = ap.parse_args()
    folder = None
    if args.docs_modules:
        folder = (args.out / "modules").resolve()
        folder.mkdir(parents=True, exist_ok=True)
        print(f"robustness: the docs' modules {', '.join(docs_modules(folder))} in {folder}", flush=True)
        sys.path.insert(0, str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    cpu, flags = cpu_model()
    isas = [i for i in args.isa.split(",") if i == "default" or CPU_FLAG.get(i, "").lower() in flags or not flags]
    for skipped in set(args.isa.split(",")) - set(isas):
        print(f"robustness: this CPU lacks {skipped}; its cells are skipped", file=sys.stderr)
    all_arms = arms(args.configs, args.set, args.tag, folder)
    cells = [{"arm": key, "arm_hash": hashlib.sha256(key.encode()).hexdigest()[:12], "seed": s, "isa": isa,
              "threads": t, "id": cell_id(key, s, isa, t)}
             for key in all_arms for s in parse_ints(args.seeds) for isa in isas for t in parse_ints(args.threads)]
    args.out.mkdir(parents=True, exist_ok=True)
    done = read_results(args.out)
    todo = [c for c in cells if c["id"] not in done]
    print(f"robustness: {len(all_arms)} arms, {len(cells)} cells, {len(todo)} to run; CPU: {cpu}", flush=True)
    run_matrix(args.out, todo, args.jobs, args.chunk)
    text, failures = table(all_arms, read_results(args.out), args.slack, cpu)
    (args.out / "table.md").write_text(text)
    print(text)
    print(f"robustness: {failures} failed cells")


if __name__ == "__main__":
    main()
