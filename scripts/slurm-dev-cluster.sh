#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for tests: munged, slurmctld, three slurmd
# (n1: 8 GPUs of type a100, features ib and nvme; n2: 8 a100, ib; n3: 4 v100) on loopback,
# fake GPU device files (typed in gres.conf), job completion log, and slurmrestd with JWT
# auth. Debian's Slurm 22.05. Runs as root.
#
#   slurm-dev-cluster.sh start DIR [--acct|--multifactor|--topology]   start (prints `export SLURM_CONF=...`)
#   slurm-dev-cluster.sh stop DIR              stop what `start` started, by pid file (munged too,
#                                              when `start` started it)
#   slurm-dev-cluster.sh ctld-stop DIR         stop only slurmctld (an outage, for tests)
#   slurm-dev-cluster.sh ctld-start DIR        start slurmctld again, keeping its saved state
#
# ordo's copy (from ../shared/tools): fast scheduling passes (sched_interval=2, bf_interval=1)
# so tests of `ordo slurm drive` see priority changes acted on within a second or two, and
# ctld-stop/ctld-start to simulate a controller outage.
#
# --acct adds MariaDB + slurmdbd, so `sacct` and the /slurmdb REST endpoints report
# GPU TRES, typed ones too (gres/gpu:a100, gres/gpu:v100) (about 25 s more to install, 6 s more
# to start).
# Notes: wrap every Slurm client call in `timeout` (they hang while no controller
# runs). Fake GPUs must be device files (mknod c 195 N); `Count=` alone is refused.
# `sacct -c` reads the job-completion file when accounting storage is off.
set -euo pipefail
cmd=${1:?start|stop}; D=${2:?state dir}; ACCT=${3:-}
# --multifactor: a second cluster (`mf`) beside the first, on its own ports (slurmctld 6717,
# slurmd 16901-16903), no slurmrestd, 16 CPUs a node (so that GPUs, not CPUs, bound what runs),
# and priority/multifactor: age (max age 10 minutes) and GPUs (the TRES factor of GRES/gpu)
# weighted, priorities recomputed every minute, sched/backfill. GPUs are an accounted TRES, which
# Slurm allows only with slurmdbd: it uses the slurmdbd of a cluster started with --acct (port
# 6819), so start that one first. For crates/ordo/tests/slurm_fidelity.rs.
# --topology: a third cluster (`topo`) on its own ports (slurmctld 6727, slurmd 16921-16923), no
# accounting, no slurmrestd, with TopologyPlugin=topology/tree and a topology.conf: leaf switch s0
# over n1 and n2, leaf switch s1 over n3, s2 above both. For crates/ordo/tests/slurm_topology.rs;
# the other dev clusters keep no topology, so their tests place jobs as before.
MF=; TOPO=
if [ "$ACCT" = --multifactor ]; then MF=1; ACCT=; fi
if [ "$ACCT" = --topology ]; then TOPO=1; ACCT=; fi
D=$(mkdir -p "$D" && cd "$D" && pwd)

stop() {
  # munged.pid exists only when `start` started munged itself (one already running is left alone).
  for f in "$D"/slurmd-n*.pid "$D"/slurmctld.pid "$D"/slurmdbd.pid "$D"/slurmrestd.pid "$D"/munged.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f"); kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true; rm -f "$f"
  done
  if [ -f "$D/mysql/mariadb.pid" ]; then kill "$(cat "$D/mysql/mariadb.pid")" 2>/dev/null || true; rm -f "$D/mysql/mariadb.pid"; fi
}
if [ "$cmd" = stop ]; then stop; exit 0; fi
if [ "$cmd" = ctld-stop ]; then
  f="$D/slurmctld.pid"
  if [ -f "$f" ]; then
    p=$(cat "$f"); kill "$p" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true; rm -f "$f"
  fi
  exit 0
fi
if [ "$cmd" = ctld-start ]; then
  export SLURM_CONF=$D/slurm.conf
  /usr/sbin/slurmctld
  for _ in $(seq 100); do timeout 2 sinfo -h >/dev/null 2>&1 && break; sleep 0.1; done
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop|ctld-stop|ctld-start DIR [--acct|--multifactor|--topology]" >&2; exit 2; }

PKGS="slurmctld slurmd slurm-client munge slurmrestd curl"
[ "$ACCT" = --acct ] && PKGS="$PKGS slurmdbd mariadb-server"
if ! dpkg -s $PKGS >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $PKGS >/dev/null
fi

