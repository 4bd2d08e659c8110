#!/usr/bin/env bash
# The body shared by launch/slurm/*.sbatch (exec'd by them inside the batch job; not a template).
#
# One rank per GPU: `srun` starts SLURM_NTASKS tasks; each runs `python -m launch.slurm_env`,
# which maps SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS and the first host of the step's node list
# to RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and execs launch/train.py.
#
# Preemption: the templates ask for `--signal=B:USR1@SECONDS`; this shell forwards USR1 to the
# ranks, which checkpoint and exit 0, then it requeues the job (`scontrol requeue`), and the
# requeued job resumes from the run's `latest` checkpoint. SIGTERM (scancel, `scontrol requeue`,
# preemption) reaches the ranks directly: they checkpoint and exit; SLURM requeues or ends the
# job itself. A run is finished when RUN_DIR/done.json exists.
#
# Inputs (environment): CONFIG, DS_CONFIG (required); RUN_DIR (optional, passed as train.py
# --run-dir; default: the config's run_dir); PYTHON (default .venv/bin/python); TRAIN_ARGS
# (extra train.py arguments, split on spaces; --fresh applies to the job's first start only,
# so a requeue resumes the checkpoint it just wrote instead of wiping it); MLSYS_MAX_RESTARTS
# (default 50).
set -uo pipefail

die() { echo "run.sh: $*" >&2; exit 1; }

[[ -n ${SLURM_JOB_ID:-} ]] || die "not inside a SLURM job; submit a launch/slurm/*.sbatch with sbatch"
: "${CONFIG:?set CONFIG to a run config (YAML)}"
: "${DS_CONFIG:?set DS_CONFIG to a DeepSpeed config (JSON)}"
[[ -f $CONFIG ]] || die "CONFIG: no such file: $CONFIG (relative paths start at $PWD)"
[[ -f $DS_CONFIG ]] || die "DS_CONFIG: no such file: $DS_CONFIG"
PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
[[ -x $PYTHON ]] || die "PYTHON: not executable: $PYTHON (set PYTHON to your environment's python)"

# One rank per GPU: tasks per node must equal GPUs per node when both are given.
if [[ -n ${SLURM_GPUS_PER_NODE:-} && -n ${SLURM_NTASKS_PER_NODE:-} ]] \
    && [[ ${SLURM_GPUS_PER_NODE##*:} != "$SLURM_NTASKS_PER_NODE" ]]; then
    die "--ntasks-per-node=$SLURM_NTASKS_PER_NODE but --gpus-per-node=$SLURM_GPUS_PER_NODE: one rank per GPU needs them equal"
fi

restarts="${SLURM_RESTART_COUNT:-0}"
read -r -a given_args <<< "${TRAIN_ARGS:-}"
train_args=()
for arg in "${given_args[@]}"; do
    if [[ $arg == --fresh ]] && (( restarts > 0 )); then
        echo "run.sh: restart $restarts: not passing --fresh again (it applied to the first start)"
        continue
    fi
    train_args+=("$arg")
done
if [[ -n ${RUN_DIR:-} ]]; then
    train_args+=(--run-dir "$RUN_DIR")
else
    # The config's run dir; loading it also validates the config before any rank starts.
    RUN_DIR="$("$PYTHON" -c 'import sys
from mlsys.config import ConfigError, load_run_config
try:
    print(load_run_config(sys.argv[1]).out_dir)
except ConfigError as err:
    sys.exit(f"config error: {err}")' "$CONFIG")" || exit 2
fi

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"
echo "run.sh: job $SLURM_JOB_ID (restart $restarts) on ${SLURM_JOB_NODELIST:-?}:" \
    "${SLURM_NTASKS:-?} ranks, config $CONFIG, ds $DS_CONFIG, run dir $RUN_DIR"

srun --kill-on-bad-exit=1 "$PYTHON" -m launch.slurm_env \
    "$PYTHON" launch/train.py --config "$CONFIG" --ds_config "$DS_CONFIG" --no-progress \
    "${train_args[@]}" &
srun_pid=$!

signalled=""  # USR1: time limit ahead (we requeue); TERM: SLURM is ending or requeueing the job
# shellcheck disable=SC2317  # invoked by the traps below
on_signal() {
    signalled="$1"
    echo "run.sh: got SIG$1; asking the ranks to checkpoint and exit" >&2
    kill -USR1 "$srun_pid" 2>/dev/null || true
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM

rc=0
while :; do
    wait "$srun_pid"
    rc=$?
    kill -0 "$srun_pid" 2>/dev/null || break  # wait was only interrupted by a signal
done

if [[ -f $RUN_DIR/done.json ]]; then
    echo "run.sh: finished; model in $RUN_DIR/final"
    exit 0
fi
if [[ $signalled == USR1 && $rc -eq 0 ]]; then
    if (( restarts >= ${MLSYS_MAX_RESTARTS:-50} )); then
        die "checkpointed, but not requeueing: $restarts restarts already (MLSYS_MAX_RESTARTS)"
    fi
    echo "run.sh: checkpointed before the time limit; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
if [[ $signalled == TERM ]]; then
    echo "run.sh: stopped by SIGTERM (srun exit $rc); SLURM decides whether to requeue" >&2
    exit "$rc"
fi
echo "run.sh: training exited $rc without $RUN_DIR/done.json" >&2
exit $(( rc == 0 ? 1 : rc ))
