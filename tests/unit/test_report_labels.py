"""Arms named as a reader names them (report/labels.py), in figures and as a sweep's W&B job types."""
import dataclasses

from seafl_dist.experiments import load_sweep
from seafl_dist.report.labels import (ALGORITHMS, INFINITE_WHEN_NULL, USES, figure_title, reader_labels,
                                      value_text, what_varies)
from seafl_dist.report.runs import flatten
from seafl_dist.settings import ALGORITHMS as BUILT_IN
from seafl_dist.settings import AlgorithmConfig, config_from_dict


def arm(*overrides) -> dict:
    return flatten(config_from_dict({}, list(overrides)).to_dict())


def test_every_built_in_algorithm_has_a_name_and_the_keys_it_reads():
    fields = {f.name for f in dataclasses.fields(AlgorithmConfig)}
    for name in BUILT_IN:
        assert ALGORITHMS[name] != name, name  # "FedBuff", not "fedbuff"
        assert set(USES[name]) <= fields, (name, set(USES[name]) - fields)
    assert set(USES) == set(BUILT_IN) == set(ALGORITHMS)


def test_each_algorithm_shows_only_the_keys_it_reads_and_does_not_fix():
    names = reader_labels([arm(f"algorithm.name={a}") for a in BUILT_IN if a != "fedcompass"])
    # K is 10 wherever it is read (FedAsync fixes 1, FedAvg M); β differs: SEAFL's 10, FedBuff's ∞; FedAvg fixes 0
    assert names == ["SEAFL, β = 10", "SEAFL², β = 10", "FedBuff, β = ∞", "FedAsync, β = ∞", "FedAvg", "CA²FL, β = ∞",
                     "FADAS, β = ∞", "async SGD, β = ∞", "Port, β = 10",
                     "FedStaleWeight, β = ∞", "SCAFFOLD, β = ∞"]  # FADAS's amsgrad is its preset's, fixed
    # fedcompass (every device trains: M = N) reads no β nor K (its groups trigger), its own keys and f(S)'s
    compass = [arm("algorithm.name=fedcompass", "devices.concurrency=100", *more) for more in
               ([], ["algorithm.buffer_size=3", "algorithm.fedcompass.q_min=10"])]
    assert reader_labels(compass) == ["q_min = 20", "q_min = 10"]  # K, which it does not read, is no difference
    names = reader_labels([arm("algorithm.buffer_size=5"), arm("algorithm.name=fedasync"),
                           arm("algorithm.name=fedbuff", "algorithm.staleness_limit=10")])
    assert names == ["SEAFL, K = 5, β = 10", "FedAsync, β = ∞", "FedBuff, K = 10, β = 10"]  # FedAsync: no K
    guarded = [arm(f"algorithm.name={a}", f"algorithm.update_norm_factor={f}") for a in ("fedbuff", "fedavg")
               for f in ("null", 10)]  # the update guard runs before every rule, FedAvg's too
    assert reader_labels(guarded) == ["FedBuff, guard = off", "FedBuff, guard = 10", "FedAvg, guard = off",
                                      "FedAvg, guard = 10"]


def test_fedcompass_among_other_rules_is_labelled_not_refused():
    """A leaderboard's arms mix FedCompass (M = N, refused otherwise) with rules at M = 20: its defaults are read at
    M = N, so the labels say each arm's M, and at one M they say none (the tuning sweep's report once raised here)."""
    mixed = [arm("algorithm.name=fedbuff"), arm("algorithm.name=fedcompass", "devices.concurrency=100")]
    assert reader_labels(mixed) == ["FedBuff, M = 20", "FedCompass, M = 100"]  # FedCompass reads no β
    same_m = [arm("algorithm.name=fedbuff", "devices.concurrency=100"),
              arm("algorithm.name=fedcompass", "devices.concurrency=100")]
    assert reader_labels(same_m) == ["FedBuff", "FedCompass"]
    # a title's "what varies": M is at each arm's own default (FedCompass's is N), so only the algorithm varies
    assert what_varies(mixed) == what_varies(same_m) == "algorithm varies"


