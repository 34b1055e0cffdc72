"""Compressed uploads under torchrun (issue 41, part C): workers send the codec's bytes over the same non-blocking
transport, rank 0 decodes them, and W = 3 gives the run dir of one process with every codec, error feedback (on
per-device placement) included."""
import pytest

from launching import in_process_and_on_ranks, same_summary
from small_runs import SMALL

pytestmark = pytest.mark.dist

CODECS = {"fp16": [], "bf16": [], "int8": [], "qsgd": ["compression.levels=2", "compression.bucket=128"],
          "topk": ["compression.fraction=0.05"],
          "topk+feedback": ["compression.fraction=0.05", "compression.error_feedback=true", "runtime.placement=device"]}


@pytest.mark.parametrize("name", list(CODECS))
def test_three_ranks_equal_one_process_with_every_codec(name, tmp_path):
    overrides = [*SMALL, f"compression.codec={name.split('+')[0]}", "clock.upload_s=5", *CODECS[name]]
    ref, got = in_process_and_on_ranks(3, overrides, tmp_path)
    for file in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (got / file).read_bytes() == (ref / file).read_bytes(), file
    assert same_summary(ref, got)["status"] == "completed"
    assert '"bytes": ' in (got / "events.jsonl").read_text()