stop
rm -rf "$D"/{state,log,fakegpu,spool}; mkdir -p "$D"/{state,log,fakegpu,spool/n1,spool/n2,spool/n3}
for i in 0 1 2 3 4 5 6 7; do mknod "$D/fakegpu/nvidia$i" c 195 $i; done
dd if=/dev/urandom of="$D/jwt.key" bs=32 count=1 status=none; chmod 600 "$D/jwt.key"

mkdir -p /run/munge; chown munge:munge /run/munge
if ! munge -n >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  # munged writes its pid file itself; keep a copy so that `stop` ends the munged it started.
  for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  cp /run/munge/munged.pid "$D/munged.pid"
fi

if [ "$ACCT" = --acct ]; then
  ACCT_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100
JobAcctGatherType=jobacct_gather/linux"
else
  ACCT_LINES="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
. "$(dirname "$0")/slurm-dev-conf.sh"
if [ -n "$MF" ]; then
  export SLURM_CONF=$D/slurm.conf
  write_dev_conf "$D" mf 6717 16901 "AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100
JobAcctGatherType=jobacct_gather/linux" "PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityMaxAge=00:10:00
PriorityWeightTRES=GRES/gpu=2000
PriorityWeightFairshare=0
PriorityWeightJobSize=0
PriorityWeightQOS=0
PriorityWeightPartition=0
PriorityCalcPeriod=1
SlurmdParameters=config_overrides" 16
elif [ -n "$TOPO" ]; then
  write_dev_conf "$D" topo 6727 16921 "$ACCT_LINES"
  echo "TopologyPlugin=topology/tree" >>"$D/slurm.conf"
  cat >"$D/topology.conf" <<CONF
SwitchName=s0 Nodes=n[1-2]
SwitchName=s1 Nodes=n3
SwitchName=s2 Switches=s[0-1]
CONF
else
  write_dev_conf "$D" dev 6817 17001 "$ACCT_LINES"
fi
export SLURM_CONF=$D/slurm.conf

if [ "$ACCT" = --acct ]; then
  mkdir -p /run/mysqld "$D/mysql"; chown mysql:mysql /run/mysqld "$D/mysql"   # mariadbd runs as mysql
  if ! mariadb-admin ping >/dev/null 2>&1; then
    nohup /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --pid-file="$D/mysql/mariadb.pid" >"$D/log/mariadb.log" 2>&1 &
    for _ in $(seq 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  cat > "$D/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/jwt.key
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$D/log/slurmdbd.log
PidFile=$D/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
  chmod 600 "$D/slurmdbd.conf"
  /usr/sbin/slurmdbd
  for _ in $(seq 100); do timeout 3 sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -i add cluster dev >/dev/null || true
fi

if [ -n "$MF" ]; then
  timeout 10 sacctmgr -n show cluster >/dev/null 2>&1 || {
    echo "--multifactor: no slurmdbd answers on localhost:6819; start the first dev cluster with --acct" >&2; exit 1
  }
  timeout 10 sacctmgr -i add cluster mf >/dev/null || true
fi
/usr/sbin/slurmctld -i
for n in n1 n2 n3; do /usr/sbin/slurmd -N $n; done
# `sinfo -N` lists n3 once per partition (gpu and other): count nodes, not lines.
for _ in $(seq 200); do
  [ "$(timeout 2 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | grep -c idle)" = 3 ] && break; sleep 0.1
done

if [ -n "$MF$TOPO" ]; then echo "export SLURM_CONF=$D/slurm.conf"; exit 0; fi

# slurmrestd refuses to run as root: run it as nobody, JWT auth, loopback only.
SLURM_JWT=daemon setsid runuser -u nobody -- /usr/sbin/slurmrestd -a rest_auth/jwt \
  -s "openapi/v0.0.38$([ "$ACCT" = --acct ] && echo ,openapi/dbv0.0.38)" 127.0.0.1:6820 \
  >"$D/log/slurmrestd.log" 2>&1 &
echo $! > "$D/slurmrestd.pid"
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:6820/openapi && break; sleep 0.1; done
scontrol token username=root lifespan=86400 > "$D/token.env"   # SLURM_JWT=...
echo "export SLURM_CONF=$D/slurm.conf"
