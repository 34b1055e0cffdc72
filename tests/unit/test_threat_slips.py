"""Tests the independent slip audit (docs/testing.md, "Semantic mutants", issue 67 item 4) found missing in the
attacks: each oracle is written from the paper (scipy's Φ⁻¹, by hand), never from seafl_dist/threats/."""
import math

import pytest
from scipy.stats import norm

from seafl_dist.threats import alie_z


@pytest.mark.parametrize("n, m, s", [(5, 1, 2), (7, 2, 2), (9, 1, 4), (3, 1, 1)])
def test_alies_z_for_an_odd_buffer_takes_the_floor_of_n_over_2_plus_1(n, m, s):
    """O1: Baruch et al. Algorithm 1, s = ⌊n/2 + 1⌋ − m: for odd n, ⌊n/2 + 1⌋ = (n + 1)/2 (5 → 3, not 4), so n = 5,
    m = 1 needs s = 2 supporters and z = Φ⁻¹(3/5); the s column is worked by hand."""
    assert s == max((n + 1) // 2 - m, 1)
    assert alie_z(n, m) == pytest.approx(norm.ppf((n - s) / n), abs=1e-12)
    assert math.isfinite(alie_z(n, m))


def test_the_summary_names_the_last_and_the_largest_success_rate_and_fast_as_configured():
    """T1, T2: summary.json's ``threats`` (docs/robustness.md): the final backdoor success rate is the last
    evaluation's, the best the largest, rows without a rate skipped; ``fast`` is the config's."""
    from seafl_dist.settings import load_config
    from seafl_dist.threats import Threats
    from small_runs import QUICKSTART, SMALL
    cfg = load_config(QUICKSTART, [*SMALL, "threats.malicious_devices=[1,4]", "threats.attack=backdoor"])
    rows = [{"backdoor_asr": 0.2}, {"backdoor_asr": 0.7}, {"accuracy": 0.5}, {"backdoor_asr": 0.4}]
    assert Threats(cfg, 10).summary(rows) == {"threats": {"malicious": [1, 4], "attack": "backdoor", "fast": False,
                                                          "final_backdoor_asr": 0.4, "best_backdoor_asr": 0.7}}


def test_fast_attackers_with_a_device_profile_are_refused_naming_threats_fast():
    """TH3: fast attackers take the smallest of the idle times drawn once per device (docs/robustness.md, "Fast
    attackers"); a profile sets each device's own times, so ``threats.fast`` is refused with one, even where the
    idle distribution and resampling alone would allow it (that edge is accepted in test_threats.py)."""
    from seafl_dist.settings import ConfigError, load_config
    from small_runs import QUICKSTART, SMALL
    with pytest.raises(ConfigError) as err:
        load_config(QUICKSTART, [*SMALL, "threats.malicious=0.2", "threats.fast=true", "clock.idle.distribution=pareto",
                                 "devices.profile=configs/mnist/churn_profile.csv"])
    assert "'threats.fast'" in str(err.value) and "devices.profile" in str(err.value) and "\n" not in str(err.value)
