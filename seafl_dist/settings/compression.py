"""The ``compression`` section: what a device uploads (seafl_dist/codecs/ encodes and decodes it; docs/compression.md
says why each choice).

``codec: none``, the default, uploads the trained model as today, every float32 byte. Any other codec uploads the
delta Δ_k = w_k − w_{t_k} of the trainable parameters, compressed, and batch norm's statistics and the integer
counters exact (stage 1 of SPEC's "One aggregation, end to end"). The upload's size is a function of the codec and
the model's layout only, so the virtual clock charges it before anything trains. The section is left out of
config.yaml when every key is at its default, so the file of a run without compression is what it was before.
"""
from __future__ import annotations

from dataclasses import dataclass

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key

CODECS = ("none", "fp16", "bf16", "int8", "qsgd", "topk")


@dataclass(kw_only=True)
class CompressionConfig:
    """What a device sends after a job: the whole model (`none`) or its compressed delta."""

    codec: str = key("none", "what a device uploads: `none` (the model, float32), or the parameters' delta as `fp16`, "
                     "`bf16`, `int8` (one float32 scale per tensor), `qsgd` (s levels over buckets, stochastic "
                     "rounding) or `topk` (the largest entries by magnitude)", CODECS,
                     note="With a codec, the server adds the decompressed delta to the job's base model; batch "
                          "norm's statistics and integer counters travel exact. An upload then takes its compressed "
                          "bytes over the device's upload bandwidth (`devices.profile`), or `clock.upload_s` × "
                          "(compressed / full bytes) without a profile; downloads stay full float32. Finish events "
                          "carry `bytes` and `model_bytes`. Left out of config.yaml (the whole section) at its "
                          "defaults (docs/compression.md).")
    levels: int = key(4, "QSGD s: levels per sign, codes in {−s, …, s}, ⌈log₂(2s+1)⌉ bits each", "[1, 32767]")
    bucket: int = key(512, "QSGD d: entries per bucket, each bucket with its own float32 norm (QSGD's 512)",
                      "[1, inf)")
    fraction: float = key(0.01, "top-k: the share of the parameters sent, k = ⌈fraction × P⌉", "(0, 1]")
    error_feedback: bool = key(False, "each device keeps what its codec did not send and adds it to its next "
                               "delta (needs `runtime.placement: device`)",
                               note="The residual is float32 over the trainable parameters, one per device, held "
                                    "where the device's jobs train (ResNet-18: 44.7 MB a device, 4.47 GB for 100); a "
                                    "run whose residuals do not fit in memory is refused before anything is "
                                    "written. A dropped job never trains, so it leaves its device's residual as it "
                                    "was; an update the server rejects was sent, so its residual stands (a "
                                    "non-finite one is reset to zero). Residuals are in the checkpoints (under torchrun each "
                                    "worker writes its devices'); a run whose residual checkpoints do not fit on the "
                                    "run dir's disk is refused before anything is written.")

    def __post_init__(self) -> None:
        check_fields(self, "compression")
        if self.error_feedback and self.codec == "none":
            _fail("compression.error_feedback", True, "false with compression.codec=none (nothing is left unsent "
                  "to feed back)")

    @property
    def active(self) -> bool:
        return self.codec != "none"
