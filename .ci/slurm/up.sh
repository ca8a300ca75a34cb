#!/usr/bin/env bash
# Start a real single-node SLURM cluster (with accounting) on localhost, from
# Debian 12 packages, without systemd. Idempotent: if the cluster this script
# started earlier is still healthy it only prints the summary.
#
#   .ci/slurm/up.sh     # as root; ~10 s for apt-get install, ~6 s to start
#   .ci/slurm/down.sh   # stops exactly what up.sh started
#
# On failure it prints the daemons' logs, stops what it started and exits 1.
#
# Env knobs: BR_SLURM_STATE (state/log dir, default /tmp/br-slurm),
#            BR_SLURM_DB_PORT (private MariaDB port, default 3307),
#            BR_SLURM_USERS (users added to account "test" besides root),
#            BR_SLURM_SPOOL (slurmd spool, default /var/lib/br-slurm/slurmd).
set -euo pipefail

STATE=${BR_SLURM_STATE:-/tmp/br-slurm}
DB_PORT=${BR_SLURM_DB_PORT:-3307}
USERS=${BR_SLURM_USERS:-}
# slurmd executes job scripts from its spool dir, so keep it off /tmp (which
# may be mounted noexec on CI machines).
SPOOL=${BR_SLURM_SPOOL:-/var/lib/br-slurm/slurmd}
CLUSTER=brci
ACCOUNT=test
DB_PASS=br-slurm-ci          # throw-away password; the DB only listens on 127.0.0.1
CONF_DIR=/etc/slurm          # Debian's slurm binaries read /etc/slurm/slurm.conf
MARKER="# managed by batched-reasoning .ci/slurm/up.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)

log() { echo "[slurm-up] $*"; }

[ "$(id -u)" = 0 ] || { echo "up.sh must run as root" >&2; exit 1; }

