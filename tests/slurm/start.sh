#!/usr/bin/env bash
# Start a private single-node SLURM 22.05 (Debian 12 slurm-wlm) cluster with
# accounting (slurmdbd + MariaDB) entirely under one directory.
#
# usage: start.sh BASE_DIR
# needs (apt): slurmctld slurmd slurm-client slurmdbd munge mariadb-server
# Run as root (SlurmUser=root, mariadbd --user=root).
# Afterwards:  source BASE_DIR/env.sh   (exports SLURM_CONF, USER)
# Stop with:   stop.sh BASE_DIR [--purge]
set -euo pipefail

B=$(realpath -m "${1:?usage: start.sh BASE_DIR}")
CLUSTER=${SRB_SLURM_CLUSTER:-srbtest}
PARTITION=${SRB_SLURM_PARTITION:-debug}
NODE=localhost            # fixed node name; slurmd is started with -N $NODE

t0=$(date +%s.%N)
log() { printf '[start.sh %6.2fs] %s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$*"; }
die() { echo "start.sh: ERROR: $*" >&2; exit 1; }

# wait_for SECONDS CMD... : poll CMD every 0.2 s until it succeeds
wait_for() {
    local limit=$1; shift
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.2
    done
}

for bin in munged mungekey mariadbd mariadb-install-db mariadb mariadb-admin \
           slurmdbd slurmctld slurmd sbatch sacct sacctmgr scontrol sinfo; do
    command -v "$bin" >/dev/null || die "$bin not found (apt-get install slurmctld slurmd slurm-client slurmdbd munge mariadb-server)"
done
[ "$(id -u)" = 0 ] || die "must run as root"

mkdir -p "$B"/{etc,log,run,spool/ctld,spool/d,munge,db}
chmod 755 "$B/munge"           # munged: socket dir must be world-executable

# ---- free TCP ports on 127.0.0.1 (kept across restarts in ports.env) -------
if [ ! -f "$B/ports.env" ]; then
    python3 - > "$B/ports.env" <<'EOF'
import socket
socks = []
for name in ("CTLD_PORT", "SLURMD_PORT", "DBD_PORT", "DB_PORT"):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
    print(f"{name}={s.getsockname()[1]}")
EOF
fi
# shellcheck disable=SC1091
. "$B/ports.env"

# ---- hardware of this machine as slurmd sees it -----------------------------
HW=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')   # CPUs=.. Boards=.. ... RealMemory=..

MSOCK="$B/munge/munge.sock"

# the private MariaDB's password for slurmdbd: generated once, kept in a 600 file, never printed
if [ ! -f "$B/etc/dbpass" ]; then
    umask 077
    python3 -c "import secrets; print(secrets.token_urlsafe(24))" > "$B/etc/dbpass"
    umask 022
fi
DBPASS=$(cat "$B/etc/dbpass")

# ---- config files -----------------------------------------------------------
cat > "$B/etc/slurm.conf" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# munge socket for slurmctld/slurmd/client RPCs
AuthInfo=socket=$MSOCK
# munge socket for connections to slurmdbd (sacct, sacctmgr, slurmctld->dbd)
AccountingStoragePass=socket=$MSOCK
StateSaveLocation=$B/spool/ctld
SlurmdSpoolDir=$B/spool/d
SlurmctldPidFile=$B/run/slurmctld.pid
SlurmdPidFile=$B/run/slurmd.pid
SlurmctldLogFile=$B/log/slurmctld.log
SlurmdLogFile=$B/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$B/etc/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
# no CPU binding: task/affinity pinned 1-CPU jobs to CPU 0, where another
# pinned busy process starved them (job TIMEOUT with an empty log)
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 $HW State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
: > "$B/etc/plugstack.conf"

# slurmdbd has no -f option: it reads slurmdbd.conf from dirname($SLURM_CONF)
cat > "$B/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$B/log/slurmdbd.log
PidFile=$B/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
chmod 600 "$B/etc/slurmdbd.conf"     # slurmdbd insists on 600

cat > "$B/env.sh" <<EOF
export SLURM_CONF=$B/etc/slurm.conf
export USER=\${USER:-\$(id -un)}
EOF
export SLURM_CONF="$B/etc/slurm.conf"
export USER=${USER:-$(id -un)}

# running PIDFILE COMM : pid in PIDFILE is alive and its /proc/PID/comm is COMM
running() { [ -f "$1" ] && grep -qx "$2" "/proc/$(cat "$1")/comm" 2>/dev/null; }

# ---- 1. munged --------------------------------------------------------------
if ! running "$B/run/munged.bgpid" munged; then
    [ -f "$B/munge/munge.key" ] || mungekey --create --keyfile="$B/munge/munge.key"
    chmod 600 "$B/munge/munge.key"
    nohup munged -F --socket="$MSOCK" --key-file="$B/munge/munge.key" \
        --pid-file="$B/munge/munged.pid" --log-file="$B/log/munged.log" \
        --seed-file="$B/munge/munged.seed" >"$B/log/munged.out" 2>&1 &
    echo $! > "$B/run/munged.bgpid"
fi
wait_for 10 bash -c "munge -n -S '$MSOCK' | unmunge -S '$MSOCK'" || die "munged not ready (see $B/log/munged.log)"
log "munged up (pid $(cat "$B/run/munged.bgpid"))"

# ---- 2. MariaDB (private datadir, socket, port) -----------------------------
DBSOCK="$B/db/mysqld.sock"
if [ ! -d "$B/db/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=root --datadir="$B/db/data" \
        --auth-root-authentication-method=normal --skip-test-db \
        >"$B/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $B/log/mariadb-install.log)"
    NEWDB=1
fi
if ! running "$B/run/mariadbd.bgpid" mariadbd; then
    nohup mariadbd --no-defaults --user=root --datadir="$B/db/data" \
        --socket="$DBSOCK" --pid-file="$B/db/mariadbd.pid" \
        --log-error="$B/log/mariadbd.err" \
        --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
        --innodb-buffer-pool-size=64M --innodb-log-file-size=8M \
        --innodb-lock-wait-timeout=900 >"$B/log/mariadbd.out" 2>&1 &
    echo $! > "$B/run/mariadbd.bgpid"
fi
wait_for 60 mariadb-admin --no-defaults -S "$DBSOCK" -u root ping || die "mariadbd not ready (see $B/log/mariadbd.err)"
if [ "${NEWDB:-0}" = 1 ]; then
    mariadb --no-defaults -S "$DBSOCK" -u root -e "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
fi
log "mariadbd up (pid $(cat "$B/run/mariadbd.bgpid"), port $DB_PORT)"

# ---- 3. slurmdbd ------------------------------------------------------------
if ! running "$B/run/slurmdbd.bgpid" slurmdbd; then
    nohup slurmdbd -D >"$B/log/slurmdbd.out" 2>&1 &     # uses $SLURM_CONF's dir
    echo $! > "$B/run/slurmdbd.bgpid"
fi
wait_for 60 sacctmgr -n show cluster || die "slurmdbd not ready (see $B/log/slurmdbd.log)"
if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
log "slurmdbd up (pid $(cat "$B/run/slurmdbd.bgpid"), port $DBD_PORT)"

# ---- 4. slurmctld -----------------------------------------------------------
if ! running "$B/run/slurmctld.bgpid" slurmctld; then
    nohup slurmctld -D -f "$SLURM_CONF" >"$B/log/slurmctld.out" 2>&1 &
    echo $! > "$B/run/slurmctld.bgpid"
fi
wait_for 60 bash -c 'scontrol ping | grep -q UP' || die "slurmctld not up (see $B/log/slurmctld.log)"
log "slurmctld up (pid $(cat "$B/run/slurmctld.bgpid"), port $CTLD_PORT)"

# ---- 5. slurmd --------------------------------------------------------------
if ! running "$B/run/slurmd.bgpid" slurmd; then
    nohup slurmd -D -f "$SLURM_CONF" -N "$NODE" >"$B/log/slurmd.out" 2>&1 &
    echo $! > "$B/run/slurmd.bgpid"
fi
wait_for 60 bash -c "sinfo -h -n $NODE -o %T | grep -qx idle" || die "node not idle: $(sinfo -h -o '%T %E' 2>&1) (see $B/log/slurmd.log)"
log "slurmd up (pid $(cat "$B/run/slurmd.bgpid")), node idle"

# ---- 6. ctld registered with dbd (avoids half-recorded first job) -----------
wait_for 30 bash -c "sacctmgr -n -P show cluster $CLUSTER format=controlport | grep -qx $CTLD_PORT" \
    || die "slurmctld did not register with slurmdbd"
log "cluster '$CLUSTER' registered in slurmdbd; ready. source $B/env.sh"