def test_a_studys_shared_setting_is_left_out_and_twins_are_told_apart():
    study = [arm(), arm("algorithm.buffer_size=5"), arm("algorithm.staleness_limit=2"), arm("algorithm.mu=0"),
             arm("algorithm.name=fedbuff")]
    assert reader_labels(study) == ["SEAFL", "SEAFL, K = 5", "SEAFL, β = 2", "SEAFL, μ = 0", "FedBuff, K = 10, β = ∞"]
    twins = [arm("algorithm.name=fedasync", "run.max_time=200"), arm("algorithm.name=fedasync", "run.max_time=400")]
    assert reader_labels(twins) == ["max_time = 200", "max_time = 400"]  # the budget, only now
    ignored = [arm("algorithm.name=fedavg", "algorithm.mu=0"), arm("algorithm.name=fedavg")]
    assert reader_labels(ignored) == ["μ = 0", "μ = 1"]  # a key the rule ignores, only now
    assert reader_labels([arm()]) == ["SEAFL"]


def test_values_as_a_reader_writes_them():
    for key in INFINITE_WHEN_NULL:
        assert value_text(key, None) == "∞", key
    assert value_text("devices.dropout", None) == "0" and value_text("data.concentration", 0.30000) == "0.3"
    assert value_text("devices.profile", "configs/mnist/churn_profile.csv") == "churn_profile.csv"
    assert value_text("devices.profile", "C:\\runs\\slow.csv") == "slow.csv"  # a Windows path: its file name too
    assert value_text("devices.profile", "slow.csv") == "slow.csv"
    assert value_text("algorithm.similarity", None) == "none"


def test_titles_name_the_setting_what_varies_and_the_seeds():
    mnist = ["data.name=mnist", "model.name=lenet5"]
    grid = [arm(*mnist, f"algorithm.buffer_size={k}") for k in (5, 10)]
    assert figure_title(grid, [3, 3]) == "SEAFL on MNIST, LeNet-5: K varies, 3 seeds each"
    both = grid + [arm(*mnist, "algorithm.name=fedbuff")]
    # β is 10 for SEAFL and ∞ for FedBuff, each its algorithm's default: no sweep varied it (issue 30)
    assert figure_title(both, [2, 3, 3]) == "MNIST, LeNet-5: algorithm and K vary, 2–3 seeds each"
    swept = {"algorithm.name", "algorithm.buffer_size", "algorithm.staleness_limit"}
    assert figure_title(both, [2, 3, 3], swept) == "MNIST, LeNet-5: algorithm, K and β vary, 2–3 seeds each"
    waited = both + [arm(*mnist, "algorithm.name=fedbuff", "algorithm.staleness_limit=10")]  # not FedBuff's own β
    assert figure_title(waited, [3] * 4) == "MNIST, LeNet-5: algorithm, K and β vary, 3 seeds each"
    assert figure_title([arm(*mnist, f"algorithm.name={a}") for a in ("seafl", "fedbuff", "fedasync", "fedavg")],
                        [3] * 4) == "MNIST, LeNet-5: algorithm varies, 3 seeds each"
    assert figure_title([arm(*mnist)], [1]) == "SEAFL on MNIST, LeNet-5"
    # a device condition every arm shares is part of the setting; one that varies is said as varying
    drop = [arm(*mnist, "devices.dropout=0.3", f"algorithm.name={a}") for a in ("seafl", "fedbuff")]
    assert figure_title(drop, [3, 3]) == "MNIST, LeNet-5, dropout 0.3: algorithm varies, 3 seeds each"
    windows = [arm(*mnist, "devices.profile=configs/mnist/churn_profile.csv", f"algorithm.buffer_size={k}")
               for k in (5, 10)]
    assert figure_title(windows, [3, 3]) == \
        "SEAFL on MNIST, LeNet-5, device profile churn_profile.csv: K varies, 3 seeds each"
    mixed = [arm(*mnist, f"devices.dropout={d}") for d in (0.1, 0.3)]
    assert figure_title(mixed, [3, 3]) == "SEAFL on MNIST, LeNet-5: dropout varies, 3 seeds each"


