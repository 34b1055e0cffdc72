#!/usr/bin/env bash
# One GPU session in one go (<= ~9.5 minutes): the GPU tests, then the throughput benchmark
# (ResNet-18 and LeNet-5, the models with goals; BENCH_MODELS=resnet18,vgg16,lenet5 for all three)
# and a profile of ours for each (where the time goes).
#
#     bash benchmarks/gpu_session.sh            # both;  "tests" or "bench" for one part
#
# Every step runs under `timeout`; logs go to $OUT (default ./gpu-out). Needs torch with CUDA,
# lightning, torchvision, numpy, scikit-learn, pyyaml, pytest; not wandb, not an installed package
# (PYTHONPATH points at this checkout).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
PART=${1:-all}
{ nvidia-smi; python3 -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"; } \
    > "$OUT/env.txt" 2>&1
status=0
if [ "$PART" = all ] || [ "$PART" = tests ]; then
    timeout 220 python3 -m pytest -q tests/gpu -s -p no:cacheprovider 2>&1 | tee "$OUT/tests_gpu.log"
    status=$((status | ${PIPESTATUS[0]}))
fi
if [ "$PART" = all ] || [ "$PART" = bench ]; then
    timeout 300 python3 benchmarks/gpu_throughput.py --models "${BENCH_MODELS:-resnet18,lenet5}" 2>&1 \
        | tee "$OUT/gpu_throughput.log"
    status=$((status | ${PIPESTATUS[0]}))
    for what in resnet18:20 lenet5:1 lenet5:40; do  # not part of the exit status: diagnostics only
        timeout 30 python3 benchmarks/gpu_throughput.py --profile "$what" > "$OUT/profile_${what/:/_G}.log" 2>&1
    done
fi
echo "gpu_session: exit status $status; logs in $OUT" | tee -a "$OUT/summary.txt"
exit $status
