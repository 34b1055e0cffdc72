"""FedCompass (algorithm.name: fedcompass) outside its schedule: the server step against the formula written here,
the config's refusals in one line, and local training that stops after the assigned steps."""
import pytest
import torch

from one_line import one_line_message
from seafl_dist.algo import BufferedUpdate, aggregate
from seafl_dist.settings import ConfigError, config_from_dict
from seafl_dist.train import StepPlan
from seafl_dist.train.local import train_job
from tiny_data import Rows

COMPASS = {"algorithm": {"name": "fedcompass"}, "devices": {"num": 4, "concurrency": 4}}


def compass(**sections):
    tree = {k: dict(v) for k, v in COMPASS.items()}
    for name, keys in sections.items():
        tree[name] = {**tree.get(name, {}), **keys}
    return config_from_dict(tree)


def test_the_server_step_is_alpha_over_n_times_each_deltas_staleness_factor():
    """w_{t+1} = w_t + α Σ_k (1 + S_k)^(−a) Δ_k / N, Δ_k = w_k − w_{t_k} (APPFL's gradient-based aggregator, equal
    weights 1/N), with α = 0.7, a = 0.5, N = 4; a non-finite update takes no part."""
    alg = compass(algorithm={"fedcompass": {"alpha": 0.7}}).algorithm
    g = torch.Generator().manual_seed(3)
    bases = {v: torch.randn(5, generator=g, dtype=torch.float64) for v in (1, 3)}
    w_t = torch.randn(5, generator=g, dtype=torch.float64)
    w = [bases[1] + torch.randn(5, generator=g, dtype=torch.float64), bases[3] + torch.randn(5, generator=g,
                                                                                              dtype=torch.float64)]
    ups = [BufferedUpdate(device=0, job=0, flat=w[0], n_samples=9, base_version=1, epochs=2),
           BufferedUpdate(device=1, job=1, flat=w[1], n_samples=3, base_version=3, epochs=1),
           BufferedUpdate(device=2, job=2, flat=torch.full((5,), float("nan"), dtype=torch.float64), n_samples=3,
                          base_version=3, epochs=1)]
    res = aggregate(alg, 3, w_t, ups, lambda v: bases[v])
    c = [0.7 * (1 + 2) ** -0.5 / 4, 0.7 * (1 + 0) ** -0.5 / 4]
    expected = w_t + c[0] * (w[0] - bases[1]) + c[1] * (w[1] - bases[3])
    torch.testing.assert_close(res.new_global, expected, rtol=0, atol=1e-12)
    assert [d["weight"] for d in res.info] == pytest.approx(c + [0.0])
    assert res.info[2]["rejected"]


@pytest.mark.parametrize("sections, key, value", [
    ({"devices": {"concurrency": 3}}, "devices.concurrency", 3),
    ({"algorithm": {"partial": True}}, "algorithm.partial", True),
    ({"algorithm": {"staleness_limit": 4}}, "algorithm.staleness_limit", 4),
    ({"algorithm": {"fedcompass": {"q_min": 30, "q_max": 25}}}, "algorithm.fedcompass.q_min", 30),
    ({"algorithm": {"fedcompass": {"latest_time_factor": 0.5}}}, "algorithm.fedcompass.latest_time_factor", 0.5),
    ({"devices": {"dropout": 0.1}}, "devices.dropout", 0.1),
    ({"devices": {"dropout": 0.0}}, "devices.dropout", 0.0),  # any dropout key set, even one that never drops
    ({"devices": {"profile": "slow.csv"}}, "devices.profile", "slow.csv"),
    ({"train": {"loop": "lightning"}}, "train.loop", "lightning"),
    ({"clock": {"sec_per_sample": 0}}, "clock.sec_per_sample", 0.0),
    ({"privacy": {"enabled": True, "noise_multiplier": 1.0}}, "privacy.enabled", True),
])
def test_what_fedcompass_cannot_run_is_refused_in_one_line_naming_the_key(sections, key, value):
    with pytest.raises(ConfigError) as err:
        compass(**sections)
    one_line_message(str(err.value), f"config key '{key}' has value {value!r}", "allowed")


def test_the_config_resolves_no_beta_and_no_buffer_and_keeps_the_reference_defaults():
    cfg = compass()
    assert (cfg.algorithm.staleness_limit, cfg.algorithm.buffer_size) == (None, 1)
    fc = cfg.algorithm.fedcompass
    assert (fc.q_min, fc.q_max, fc.speed_momentum, fc.latest_time_factor, fc.alpha) == (20, 100, 0.9, 1.5, 0.9)


def test_a_step_counted_plan_is_the_first_q_steps_of_the_whole_epochs_plan():
    idx = torch.arange(10)
    whole = list(StepPlan(idx, epochs=3, batch_size=4, seed=5).batches())  # 3 batches an epoch (4, 4, 2)
    cut = StepPlan(idx, epochs=3, batch_size=4, seed=5, max_steps=7)
    got = list(cut.batches())
    assert cut.steps == 7 and len(got) == 7
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(got, whole[:7]))


_Data = Rows  # tests/tiny_data.py


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_job_of_q_steps_trains_exactly_the_plans_first_q_batches():
    """The oracle: plain SGD written here over the plan's first Q = 5 batches (3 an epoch: its 2nd epoch cut short)."""
    data, idx = _Data(), torch.arange(12)
    model = _Linear()
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    steps = []
    got = train_job(_Linear(), start, data, idx, epochs=2, batch_size=4, seed=11, steps=5,
                    on_step=lambda: steps.append(1))
    assert len(steps) == 5
    oracle = _Linear()
    torch.nn.utils.vector_to_parameters(start.clone(), oracle.parameters())
    opt = torch.optim.SGD(oracle.parameters(), lr=0.1)
    for _, b, _ in list(StepPlan(idx, epochs=2, batch_size=4, seed=11).batches())[:5]:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(oracle(data.x[b]), data.y[b]).backward()
        opt.step()
    torch.testing.assert_close(got, torch.nn.utils.parameters_to_vector(oracle.parameters()).detach(), rtol=0,
                               atol=1e-6)