# On failure show every daemon's log, so CI output says why.
show_logs() {
    echo "[slurm-up] FAILED after $(($(date +%s) - T0)) s; daemon logs follow" >&2
    for f in "$STATE"/log/* /var/log/munge/munged.log; do
        [ -s "$f" ] || continue
        # NAME.out (stderr) repeats NAME.log, the daemon's own log; show one
        case $f in *.out) [ -s "${f%.out}.log" ] && continue ;; esac
        echo "===== $f (last 40 lines) =====" >&2
        tail -n 40 "$f" >&2 || true
    done
}
trap 'rc=$?; if [ $rc != 0 ]; then show_logs; "$HERE/down.sh" >&2 || true; fi; exit $rc' EXIT

# wait_for SECONDS DESCRIPTION CMD...: poll CMD until it succeeds; give up
# early if a daemon we started has died (its log says why).
wait_for() {
    local secs=$1 what=$2; shift 2
    local end=$(($(date +%s) + secs)) name
    until "$@" >/dev/null 2>&1; do
        for name in $(awk '{print $1}' "$STATE/pids" 2>/dev/null); do
            alive "$name" || { echo "[slurm-up] $name died while waiting for: $what" >&2; return 1; }
        done
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "[slurm-up] timed out after ${secs}s waiting for: $what" >&2
            return 1
        fi
        sleep 0.5
    done
}

# alive NAME: is the process recorded for NAME still the one we started?
# (pid + start time from /proc, so a recycled pid never matches)
alive() {
    local line pid start
    line=$(grep "^$1 " "$STATE/pids" 2>/dev/null) || return 1
    read -r _ pid start <<<"$line"
    [ -r "/proc/$pid/stat" ] || return 1
    [ "$(awk '{print $22}' "/proc/$pid/stat")" = "$start" ]
}

# ---------------------------------------------------------------- idempotency
if [ -f "$STATE/pids" ]; then
    healthy=1
    for d in mariadb munged slurmdbd slurmctld slurmd; do
        if grep -q "^$d " "$STATE/pids" && ! alive "$d"; then healthy=0; fi
    done
    if [ $healthy = 1 ] && sinfo -h >/dev/null 2>&1 && sacct -n -X >/dev/null 2>&1; then
        trap - EXIT
        log "cluster already up (state in $STATE)"
        sinfo
        exit 0
    fi
    log "previous cluster is unhealthy; stopping it and starting again"
    "$HERE/down.sh" || true
fi

# ---------------------------------------------------------------- packages
PKGS="munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    log "installing:$missing"
    # Keep apt from starting the services itself (a systemd host would start
    # munge/slurm/mariadb on the default ports and collide with ours).
    added_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        added_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } \
        >"$STATE.apt.log" 2>&1 || apt_rc=$?
    [ $added_policy = 0 ] || rm -f /usr/sbin/policy-rc.d
    [ $apt_rc = 0 ] || { tail -n 30 "$STATE.apt.log" >&2; exit 1; }
fi
T_PKG=$(date +%s)

# ---------------------------------------------------------------- refuse to fight foreign daemons
for port in 6817 6818 6819 "$DB_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "port $port is already in use by a process up.sh did not start;" \
             "stop it (e.g. a system slurm/mariadb) first" >&2
        exit 1
    fi
done

# ---------------------------------------------------------------- directories
mkdir -p "$STATE"/{log,slurmctld,run,mysqld} "$SPOOL"
rm -f "$STATE"/log/*   # fresh logs, so a failure report shows only this start
chmod 755 "$STATE" "$STATE"/{log,run,mysqld}
chown slurm:slurm "$STATE"/{log,slurmctld,run}   # slurmctld/slurmdbd drop to user slurm
chown mysql:mysql "$STATE/mysqld"                 # MariaDB socket + pid file
touch "$STATE/log/mariadb.log"; chown mysql:mysql "$STATE/log/mariadb.log"
: >"$STATE/pids"
mkdir -p /run/munge /var/log/munge /var/lib/munge  # /run is empty without systemd
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 755 /run/munge
[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }

# ---------------------------------------------------------------- configs
# Node line from what slurmd itself detects, so CPUs/sockets/threads match and
# the node is not drained; keep 10% (at least 512 MB) of memory for the OS.
NODE_HW=$(slurmd -C | head -n 1)
NODE=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$NODE_HW")
DETECTED_MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$NODE_HW")
CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$NODE_HW")
RESERVE=$((DETECTED_MEM / 10)); [ $RESERVE -ge 512 ] || RESERVE=512
REAL_MEM=$((DETECTED_MEM - RESERVE)); [ $REAL_MEM -ge 256 ] || REAL_MEM=$DETECTED_MEM
# Jobs without --mem must not grab the whole node.
DEF_MEM=$((REAL_MEM / CPUS)); [ $DEF_MEM -le 1024 ] || DEF_MEM=1024
NODE_LINE=$(sed -e "s/RealMemory=[0-9]*/RealMemory=$REAL_MEM/" <<<"$NODE_HW")

mkdir -p "$CONF_DIR"
if [ -f "$CONF_DIR/slurm.conf" ] && ! grep -qF "$MARKER" "$CONF_DIR/slurm.conf"; then
    cp -n "$CONF_DIR/slurm.conf" "$CONF_DIR/slurm.conf.before-br-slurm"
    log "kept the previous slurm.conf as $CONF_DIR/slurm.conf.before-br-slurm"
fi

cat >"$CONF_DIR/slurm.conf" <<EOF
$MARKER
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
# no cgroups / systemd here
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$DEF_MEM
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=300
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# sacct needs accounting: the snakemake slurm plugin polls job state with it
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
$NODE_LINE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

cat >"$CONF_DIR/slurmdbd.conf" <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
# slurmdbd refuses to start unless its config is private to SlurmUser.
chown slurm:slurm "$CONF_DIR/slurmdbd.conf"
chmod 600 "$CONF_DIR/slurmdbd.conf"

# ---------------------------------------------------------------- daemons
# start NAME USER CMD...: run CMD in the foreground of its own session,
# detached from this script, and record "NAME PID STARTTIME" for down.sh.
start() {
    local name=$1 user=$2; shift 2
    local wrap=()
    [ "$user" = root ] || wrap=(setpriv --reuid="$user" --regid="$user" --init-groups --)
    # setsid/nohup/setpriv all exec, so $! is the daemon's own pid
    setsid nohup "${wrap[@]}" "$@" >"$STATE/log/$name.out" 2>&1 </dev/null &
    local pid=$!
    sleep 0.2
    if [ ! -r "/proc/$pid/stat" ]; then
        echo "[slurm-up] $name exited at once" >&2
        return 1
    fi
    echo "$name $pid $(awk '{print $22}' "/proc/$pid/stat")" >>"$STATE/pids"
}

# MariaDB: a private instance (own datadir, socket, port) so a system
# MariaDB, if any, is left alone.
DB_DIR=$STATE/mysql
DB_SOCK=$STATE/mysqld/mysqld.sock
if [ ! -d "$DB_DIR/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR" \
        --auth-root-authentication-method=socket --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1
fi
start mariadb root mariadbd --no-defaults --user=mysql --datadir="$DB_DIR" \
    --socket="$DB_SOCK" --pid-file="$STATE/mysqld/mariadb.pid" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --log-error="$STATE/log/mariadb.log" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900
# (slurmdbd still logs "Database settings not recommended values:
#  innodb_buffer_pool_size" -- harmless at this size, keeps CI memory low)
wait_for 60 "mariadb" mariadb-admin --socket="$DB_SOCK" ping
mariadb --socket="$DB_SOCK" <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF

# munge: reuse a munged that already answers (e.g. started by the host),
# otherwise start our own.
if ! (munge -n | unmunge) >/dev/null 2>&1; then
    start munged munge munged -F
    wait_for 20 "munged" bash -c 'munge -n | unmunge'
fi

start slurmdbd root slurmdbd -D
wait_for 60 "slurmdbd (sacctmgr answering)" sacctmgr -n list cluster

# Associations: cluster, account "test", users in it (so sbatch works with and
# without --account, and the plugin's account guess via sacctmgr finds one).
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=ci Organization=ci >/dev/null 2>&1 || true
# root always: the warm-up job below is submitted as root.
for u in root $USERS; do
    sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" >/dev/null 2>&1 || true
    sacctmgr -n -P list assoc format=cluster,account,user | grep -q "^$CLUSTER|$ACCOUNT|$u\$" \
        || { echo "[slurm-up] association $CLUSTER/$ACCOUNT/$u missing" >&2; exit 1; }
done

start slurmctld root slurmctld -D
wait_for 60 "slurmctld" scontrol ping
start slurmd root slurmd -D
node_idle() { sinfo -h -N -n "$NODE" -o %t | grep -qx idle; }
wait_for 60 "node $NODE idle" node_idle
wait_for 30 "sacct" sacct -n -X

# End-to-end check: one tiny job must run and reach accounting. Poll sacct
# ourselves: `sbatch --wait` backs off and adds ~10 s.
T_WARM=$(date +%s)
job=$(cd /tmp && sbatch --parsable --time=1 --mem=10 --job-name=br-slurm-warmup --output=/dev/null --wrap=true)
job=${job%%;*}
warm_done() { sacct -n -X -P -j "$job" -o State | grep -qx COMPLETED; }
wait_for 60 "warm-up job $job COMPLETED in sacct" warm_done \
    || { sacct -j "$job" -o JobID,State,ExitCode >&2; scontrol show job "$job" >&2 || true; exit 1; }

trap - EXIT   # the cluster is up; nothing below is a failure of the cluster
T1=$(date +%s)
log "SLURM cluster '$CLUSTER' up in $((T1 - T0)) s (packages $((T_PKG - T0)) s, daemons $((T_WARM - T_PKG)) s, warm-up job $((T1 - T_WARM)) s)"
log "node $NODE: CPUs=$CPUS RealMemory=$REAL_MEM DefMemPerCPU=$DEF_MEM; partition debug; account $ACCOUNT"
log "state, logs and pids in $STATE; stop with $HERE/down.sh"
sinfo
