"""The five behaviours issue 51's audit found untested, each pinned by arithmetic written here (docs/testing.md,
"Semantic mutants", records the slip each one kills):

- int8 takes a tensor's scale from its largest magnitude, a negative extreme included;
- SEAFL² with the delta-form server optimizer keeps ϑ in its pseudo-gradient;
- a device evaluation whose distribution holds NaN or ±inf (a device with no held-out row, a diverged device)
  reaches W&B (offline, real) without them, and the run goes on;
- groups of an integer or tuple sample key are named by ``str`` and ordered by name;
- ``data.partition_by`` with ``data.device_holdout > 0``: the held-out split reads the label key, not the group key.
"""
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seafl_dist.algo import BufferedUpdate, ServerOptimizer, aggregate
from seafl_dist.codecs.formats import Int8
from seafl_dist.data.labels import sample_groups
from seafl_dist.runtime.device_eval import held_out_split
from seafl_dist.settings import AlgorithmConfig, ConfigError
from seafl_dist.settings.server_opt import ServerOptConfig

T = torch.tensor


# ---- int8: the scale is max |v| / 127, whatever the sign of the extreme ----------------------------------------

def test_int8_scale_comes_from_a_negative_extreme():
    v = T([0.1, -1.0, 0.05, 0.2])
    data = Int8([4]).encode(v, 0)
    assert data[:4].view(torch.float32).item() == pytest.approx(1.0 / 127, rel=1e-7)
    # codes round(v · 127): 12.7 → 13, −127, 6.35 → 6, 25.4 → 25
    assert data[4:].view(torch.int8).tolist() == [13, -127, 6, 25]
    out = Int8([4]).decode(data)
    assert out[1].item() == pytest.approx(-1.0, rel=1e-6)
    assert torch.allclose(out, T([13, -127, 6, 25]) / 127, rtol=1e-6, atol=0)


def test_int8_scales_per_tensor_one_negative_one_positive_extreme():
    v = T([3.0, -0.5, -6.0, 1.0, 2.0])  # tensors of 3 and 2 entries: extremes −6 and 2
    data = Int8([3, 2]).encode(v, 0)
    assert data[:8].view(torch.float32).tolist() == pytest.approx([6 / 127, 2 / 127], rel=1e-7)
    assert Int8([3, 2]).decode(data)[2].item() == pytest.approx(-6.0, rel=1e-6)


# ---- SEAFL² with the delta form: Δ_t = ϑ Σ p_k Δ_k --------------------------------------------------------------

VERSIONS = {1: T([0.0, 2.0, 1.0]), 3: T([1.0, 1.0, 1.0])}
UPDATES = [BufferedUpdate(0, 0, T([0.5, 2.5, 0.0]), 30, 1, 2), BufferedUpdate(1, 1, T([2.0, 1.0, 3.0]), 10, 3, 2)]


def seafl_weights(alpha=3.0, beta=10, mu=1.0):
    """Eq. 4–6 by hand at t = 3 (S = 2 and 0), cosines of Δ_k with w_3 (delta_vs_global), normalised."""
    w3 = [1.0, 1.0, 1.0]
    raw = []
    for u in UPDATES:
        d = [a - b for a, b in zip(u.flat.tolist(), VERSIONS[u.base_version].tolist())]
        norm = math.sqrt(sum(x * x for x in d)) * math.sqrt(3)
        cos = sum(x * y for x, y in zip(d, w3)) / norm if norm else 0.0
        S = 3 - u.base_version
        raw.append(u.n_samples / 40 * (alpha * beta / (S + beta) + mu * (cos + 1) / 2))
    return [r / sum(raw) for r in raw]


