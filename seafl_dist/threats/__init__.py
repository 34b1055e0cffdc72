"""Malicious devices and what they do (docs/robustness.md, "Malicious devices and attacks"): this room owns who is
malicious (a pure function of the config: :mod:`.select`), the attacks on a device's own delta (:mod:`.local`), the
omniscient attacks computed at aggregation time on rank 0 from the honest deltas of the buffer (:mod:`.omniscient`),
and the attacks on a device's data with the backdoor's trigger (:mod:`.data`). :mod:`.stage` is what the runtime
calls, once per place: the trainer on each upload, the server on each buffer, setup on the training set.

The defenses are not here (they are a stage of the aggregation). With ``threats`` at its defaults nothing here
runs. Pure functions of flat tensors and settings; the only randomness is named streams of the run.
"""
from seafl_dist.threats.select import malicious_devices
from seafl_dist.threats.local import attack_delta
from seafl_dist.threats.omniscient import alie_z, crafted_delta
from seafl_dist.threats.data import poisoned, triggered_test
from seafl_dist.threats.stage import Threats

__all__ = ["Threats", "alie_z", "attack_delta", "crafted_delta", "malicious_devices", "poisoned", "triggered_test"]
