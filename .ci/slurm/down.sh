#!/usr/bin/env bash
# Stop the daemons that .ci/slurm/up.sh started -- only those: each line of the
# state file is "NAME PID STARTTIME", and a pid is signalled only while its
# /proc start time still matches (a recycled pid is left alone).
# Graceful TERM first, KILL for whatever is still alive after a grace period.
set -uo pipefail

STATE=${BR_SLURM_STATE:-/tmp/br-slurm}
PIDS=$STATE/pids
GRACE=${BR_SLURM_GRACE:-20}

if [ ! -s "$PIDS" ]; then
    echo "[slurm-down] nothing recorded in $PIDS; nothing to stop"
    exit 0
fi

ours() { # ours PID STARTTIME
    [ -r "/proc/$1/stat" ] && [ "$(awk '{print $22}' "/proc/$1/stat" 2>/dev/null)" = "$2" ]
}

# Reverse start order: compute nodes before the controller, the DB last.
mapfile -t lines < <(tac "$PIDS")
for l in "${lines[@]}"; do
    read -r name pid start <<<"$l"
    if ours "$pid" "$start"; then
        echo "[slurm-down] TERM $name ($pid)"
        kill -TERM "$pid" 2>/dev/null || true
        # let each daemon go before stopping the one it talks to
        for _ in $(seq 1 $((GRACE * 2))); do ours "$pid" "$start" || break; sleep 0.5; done
    fi
done

rc=0
for l in "${lines[@]}"; do
    read -r name pid start <<<"$l"
    if ours "$pid" "$start"; then
        echo "[slurm-down] KILL $name ($pid): still alive after ${GRACE}s"
        kill -KILL "$pid" 2>/dev/null || rc=1
    fi
done

rm -f "$PIDS"
echo "[slurm-down] done"
exit $rc