def test_a_sweeps_runs_carry_their_grid_points_label_as_w_and_b_job_type(tmp_path):
    (tmp_path / "base.yaml").write_text("run: {max_aggregations: 3}\n")
    (tmp_path / "s.yaml").write_text("base: base.yaml\ngrid:\n  algorithm.name: [seafl, fedbuff]\n"
                                     "  algorithm.buffer_size: [5, 10]\nseeds: [0, 1]\n")
    runs = load_sweep(tmp_path / "s.yaml").expand()
    assert {r.label: r.config.logging.wandb.job_type for r in runs} == {
        "algorithm=seafl,buffer_size=5": "SEAFL, K = 5, β = 10", "algorithm=seafl,buffer_size=10": "SEAFL, K = 10, β = 10",
        "algorithm=fedbuff,buffer_size=5": "FedBuff, K = 5, β = ∞", "algorithm=fedbuff,buffer_size=10": "FedBuff, K = 10, β = ∞"}
    assert len(runs) == 8 and all(r.config.logging.wandb.group == "s" for r in runs)
    kept = load_sweep(tmp_path / "s.yaml", overrides=["logging.wandb.job_type=mine"]).expand()
    assert {r.config.logging.wandb.job_type for r in kept} == {"mine"}


def test_a_codecs_keys_label_an_arm_only_when_its_codec_reads_them():
    base = ("algorithm.name=fedbuff", "runtime.placement=device")
    arms = [arm(*base), arm(*base, "compression.codec=int8"), arm(*base, "compression.codec=qsgd"),
            arm(*base, "compression.codec=qsgd", "compression.levels=2", "compression.bucket=64"),
            arm(*base, "compression.codec=topk", "compression.fraction=0.1", "compression.error_feedback=true"),
            arm(*base, "compression.codec=topk", "compression.fraction=0.05")]
    assert reader_labels(arms) == [  # none reads no other key; int8 no s, bucket or k; error feedback off is usual
        "codec = none", "codec = int8", "codec = qsgd, QSGD s = 4, bucket = 512", "codec = qsgd, QSGD s = 2, bucket = 64",
        "codec = topk, top-k = 0.1, error feedback = on", "codec = topk, top-k = 0.05"]
    study = [arm(*base), arm(*base, "compression.codec=int8"),
             arm(*base, "compression.codec=topk", "compression.fraction=0.1", "compression.error_feedback=true")]
    assert reader_labels(study) == ["codec = none", "codec = int8, error feedback = off",
                                    "codec = topk, error feedback = on"]
    one_each = [arm(*base), arm(*base, "compression.codec=qsgd"), arm(*base, "compression.codec=topk")]
    assert reader_labels(one_each) == ["codec = none", "codec = qsgd", "codec = topk"]  # one s, one k: not arms' keys


def without(config: dict, section: str) -> dict:
    """A run's config as its config.yaml gives it: a section at its defaults is left out of the file."""
    return {k: v for k, v in config.items() if not k.startswith(section + ".")}


def test_a_section_left_out_of_a_runs_config_reads_as_its_defaults():
    base = ("algorithm.name=fedbuff", "runtime.placement=device")
    arms = [without(arm(*base), "compression"), arm(*base, "compression.codec=int8"),
            arm(*base, "compression.codec=topk", "compression.error_feedback=true")]
    assert reader_labels(arms) == ["codec = none", "codec = int8, error feedback = off",
                                   "codec = topk, error feedback = on"]  # not "codec = none, error feedback = off"
    opts = [without(arm("algorithm.name=fedbuff"), "algorithm.server_opt")] + [
        arm("algorithm.name=fedbuff", "algorithm.server_opt.name=adam", f"algorithm.server_opt.lr={lr}") for lr in (0.01, 0.03)]
    assert reader_labels(opts) == ["server optimizer = none", "η_s = 0.01",  # adam: the usual value, left out
                                   "η_s = 0.03"]  # and not "server optimizer = none, η_s = none"


def test_a_server_optimizers_keys_label_an_arm_only_when_it_has_one():
    arms = [arm("algorithm.name=fedbuff"), arm("algorithm.name=fedbuff", "algorithm.server_opt.name=momentum"),
            arm("algorithm.name=fedbuff", "algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01")]
    assert reader_labels(arms) == ["server optimizer = none", "server optimizer = momentum, η_s = 1",
                                   "server optimizer = adam, η_s = 0.01"]  # none: no η_s to speak of
