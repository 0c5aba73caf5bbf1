#!/usr/bin/env bash
# A one-node Slurm cluster on loopback, everything (munge key and socket,
# slurm.conf, state, logs) in one directory: for trying the sbatch scripts
# on one machine, and what tests/deploy.rs runs them on.
#
#   deploy/slurm/local-cluster.sh start DIR    # then: export SLURM_CONF=DIR/slurm.conf
#   deploy/slurm/local-cluster.sh stop DIR
#
# Needs root and Debian's slurm-wlm and munge packages (slurmctld, slurmd,
# munged, sinfo). Nothing outside DIR is written and no system service is
# touched: munged, slurmctld and slurmd run with DIR's files on free ports,
# and `stop` ends exactly the processes `start` recorded in DIR/*.pid.
set -euo pipefail

cmd=${1:?usage: local-cluster.sh start|stop DIR}
dir=${2:?usage: local-cluster.sh start|stop DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
    for d in slurmd slurmctld munged; do
        if [ -f "$dir/$d.started" ]; then
            pid=$(cat "$dir/$d.started")
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
            rm -f "$dir/$d.started"
        fi
    done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "local-cluster.sh: start or stop, not $cmd" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "local-cluster.sh: needs root (slurmd runs jobs as their users)" >&2; exit 1; }
for t in munged slurmctld slurmd sinfo; do
    command -v "$t" >/dev/null || { echo "local-cluster.sh: $t is not installed (slurm-wlm, munge)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
cpus=$(nproc)
ctld_port=$(free_port)
slurmd_port=$(free_port)
# munged wants its socket reachable by every user (jobs run as theirs).
chmod 755 "$dir"
mkdir -p "$dir/state" "$dir/spool"

# munge: a fresh key, its own socket.
head -c 1024 /dev/urandom >"$dir/munge.key"
chmod 600 "$dir/munge.key"
munged --foreground --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
    </dev/null >"$dir/munged.out" 2>&1 &
echo $! >"$dir/munged.started"

cat >"$dir/slurm.conf" <<CONF
ClusterName=paraforge-local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=10
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$dir/slurm.conf

for _ in $(seq 50); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge.socket" ] || { cat "$dir/munged.out" "$dir/munged.log" >&2 2>/dev/null; stop; echo "local-cluster.sh: munged did not start" >&2; exit 1; }

slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$dir/slurmctld.out" 2>&1 &
echo $! >"$dir/slurmctld.started"
slurmd -D -f "$SLURM_CONF" -N "$node" </dev/null >"$dir/slurmd.out" 2>&1 &
echo $! >"$dir/slurmd.started"

for _ in $(seq 120); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
    case $state in idle*) break ;; esac
    sleep 0.5
done
if [[ $state != idle* ]]; then
    tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out >&2 2>/dev/null || true
    stop
    echo "local-cluster.sh: node $node did not become idle (state '${state:-none}')" >&2
    exit 1
fi
echo "local-cluster.sh: node $node idle ($cpus CPUs); export SLURM_CONF=$SLURM_CONF"
