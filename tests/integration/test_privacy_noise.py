"""Where the noise comes from, end to end (issue 60 A and F): in every mode the noise that model.pt carries has the
spread the aggregate event reports, and only the seeded mode's can be regenerated from the released files.

Each run stops at its first aggregation, so model.pt is w′_1 + noise, and a run with z = 0 (the same schedule,
clipping and rule: the same pre-noise w′_1) gives w′_1 itself. What a reader of the release can do is done here
from the released files alone: config.yaml's run.seed and the event's noise_std, as the second privacy review did."""
import json
import os

import pytest
import torch
import yaml

from resuming import reference
from seafl_dist.privacy.noise import noise_seed
from small_runs import SMALL

Z = 2.0
ONE = [*SMALL, "algorithm.name=fedbuff", "privacy.enabled=true", "privacy.clipping_bound=1", "run.max_aggregations=1"]
MODES = {"keyed": [], "secure": ["privacy.secure_noise=true"], "seeded": ["privacy.seeded_noise=true"]}
KEY = "the keyed run's key, given as $SEAFL_DP_KEY"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """model.pt's floats (a flat vector) and the first aggregate event of the z = 0 run and of each mode's run."""
    root = tmp_path_factory.mktemp("noise")
    out = {}
    for name, extra in {"z0": ["privacy.noise_multiplier=0"],
                        **{m: [f"privacy.noise_multiplier={Z}", *x] for m, x in MODES.items()}}.items():
        if name == "keyed":
            os.environ["SEAFL_DP_KEY"] = KEY
        try:
            d = reference(root / name, [*ONE, *extra])
        finally:
            os.environ.pop("SEAFL_DP_KEY", None)
        model = torch.load(d / "model.pt", weights_only=True)
        flat = torch.cat([v.flatten().to(torch.float64) for v in model.values() if v.is_floating_point()])
        event = next(e for e in map(json.loads, (d / "events.jsonl").read_text().splitlines())
                     if e["event"] == "aggregate")
        out[name] = (flat, event, d)
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_the_noise_model_pt_carries_has_the_std_its_event_reports(mode, runs):
    base, _, _ = runs["z0"]
    flat, event, _ = runs[mode]
    std = event["privacy"]["noise_std"]
    assert std == pytest.approx(Z * event["privacy"]["sensitivity"]) and std > 0
    noise = flat - base
    n = noise.numel()
    assert n > 20_000
    # the sample std of n normals is within 5/sqrt(2n) of sigma (relative) but for a chance of 1e-6
    assert float(noise.std()) == pytest.approx(std, rel=5 / (2 * n) ** 0.5)
    assert abs(float(noise.mean())) < 5 * std / n ** 0.5


def regenerate(run_dir, event, n) -> torch.Tensor:
    """The attack of the review: the seeded noise of aggregation 1, from config.yaml's run.seed and the event's std."""
    seed = yaml.safe_load((run_dir / "config.yaml").read_text())["run"]["seed"]
    g = torch.Generator().manual_seed(noise_seed(seed, 1))
    return torch.randn(n, generator=g, dtype=torch.float64) * event["privacy"]["noise_std"]


@pytest.mark.parametrize("mode", list(MODES))
def test_only_the_seeded_noise_can_be_regenerated_and_subtracted_from_the_released_files(mode, runs, tmp_path):
    base, _, _ = runs["z0"]
    flat, event, run_dir = runs[mode]
    recovered = flat - regenerate(run_dir, event, flat.numel())  # what the reader gets for w′_1
    err = float((recovered - base).norm())
    std = event["privacy"]["noise_std"]
    if mode == "seeded":  # the attack works: w′_1 to float32 rounding
        assert err < 1e-4 * float(base.norm())
        s = json.loads((run_dir / "summary.json").read_text())["privacy"]
        assert s["noise"] == "seeded" and "config.yaml" in s["guarantee"]
    else:  # the noise and the regenerated draw are independent: about sqrt(2) sigma per entry
        assert err == pytest.approx(std * (2 * flat.numel()) ** 0.5, rel=0.05)
        s = json.loads((run_dir / "summary.json").read_text())["privacy"]
        assert s["noise"] == mode and "guarantee" not in s
        if mode == "keyed":  # the key is in no file of the run dir outside private/, its fingerprint is
            text = b"".join(p.read_bytes() for p in run_dir.iterdir() if p.is_file())
            assert KEY.encode() not in text and s["key_fingerprint"].encode() in text
