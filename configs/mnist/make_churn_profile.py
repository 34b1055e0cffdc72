"""Write configs/mnist/churn_profile.csv: the availability profile of the MNIST churn study
(docs/churn.md), seeded, so anyone can remake it byte for byte.

    python configs/mnist/make_churn_profile.py            # writes the CSV beside this file

100 rows, one per device of configs/mnist_prelim.yaml. Every row keeps that config's speed
(0.001 s per sample, no transfer time: the clock's Zipf idle times stay on, since the config
sets clock.idle), so availability is the only thing that changes. Each device is online once per
300-virtual-second period ("on the charger"), for a fraction of it drawn uniformly from
[0.5, 0.9], starting at a phase drawn uniformly from [0, 300); a window that would cross the
period's end is written as two (the profile format's wrap rule joins them). A job still running
when its device's window closes is dropped; a device offline starts no job.
"""
from pathlib import Path

import numpy as np

PERIOD, DEVICES, SEED = 300, 100, 0


def rows(seed: int = SEED, devices: int = DEVICES, period: int = PERIOD) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(devices):
        length = round(float(rng.uniform(0.5, 0.9)) * period)
        on = int(rng.integers(0, period))
        off = on + length
        windows = f"{on}:{off}" if off <= period else f"0:{off - period} {on}:{period}"
        out.append(f"d{k},0.001,inf,inf,{period},{windows}")
    return out


def main() -> None:
    path = Path(__file__).with_name("churn_profile.csv")
    head = ["# the MNIST churn study's availability profile, made by configs/mnist/make_churn_profile.py",
            f"# (seed {SEED}): online {PERIOD} s periods, one window of 50-90% of the period at a random phase",
            "id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows"]
    path.write_text("\n".join(head + rows()) + "\n")
    print(path)


if __name__ == "__main__":
    main()