def test_the_runs_schedule_puts_each_step_counted_job_on_the_configs_clock():
    """c_k = n_k × sec_per_sample, no idle; s_k = 3 steps for 40 samples in batches of 16 (16, 16, 8), 2 for 20 (16,
    4); Q_max = 5: device 0 makes passes of 3 and 2 steps, device 1 of 2, 2 and 1; download 1 s, upload 0.5 s."""
    from seafl_dist.sim.compass import from_config
    from seafl_dist.train import epoch_sizes
    cfg = compass(devices={"num": 2, "concurrency": 2}, algorithm={"fedcompass": {"q_min": 1, "q_max": 5}},
                  clock={"sec_per_sample": 0.01, "download_s": 1.0, "upload_s": 0.5, "idle": {"distribution": "none"}},
                  train={"batch_size": 16})
    n = [40, 20]
    steps = [len(epoch_sizes(k, 16)) for k in n]
    assert steps == [3, 2]
    ev = list(from_config(cfg, n, steps, upload_s=0.5, upload_sizes={}).events())
    starts = {e["device"]: e for e in ev if e["event"] == "start" and e["time"] == 0.0}
    assert starts[0]["epoch_ends"] == pytest.approx([1.4, 1.4 + 2 / 3 * 0.4])
    assert starts[1]["epoch_ends"] == pytest.approx([1.2, 1.4, 1.5])
    first = [e for e in ev if e["event"] == "finish"][0]
    assert (first["device"], first["time"]) == (1, pytest.approx(2.0))  # 1.5 + the upload
    agg = [e for e in ev if e["event"] == "aggregate"]
    assert [(u["device"], u["n_samples"]) for u in agg[0]["updates"] + agg[1]["updates"]] == [(1, 20), (0, 40)]
    # λ = 2 (not the default 1.5): device 1 (v = 2/5 s a step) creates a group of 5 steps at t = 2: T = 4, L = 6
    cfg2 = compass(devices={"num": 2, "concurrency": 2},
                   algorithm={"fedcompass": {"q_min": 1, "q_max": 5, "latest_time_factor": 2.0}},
                   clock={"sec_per_sample": 0.01, "download_s": 1.0, "upload_s": 0.5, "idle": {"distribution": "none"}},
                   train={"batch_size": 16})
    group = next(e for e in from_config(cfg2, n, steps, upload_s=0.5, upload_sizes={}).events() if e["event"] == "group")
    assert (group["time"], group["expected"], group["deadline"]) == pytest.approx((2.0, 4.0, 6.0))


def test_step_counted_jobs_are_never_fused_or_captured():
    """The fused step and CUDA graphs train whole epochs: a fedcompass run trains each job in its own loop."""
    from seafl_dist.runtime.executor import loop_blocker
    cfg = compass()
    assert "fedcompass" in loop_blocker(cfg.train, cfg.algorithm)
    plain = config_from_dict({})
    assert loop_blocker(plain.train, plain.algorithm) is None


def test_a_runs_job_carries_its_assigned_steps_into_training_one_job_at_a_time(one_thread, capsys):
    """JobSpec.of takes the steps its start event assigns, and GroupTrainer (both executors') trains them in the job's
    own loop even when runtime.batch_jobs asks for fused groups: the result is train_job's of exactly those steps."""
    from seafl_dist.runtime.executor import GroupTrainer, JobSpec, job_seeds
    from seafl_dist.runtime.setup import prepare
    from seafl_dist.sim.compass import CompassScheduler
    from seafl_dist.sim.scheduler import Lookahead
    cfg = compass(data={"name": "digits"}, runtime={"batch_jobs": 2, "device": "cpu"},
                  algorithm={"fedcompass": {"q_min": 1, "q_max": 3}})
    exp = prepare(cfg)
    trainer = GroupTrainer(exp)
    assert trainer.limit == 1 and "algorithm.name is fedcompass" in capsys.readouterr().err
    look = Lookahead(CompassScheduler(num_devices=4, epoch_times=lambda d, j, p: [10.0] * p, steps_per_epoch=[10] * 4,
                                      q_min=1, q_max=3).events())
    start = next(e for e in look if e["event"] == "start")
    spec = JobSpec.of(start, look)
    assert (spec.steps, spec.epochs) == (3, 1)
    got = trainer.train([spec], [exp.initial_flat()])[0]
    t = cfg.train
    kw = dict(epochs=1, batch_size=t.batch_size, **job_seeds(cfg, spec))
    shard = exp.shard(spec.device)
    assert len(shard) > 3 * t.batch_size  # an epoch is more than the 3 steps
    assert torch.equal(got, train_job(exp.new_model(), exp.initial_flat(), exp.train, shard, steps=3, **kw))
    assert not torch.equal(got, train_job(exp.new_model(), exp.initial_flat(), exp.train, shard, **kw))


def test_the_fedcompass_section_is_left_out_of_config_yaml_at_its_defaults():
    from seafl_dist.settings import dump_config
    assert "fedcompass:\n" not in dump_config(compass())
    assert "  fedcompass:\n    q_min: 20\n    q_max: 50\n" in dump_config(compass(algorithm={"fedcompass": {"q_max": 50}}))
