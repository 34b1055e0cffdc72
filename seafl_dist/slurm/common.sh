# Shell functions shared by slurm/run.sbatch, multinode.sbatch and sweep.sbatch (docs/slurm.md).
#
# Sourced, never run: a script finds this file through the project's python, which it needs anyway
# (sbatch runs a copy of the script from Slurm's spool directory, so nothing can be found beside it):
#
#   me=run.sbatch
#   py=${SEAFL_PYTHON:-$(command -v python || command -v python3)}
#   common=$("$py" -m seafl_dist.slurm 2>/dev/null) || { echo "$me: ..." >&2; exit 2; }
#   . "$common"
#
# The functions read $me (the script's name, for messages) and $py (the project's python).

# seafl_run_args CONFIG [ARGS...]: the array `args`: the arguments as given, plus
# `--out runs/<config stem>-<job id>` when they name no --out (a requeued job, same id, finds it again).
seafl_run_args() {
    args=("$@")
    local a stem
    for a in "$@"; do
        case "$a" in --out|--out=*) return 0 ;; esac
    done
    stem=$(basename "$1")
    args+=(--out "runs/${stem%.*}-${SLURM_JOB_ID}")
}

# seafl_ranks EXTRA: the variable `nproc`, ranks to start on this node: NPROC_PER_NODE if set, else
# the node's GPUs + EXTRA, else (no GPU) its CPUs + EXTRA with one torch thread per rank. Also sets
# `gpus` and `cpus` for the scripts' log line.
seafl_ranks() {
    cpus=${SLURM_CPUS_ON_NODE:-1}
    gpus=${SLURM_GPUS_ON_NODE:-}
    if [ -z "$gpus" ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        gpus=$(awk -F, '{print NF}' <<< "$CUDA_VISIBLE_DEVICES")
    fi
    gpus=${gpus:-0}
    if [ -n "${NPROC_PER_NODE:-}" ]; then
        nproc=$NPROC_PER_NODE
    elif [ "$gpus" -gt 0 ] 2>/dev/null; then
        nproc=$((gpus + $1))
    else
        nproc=$((cpus + $1))
        export OMP_NUM_THREADS=1
    fi
}

# seafl_dry_run WORLD COMMAND [ARGS...]: `seafl COMMAND ARGS --dry-run` as rank 0 of WORLD ranks, so a
# bad config, missing data or an unusable run dir ends the job in seconds, before any rank starts.
# Its report goes to the job's log (stderr). SEAFL_DRY_RUN=0 skips it.
seafl_dry_run() {
    local world=$1 rc
    shift
    [ "${SEAFL_DRY_RUN:-1}" = 0 ] && return 0
    WORLD_SIZE=$world RANK=0 LOCAL_RANK=0 "$py" -m seafl_dist "$@" --dry-run >&2
    rc=$?
    if [ "$rc" != 0 ]; then
        echo "$me: the dry run failed (exit $rc, its error above); nothing was started" >&2
        exit "$rc"
    fi
}

# seafl_step COMMAND...: run COMMAND (the job step: srun ...) in the background and wait for it.
# SIGUSR1 (the time-limit warning, --signal=B:USR1@120) and SIGTERM (scancel, preemption, requeue)
# reach only this script: it sends SIGTERM to the step's processes, so the run checkpoints and
# stops, and waits for the run's own exit status. After SIGUSR1 it requeues the job
# (SEAFL_REQUEUE=0: it does not). Exits with the step's status.
seafl_step() {
    "$@" &
    local step=$! rc
    caught="" timelimit=0
    trap 'seafl_forward USR1' USR1
    trap 'seafl_forward TERM' TERM
    while true; do  # `wait` returns early when a trapped signal arrives: wait again for the run itself
        caught=""
        wait "$step"
        rc=$?
        [ -z "$caught" ] && break
    done
    if [ "$timelimit" = 1 ] && [ "${SEAFL_REQUEUE:-1}" = 1 ]; then
        echo "$me: time limit near; requeueing job $SLURM_JOB_ID to resume from the checkpoint" >&2
        scontrol requeue "$SLURM_JOB_ID"
    fi
    exit "$rc"
}

seafl_forward() {
    caught=$1
    [ "$1" = USR1 ] && timelimit=1
    echo "$me: SIG$1 received; sending SIGTERM to the run (it checkpoints and stops)" >&2
    # to the step's processes (torchrun and every rank), not to srun: srun answers SIGTERM with SIGKILL
    scancel --signal=TERM "$SLURM_JOB_ID.0"
}
