"""A kill soak's driver: every case of a plan, one after another, in one torchrun job (tests/dist/test_kill_soak.py,
benchmarks/kill_soak.py).

    torchrun --nproc_per_node=3 --max-restarts=K tests/soak_driver.py PLAN.json

PLAN.json: ``{"cases": [{"args": [overrides...], "out": DIR}, ...], "kills": [{"case": i, "fault": SPEC}, ...]}``.
Attempt n of the job (``TORCHELASTIC_RESTART_COUNT``) arms kill n (``SEAFL_FAULT=SPEC#n``, runtime/faults.py) for
its case only, and runs the cases in order with the CLI's ``main`` (``seafl run configs/quickstart.yaml ARGS --out
DIR``): cases done by an earlier attempt are found completed at once, the one a kill cut short resumes from its
checkpoint, so K kills cost K restarts and every interpreter start is shared by the cases of its attempt. A rank
whose run failed (a peer was killed) leaves with that code, as ``seafl`` does under torchrun.
"""
import json
import os
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def main() -> int:
    from seafl_dist.cli import main as seafl_main
    plan = json.loads(Path(sys.argv[1]).read_text())
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    kill = plan["kills"][attempt] if attempt < len(plan["kills"]) else None
    for i, case in enumerate(plan["cases"]):
        os.environ.pop("SEAFL_FAULT", None)
        if kill is not None and kill["case"] == i:
            os.environ["SEAFL_FAULT"] = f"{kill['fault']}#{attempt}"
        code = seafl_main(["run", str(QUICKSTART), *case["args"], "--out", case["out"]])
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as seafl does under torchrun: peers may be gone, gloo's threads must not abort the exit
