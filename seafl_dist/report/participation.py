"""Who got a say in the model: each device's jobs, speed and share of the aggregation weight, from the trace.

    rows = run_participation(read_events(run_dir / "events.jsonl"), flatten(read_config(run_dir)))

Reads only a run's ``events.jsonl`` and ``config.yaml`` (``devices.num``, ``algorithm.name``, ``algorithm.theta``),
so run dirs of every earlier version have it too. One row per device 0..N−1 (:data:`COLUMNS`); a device that never
started a job has zeros, and blanks where there is nothing to average:

- ``jobs_started``: its start events. Each ends as one of ``updates_accepted`` (in an aggregate event, not
  rejected), ``updates_rejected`` (in one, ``rejected``: non-finite, wrongly sized, or refused by the update guard),
  ``jobs_dropped`` (a drop event: device churn) or ``jobs_unaggregated`` (in flight, or finished and still in the
  buffer, when the run ended).
- ``mean_job_s`` (its speed): the mean of finish − start over its jobs that finished (their update reached the
  server; a SEAFL²-notified job after the epochs it trained). Dropped jobs and jobs still in flight are left out.
- ``speed_quartile``: 1 (fastest) to 4 (slowest), ``mean_job_s`` against the 25th, 50th and 75th percentiles of
  the run's devices that finished a job (numpy's linear interpolation; a device on a boundary is in the faster one).
- ``mean_staleness``: the mean S_k of its updates in aggregate events, rejected ones included (as summary.json's).
- ``weight``: its summed recorded ``weight`` (0 for a rejected update); ``weight_share``: ``weight`` over the run's
  summed ``weight``, so the shares add up to 1 over the devices.
- ``coefficient``: the sum, over its accepted updates, of the coefficient of w_k in w_{t+1} that the rule applied
  (:func:`coefficient`); ``mean_coefficient``: that per accepted update. Blank for a rule of one's own.
- **Withheld weights.** An accepted update whose entry has no ``weight`` key (SEAFL's and SEAFL²'s under DP without
  ``privacy.diagnostics``: they read the update, docs/privacy.md) was given a weight the trace does not say: its
  device's ``weight``, ``coefficient`` and ``mean_coefficient`` are blank, not 0, and so is every device's
  ``weight_share`` in that run (the total is unknown). A ``weight`` of null (a non-finite one) still counts as 0.
- ``dp_sgd_epsilon``: under ``train.dp_sgd``, the device's record-level ε over its arrived jobs, as the run's
  summary.json says it (privacy/record_accountant.py; 0 for a device none of whose uploads arrived); blank for a
  run without DP-SGD, or one whose summary.json predates it.

The recorded weights are not normalised alike (algo/): SEAFL records p_k before ϑ (Eq. 8 multiplies by ϑ),
FedBuff η_g·c_k/|B| (the coefficient on Δ_k = w_k − w_{t_k}; CA²FL η_g/K, its coefficient in this aggregation, not
the cache's reuse of it in later ones), FedAsync a_k·Π_{j after k}(1 − a_j) (a with one
update), FedAvg n_k/Σn. For each built-in rule the coefficient is the recorded weight times a constant of the run,
so the weight shares are the coefficients' shares too.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

COLUMNS = ["label", "point", "run", "seed", "algorithm", "device", "n_samples", "jobs_started", "updates_accepted",
           "updates_rejected", "jobs_dropped", "jobs_unaggregated", "mean_job_s", "speed_quartile", "mean_staleness",
           "weight", "weight_share", "coefficient", "mean_coefficient", "dp_sgd_epsilon"]
QUARTILES = (1, 2, 3, 4)
RECORDED_AS_APPLIED = ("fedbuff", "fedasync", "fedavg", "ca2fl", "fadas", "asyncsgd", "port",
                       "fedstaleweight")  # the recorded weight is w_k's coefficient in w_{t+1}


def theta_of(config: dict) -> float:
    """SEAFL's ϑ from a run's flattened config; the default where config.yaml lacks it."""
    if config.get("algorithm.theta") is not None:
        return float(config["algorithm.theta"])
    from seafl_dist.settings import AlgorithmConfig
    return float(AlgorithmConfig().theta)


def coefficient(algorithm: str, weight: float, theta: float) -> float | None:
    """The coefficient of w_k in w_{t+1} for an accepted update the trace records with ``weight``: ϑ·p_k for SEAFL
    and SEAFL² (w_{t+1} = (1 − ϑ)w_t + ϑ Σ p_k w_k), the recorded weight for FedBuff, FedAsync and FedAvg; None for
    a rule of one's own (what it records is its own business)."""
    if algorithm in ("seafl", "seafl2"):
        return theta * weight
    if algorithm in RECORDED_AS_APPLIED:
        return weight
    return None


def dp_sgd_epsilon(summary: dict | None) -> list | None:
    """Each device's ε of a DP-SGD run's summary.json (``dp_sgd.epsilon.by_device``), else None."""
    return (((summary or {}).get("dp_sgd") or {}).get("epsilon") or {}).get("by_device")


def _mean(values: list) -> float | None:
    return statistics.fmean(values) if values else None


