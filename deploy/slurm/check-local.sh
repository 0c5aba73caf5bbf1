#!/usr/bin/env bash
# Runs a paraforge job through paraforge-cpu.sbatch on a one-node Slurm
# cluster that local-cluster.sh starts in DIR/cluster, and stops it again.
# tests/deploy.rs runs it and then checks the job's output.
#
#   deploy/slurm/check-local.sh DIR JOB.toml      (the batch output goes to DIR/slurm.out)
#
# PARAFORGE (the binary) and ORT_DYLIB_PATH come from the environment, as
# for sbatch. Exits 77, with "SKIPPED: reason" last on standard output,
# where Slurm or munge is not installed or we are not root.
set -uo pipefail

dir=${1:?usage: check-local.sh DIR JOB.toml}
job=${2:?usage: check-local.sh DIR JOB.toml}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }

for t in slurmctld slurmd munged sbatch sinfo; do
    command -v "$t" >/dev/null || skip "$t is not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || skip "a local Slurm cluster needs root"

"$here/local-cluster.sh" start "$dir/cluster" || { echo "check-local.sh: the cluster did not start" >&2; exit 1; }
trap '"$here/local-cluster.sh" stop "$dir/cluster"' EXIT
export SLURM_CONF=$dir/cluster/slurm.conf

start=$(date +%s)
sbatch --wait --chdir="$dir" --output="$dir/slurm.out" --time=10 \
    "$here/paraforge-cpu.sbatch" "$job"
rc=$?
echo "check-local.sh: sbatch exited $rc after $(( $(date +%s) - start )) s; the batch output:"
cat "$dir/slurm.out"
exit $rc
