"""Compressed uploads under torchrun (issue 41, part C): workers send the codec's bytes over the same non-blocking
transport, rank 0 decodes them, and W = 3 gives the run dir of one process with every codec, error feedback (on
per-device placement) included. One torchrun job runs the six codecs' runs (launching.run_batch)."""
import pytest

from launching import run_batch, same_summary
from resuming import reference
from small_runs import SMALL

pytestmark = pytest.mark.dist

CODECS = {"fp16": [], "bf16": [], "int8": [], "qsgd": ["compression.levels=2", "compression.bucket=128"],
          "topk": ["compression.fraction=0.05"],
          "topk+feedback": ["compression.fraction=0.05", "compression.error_feedback=true", "runtime.placement=device"]}


def overrides(name):
    return [*SMALL, f"compression.codec={name.split('+')[0]}", "clock.upload_s=5", *CODECS[name]]


@pytest.fixture(scope="module")
def on_ranks(tmp_path_factory):
    """Every codec's run on 3 ranks, all in one torchrun job (launching.run_batch)."""
    where = tmp_path_factory.mktemp("w3")
    proc, outs = run_batch(3, {name: overrides(name) for name in CODECS}, where)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert proc.stderr.count("on 3 ranks (gloo)") >= len(CODECS), proc.stderr[-5000:]
    return outs


@pytest.mark.parametrize("name", list(CODECS))
def test_three_ranks_equal_one_process_with_every_codec(name, tmp_path, on_ranks):
    ref, got = reference(tmp_path / "w1", overrides(name)), on_ranks[name]
    for file in ("config.yaml", "events.jsonl", "metrics.csv", "model.pt"):
        assert (got / file).read_bytes() == (ref / file).read_bytes(), file
    assert same_summary(ref, got)["status"] == "completed"
    assert '"bytes": ' in (got / "events.jsonl").read_text()
