#!/usr/bin/env bash
# Stop the private SLURM cluster started by start.sh (only the daemons it
# started, found via BASE_DIR/run/*.bgpid and checked by /proc/PID/comm).
#
# usage: stop.sh BASE_DIR [--purge]     --purge: also rm -rf BASE_DIR
set -uo pipefail

B=$(realpath -m "${1:?usage: stop.sh BASE_DIR [--purge]}")
PURGE=0; [ "${2:-}" = --purge ] && PURGE=1
export SLURM_CONF="$B/etc/slurm.conf"

pid_of() {   # pid_of NAME COMM -> prints pid if BASE/run/NAME.bgpid is alive with that comm
    local f="$B/run/$1.bgpid" p
    [ -f "$f" ] || return 1
    p=$(cat "$f")
    grep -qx "$2" "/proc/$p/comm" 2>/dev/null && echo "$p"
}

stop_pid() { # stop_pid PID LABEL : SIGTERM, wait up to 20 s, then SIGKILL
    local p=$1 i
    kill -TERM "$p" 2>/dev/null || return 0
    for i in $(seq 100); do
        [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null || { echo "stopped $2 ($p)"; return 0; }
        sleep 0.2
    done
    echo "killing $2 ($p) with SIGKILL"; kill -KILL "$p" 2>/dev/null
}

# 1. cancel remaining jobs while slurmctld is still up
if p=$(pid_of slurmctld slurmctld); then
    jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// }" ]; then
        timeout 10 scancel $jobs 2>/dev/null
        for i in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
    fi
fi

# 2. daemons in reverse start order
for d in slurmd:slurmd slurmctld:slurmctld slurmdbd:slurmdbd mariadbd:mariadbd munged:munged; do
    name=${d%%:*}; comm=${d##*:}
    if p=$(pid_of "$name" "$comm"); then stop_pid "$p" "$name"; fi
    rm -f "$B/run/$name.bgpid"
done

# 3. orphaned slurmstepd of this cluster (they keep fds into $B/spool/d)
for p in $(pgrep -x slurmstepd 2>/dev/null); do
    if ls -l "/proc/$p/fd" 2>/dev/null | grep -q -- "$B/"; then stop_pid "$p" slurmstepd; fi
done

[ "$PURGE" = 1 ] && rm -rf "$B" && echo "removed $B"
exit 0