@pytest.mark.parametrize("name", ["seafl", "seafl2"])
def test_delta_form_keeps_theta_for_seafl_and_seafl2(name):
    c = AlgorithmConfig(name=name, server_opt=ServerOptConfig(name="momentum", lr=1.0, beta1=0.0,
                                                              pseudo_gradient="delta"))
    res = aggregate(c, 3, VERSIONS[3], UPDATES, VERSIONS.__getitem__)
    opt = ServerOptimizer(c)
    opt.apply(VERSIONS[3], res, UPDATES, VERSIONS.__getitem__)
    p = seafl_weights()
    want = [0.8 * sum(pk * (u.flat[i].item() - VERSIONS[u.base_version][i].item()) for pk, u in zip(p, UPDATES))
            for i in range(3)]
    assert opt.state.m.tolist() == pytest.approx(want, rel=1e-9, abs=1e-12)


# ---- device evaluation: only finite values reach wandb.Histogram -------------------------------------------------

@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B offline, its folders under tmp_path, no key and no WANDB_ setting of this environment."""
    import os

    from wandb_runs import offline_env
    for k in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(k)
    for k, v in offline_env(tmp_path).items():
        if k.startswith("WANDB_") or k == "NETRC":
            monkeypatch.setenv(k, v)

def written_rows(run_dir, run_id, want):
    """The offline history rows with a version, once ``want`` of them are on disk: W&B's service may still be
    writing the .wandb file when ``run.finish`` returns on a loaded machine (seen on the 2-core VM), so wait up to
    60 s for it."""
    from wandb_runs import history_across

    from seafl_dist.report.wandb_files import offline_files
    for _ in range(120):
        try:
            rows = [h for h in history_across(offline_files(run_dir / "wandb", run_id)) if "version" in h]
        except Exception:  # a record cut mid-write
            rows = []
        if len(rows) >= want:
            return rows
        time.sleep(0.5)
    return rows


def test_device_distribution_with_nan_and_inf_reaches_w_and_b_without_them(tmp_path, wandb_offline):
    from seafl_dist.report.device_eval import summarise
    from seafl_dist.report.wandb_sink import WandbSink
    from seafl_dist.settings import config_from_dict
    cfg = config_from_dict({}, ["logging.wandb.enabled=true", "logging.wandb.mode=offline"])
    sink = WandbSink(cfg, tmp_path / "run")
    # four devices: one without held-out rows (NaN), one diverged (inf), two with values
    values, sizes = np.array([0.5, np.nan, np.inf, 0.25]), np.array([4, 0, 3, 2])
    stats = {"accuracy": summarise(values, sizes, "max")}
    sink.on_device_eval(0, 1.0, stats, values[sizes > 0])
    sink.on_device_eval(2, 3.0, stats, values)  # an empty device's NaN too: none reaches the histogram
    sink.close({"status": "completed"})
    rows = [h for h in written_rows(tmp_path / "run", sink.run.id, 2) if "device_eval/distribution/values" in h]
    assert [h["version"] for h in rows] == [0, 2]
    assert [sum(h["device_eval/distribution/values"]) for h in rows] == [2, 2]  # 0.5 and 0.25 only
    assert rows[0]["device_eval/devices"] == 2 and rows[0]["device_eval/without_holdout"] == 1
    assert [h["virtual_time"] for h in rows] == [1.0, 3.0]
    # the documented statistics of the target metric, under their own names; no count of non-finite values, no
    # held-out sizes (those are device_summary.csv's)
    logged = {k.split("/")[1] for k in rows[0] if k.startswith("device_eval/") and "/distribution" not in k}
    assert logged == {"weighted_mean", "mean", "std", "p10", "p50", "p90", "worst10_mean", "devices",
                      "without_holdout"}
    assert rows[0]["device_eval/mean"] == pytest.approx(0.375) and rows[0]["device_eval/p50"] == pytest.approx(0.375)


def test_a_device_evaluation_with_no_finite_value_logs_its_statistics_and_no_histogram(tmp_path, wandb_offline):
    from seafl_dist.report.wandb_sink import WandbSink
    from seafl_dist.settings import config_from_dict
    cfg = config_from_dict({}, ["logging.wandb.enabled=true", "logging.wandb.mode=offline"])
    sink = WandbSink(cfg, tmp_path / "run")
    sink.on_device_eval(0, 1.0, {"accuracy": {"devices": 0, "mean": None}}, np.array([np.nan, -np.inf]))
    sink.close({"status": "completed"})
    rows = [h for h in written_rows(tmp_path / "run", sink.run.id, 1) if h.get("version") == 0]
    assert rows and rows[0]["device_eval/devices"] == 0
    assert not any(k.startswith("device_eval/distribution") for k in rows[0])


# ---- groups of an integer or tuple key: named by str, ordered by name -------------------------------------------

class Keyed:
    name = "keyed"

    def __init__(self, **fields):
        self.fields = fields

    def field(self, key):
        return self.fields[key]


def test_integer_groups_are_ordered_by_name_not_by_value():
    g = sample_groups(Keyed(user=[10, 2, 1, 2, 10, 1, 1]), "user")
    assert g.names == ["1", "10", "2"]  # by str: "1" < "10" < "2", not 1, 2, 10
    assert [g.rows(i).tolist() for i in range(3)] == [[2, 5, 6], [0, 4], [1, 3]]
    assert sample_groups(Keyed(who=["bo", "ann", "bo"]), "who").names == ["ann", "bo"]  # str, not repr: no quotes


def test_tuple_groups_are_named_by_str_and_do_not_crash():
    g = sample_groups(Keyed(who=[(1, "a"), (0, "b"), (1, "a"), (10, "a"), (2, "a")]), "who")
    assert g.names == ["(0, 'b')", "(1, 'a')", "(10, 'a')", "(2, 'a')"]
    assert [g.rows(i).tolist() for i in range(4)] == [[1], [0, 2], [3], [4]]


# ---- the held-out split reads the label key ---------------------------------------------------------------------

def holdout_cfg(partition, key, fraction=0.5):
    return SimpleNamespace(data=SimpleNamespace(partition=partition, partition_by=key, device_holdout=fraction),
                           data_seed=0)


def test_natural_split_by_a_string_group_key_holds_out_unstratified():
    speakers = ["ann", "bo"] * 10  # no class under the group key: reading it as labels would be refused
    data = Keyed(speaker=speakers, topic=[0] * 20)
    shards = [np.arange(0, 10), np.arange(10, 20)]
    train, held = held_out_split(holdout_cfg("natural", "speaker"), data, shards)
    for s, t, h in zip(shards, train, held):
        assert len(h) == 5 and len(t) == 5 and sorted(np.concatenate([t, h]).tolist()) == s.tolist()


def test_dirichlet_split_by_topic_stratifies_the_holdout_by_topic():
    # one device of 40 rows: topics 0 and 1 alternate in 10-row runs; a holdout of 1/2 takes 10 of each topic
    topic = ([0] * 10 + [1] * 10) * 2
    data = Keyed(topic=topic)
    for seed in range(5):
        cfg = holdout_cfg("dirichlet", "topic")
        cfg.data_seed = seed
        train, held = held_out_split(cfg, data, [np.arange(40)])
        taken = [topic[i] for i in held[0]]
        assert len(taken) == 20 and taken.count(0) == 10 and taken.count(1) == 10, seed


def test_no_holdout_gives_the_shards_themselves_and_no_held_out_parts():
    shards = [np.arange(0, 3), np.arange(3, 5)]
    train, held = held_out_split(holdout_cfg("natural", "speaker", fraction=0.0), Keyed(speaker=["a"] * 5), shards)
    assert train is shards and held is None  # None: the writers' own test rows, not an empty split, are asked for


def test_dirichlet_split_by_a_key_without_integer_classes_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        held_out_split(holdout_cfg("dirichlet", "speaker"), Keyed(speaker=["ann", "bo"]), [np.arange(2)])
    assert "data.partition_by" in str(err.value) and "\n" not in str(err.value)