def run_participation(events: list[dict], config: dict, epsilon: list | None = None) -> list[dict]:
    """One row per device (:data:`COLUMNS` from ``device`` on) of one run's trace; ``config`` is dotted keys;
    ``epsilon``: summary.json's ``dp_sgd.epsilon.by_device`` of a DP-SGD run (its ``dp_sgd_epsilon``), else None."""
    algorithm, theta = str(config.get("algorithm.name")), theta_of(config)
    known = coefficient(algorithm, 1.0, theta) is not None  # a rule of one's own: no coefficient
    started, durations, staleness = defaultdict(int), defaultdict(list), defaultdict(list)
    counts = defaultdict(lambda: defaultdict(int))
    weight, coef, n_samples = defaultdict(float), defaultdict(float), {}
    withheld = set()  # devices with an accepted update whose weight the trace withholds (module doc)
    begun = {}  # job -> start time
    for e in events:
        kind = e.get("event")
        if kind == "start":
            started[e["device"]] += 1
            begun[e["job"]] = e["time"]
        elif kind == "finish" and e["job"] in begun:
            durations[e["device"]].append(e["time"] - begun[e["job"]])
        elif kind == "drop":
            counts[e["device"]]["jobs_dropped"] += 1
        elif kind == "aggregate":
            for u in e["updates"]:
                k = u["device"]
                n_samples[k] = u.get("n_samples")
                staleness[k].append(u["staleness"])
                if u.get("rejected"):
                    counts[k]["updates_rejected"] += 1
                    continue
                counts[k]["updates_accepted"] += 1
                if "weight" not in u:  # withheld (SEAFL's under DP), not 0
                    withheld.add(k)
                    continue
                w = float(u.get("weight") or 0.0)  # a non-finite weight is written as null
                weight[k] += w
                if known:
                    coef[k] += coefficient(algorithm, w, theta)
    total = sum(weight.values())
    devices = set(started) | set(staleness)
    rows = []
    for k in range(max(int(config.get("devices.num") or 0), 1 + max(devices, default=-1))):
        ok = counts[k]["updates_accepted"]
        done = ok + counts[k]["updates_rejected"] + counts[k]["jobs_dropped"]
        said = known and k not in withheld  # a coefficient the trace gives
        rows.append({"algorithm": algorithm, "device": k, "n_samples": n_samples.get(k), "jobs_started": started[k],
                     "updates_accepted": ok, "updates_rejected": counts[k]["updates_rejected"],
                     "jobs_dropped": counts[k]["jobs_dropped"], "jobs_unaggregated": started[k] - done,
                     "mean_job_s": _mean(durations[k]), "speed_quartile": None, "mean_staleness": _mean(staleness[k]),
                     "weight": None if k in withheld else weight[k],
                     "weight_share": weight[k] / total if total > 0 and not withheld else None,
                     "coefficient": coef[k] if said else None,
                     "mean_coefficient": coef[k] / ok if said and ok else None,
                     "dp_sgd_epsilon": epsilon[k] if epsilon is not None and k < len(epsilon) else None})
    bounds = quartile_bounds(rows)
    for r in rows:
        if r["mean_job_s"] is not None:
            r["speed_quartile"] = 1 + sum(r["mean_job_s"] > b for b in bounds)
    return rows


def quartile_bounds(rows: list[dict]) -> list[float]:
    """The 25th, 50th and 75th percentiles of the devices' mean job durations ([] when none finished a job)."""
    speeds = [r["mean_job_s"] for r in rows if r["mean_job_s"] is not None]
    return [float(b) for b in np.quantile(speeds, [0.25, 0.5, 0.75])] if speeds else []


def run_quartiles(rows: list[dict]) -> list[dict] | None:
    """Per speed quartile of one run: its devices, summed weight share, mean share per device and its range of
    mean job durations (from the fastest device or the lower boundary to the upper boundary or the slowest).
    None when no device finished a job or the run recorded no weight."""
    speeds = [r["mean_job_s"] for r in rows if r["mean_job_s"] is not None]
    if not speeds or any(r["weight_share"] is None for r in rows):
        return None
    edges = [min(speeds), *quartile_bounds(rows), max(speeds)]
    out = []
    for q in QUARTILES:
        mine = [r for r in rows if r["speed_quartile"] == q]
        share = sum(r["weight_share"] for r in mine)
        out.append({"quartile": q, "devices": len(mine), "share": share,
                    "device_share": share / len(mine) if mine else None, "job_s_from": edges[q - 1],
                    "job_s_to": edges[q]})
    return out


def arm_quartiles(per_run: list[list[dict] | None]) -> list[dict]:
    """An arm's quartiles, mean over its seeds (those with quartiles): the share's mean, std, min and max, the
    devices, the mean share per device and the boundaries as means. Device ids are not the same devices across
    seeds (the partition and the idle times follow the seed), so seeds are matched by speed quartile, not by id."""
    runs = [qs for qs in per_run if qs is not None]
    out = []
    for i, q in enumerate(QUARTILES):
        mine = [qs[i] for qs in runs]
        shares = [m["share"] for m in mine]
        per_device = [m["device_share"] for m in mine if m["device_share"] is not None]
        out.append({"quartile": q, "seeds": len(mine), "devices": _mean([m["devices"] for m in mine]),
                    "share_mean": _mean(shares), "share_std": statistics.stdev(shares) if len(shares) > 1 else 0.0,
                    "share_min": min(shares, default=None), "share_max": max(shares, default=None),
                    "device_share_mean": _mean(per_device), "job_s_from": _mean([m["job_s_from"] for m in mine]),
                    "job_s_to": _mean([m["job_s_to"] for m in mine])})
    return out
