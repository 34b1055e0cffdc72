#!/usr/bin/env bash
# One GPU session in one go (<= 7 minutes on one H100), in this order:
#   1. tests/gpu                                   (bytes: runtime.deterministic, graphs, W = 3)
#   2. the whole-run figure                        (`seafl run configs/cifar10_resnet18.yaml`, >= 200 jobs)
#   3. the A/B table of the levers, one flag each  (benchmarks/gpu_levers.py)
#   4. the microbenchmark                          (benchmarks/gpu_throughput.py: bare loops, ceilings, ours)
#
#     bash benchmarks/gpu_session.sh            # all four;  "tests", "run", "levers" or "bench" for one part
#
# Run it on the device kind nvidia-h100-x1 by name, so figures compare across sessions. Every step
# runs under `timeout`; logs go to $OUT (default ./gpu-out) and are packed into $OUT/gpu_session.tar.gz.
# Needs torch with CUDA, lightning, torchvision, numpy, scikit-learn, pyyaml, pytest; not wandb, not an
# installed package (PYTHONPATH points at this checkout).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/logs"
LOGS=$OUT/logs
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PART=${1:-all}
{ nvidia-smi; python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"; } \
    > "$LOGS/env.txt" 2>&1
status=0
step() {  # step NAME SECONDS COMMAND...: run under timeout, log to $LOGS/NAME.log, remember a failure
    local name=$1 limit=$2
    shift 2
    echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s)"
    timeout "$limit" "$@" 2>&1 | tee "$LOGS/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc" | tee -a "$LOGS/summary.txt"
    status=$((status | rc))
}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
# the byte tests first: they are what a session must not run out of time before
want tests && step tests_gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_reproducible.py \
    tests/gpu/test_gpu_transport.py tests/gpu/test_batched_cuda.py tests/gpu/test_cuda.py
want run && step full_run 100 python3 benchmarks/gpu_full_run.py --jobs 200
want levers && step levers 110 python3 benchmarks/gpu_levers.py
want bench && step throughput 110 python3 benchmarks/gpu_throughput.py --models resnet18,lenet5 --no-full-run
tar -czf "$OUT/gpu_session.tar.gz" -C "$OUT" logs
echo "gpu_session: exit status $status; logs in $OUT/gpu_session.tar.gz" | tee -a "$LOGS/summary.txt"
exit $status
