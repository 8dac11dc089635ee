#!/usr/bin/env bash
# A Slurm 24.11 dev cluster, beside the 22.05 one of slurm-dev-cluster.sh: the same three nodes
# (n1: 8 GPUs of type a100, features ib and nvme; n2: 8 a100, ib; n3: 4 v100; 2 CPUs each;
# partitions gpu and other) on other ports, so both can run at once. Slurm 24.11 comes from Debian 13 (trixie), installed with debootstrap
# into a directory of its own; the daemons and the clients run chrooted into it. Runs as root.
#
#   slurm24-dev-cluster.sh install            install the tree only (first time: about 3 minutes)
#   slurm24-dev-cluster.sh start DIR          install if needed, start; prints the exports
#   slurm24-dev-cluster.sh stop DIR           stop what `start` started, undo its mounts
#   slurm24-dev-cluster.sh ctld-stop DIR      stop only slurmctld (an outage)
#   slurm24-dev-cluster.sh ctld-start DIR     start slurmctld again
#
# The tree: $SLURM24_TREE, default ~/.cache/slurm24-trixie, reused when complete (the other
# commands use the tree DIR was started from). DIR holds the configuration, state, logs, pid
# files and fake GPU device files; it is bind-mounted at the same path inside the tree, so every
# path in slurm.conf means the same inside and outside.
# DIR/bin holds client wrappers (squeue, scontrol, sinfo, sbatch, scancel, sacct, srun) that run
# the tree's clients against this cluster whatever SLURM_CONF says: put DIR/bin first in PATH.
# Ports: slurmctld 6917, slurmd 17101-17103, slurmrestd 6920 (JWT; openapi/slurmctld, which
# serves v0.0.40-v0.0.42; DIR/token.env holds a root token). munged is the tree's own
# (/run/munge inside the tree, key /etc/munge/munge.key of the tree), not the host's.
# 24.11's slurmd runs outside a cgroup hierarchy: cgroup.conf says CgroupPlugin=disabled.
set -euo pipefail
cmd=${1:?install|start|stop|ctld-stop|ctld-start}
R=${SLURM24_TREE:-$HOME/.cache/slurm24-trixie}
MIRROR=${SLURM24_MIRROR:-http://deb.debian.org/debian}
PKGS=slurmctld,slurmd,slurmrestd,slurm-client,slurm-wlm-jwt-plugin,munge
CTLD_PORT=6917 REST_PORT=6920

# The mount points at or below $1.
mounts_below() { findmnt -rn -o TARGET | awk -v p="$1" '$0 == p || index($0, p "/") == 1'; }

# Unmounts everything mounted at or below $1 (deepest first).
umount_below() {
  local m
  for m in $(mounts_below "$1" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

install_tree() {
  [ -f "$R/.ordo-slurm24-complete" ] && return 0
  command -v debootstrap >/dev/null || {
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null
  }
  local tmp="$R.partial"
  # A failed earlier run may have left debootstrap's mounts (proc, sys) in the partial tree.
  umount_below "$tmp"
  local d
  for d in "$tmp" "$R"; do
    if [ -n "$(mounts_below "$d")" ]; then
      echo "slurm24: $d has mounts (a cluster running from it?); not removing it" >&2; exit 1
    fi
  done
  rm -rf "$tmp"; mkdir -p "$(dirname "$R")"
  echo "slurm24: installing Slurm 24.11 from trixie into $R (debootstrap; a few minutes)" >&2
  debootstrap --variant=minbase --include=$PKGS trixie "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
    tail -20 "$tmp.log" >&2; umount_below "$tmp"; exit 1
  }
  umount_below "$tmp"
  grep -qw localhost "$tmp/etc/hosts" 2>/dev/null || echo "127.0.0.1 localhost" >>"$tmp/etc/hosts"
  if [ ! -s "$tmp/etc/munge/munge.key" ]; then
    mkdir -p "$tmp/etc/munge"
    dd if=/dev/urandom of="$tmp/etc/munge/munge.key" bs=1024 count=1 status=none
    chroot "$tmp" chown munge:munge /etc/munge/munge.key
    chmod 600 "$tmp/etc/munge/munge.key"
  fi
  chroot "$tmp" /usr/sbin/slurmctld -V | grep -qE '^slurm(-wlm)? 24\.11\.' || {
    echo "slurm24: the tree's slurmctld is not 24.11: $(chroot "$tmp" /usr/sbin/slurmctld -V)" >&2; exit 1
  }
  rm -rf "$tmp/var/cache/apt/archives"/*.deb "$tmp.log"
  touch "$tmp/.ordo-slurm24-complete"
  rm -rf "$R"; mv "$tmp" "$R"
}

if [ "$cmd" = install ]; then install_tree; exit 0; fi
D=${2:?state dir}
D=$(mkdir -p "$D" && cd "$D" && pwd)
# The tree a running cluster came from (`start` writes it), whatever $SLURM24_TREE says now.
[ "$cmd" != start ] && [ -f "$D/tree" ] && R=$(cat "$D/tree")
in_tree() { chroot "$R" /usr/bin/env SLURM_CONF="$D/slurm.conf" "$@"; }

# Whether process $1 runs (a zombie does not: where nothing reaps orphans, it stays one).
running() { [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }

# The running processes whose root directory is the tree.
in_tree_pids() {
  local p root
  root=$(cd "$R" && pwd -P)
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && running "${p#/proc/}" && echo "${p#/proc/}"
  done
  return 0
}

kill_pidfile() {
  local f=$1 p
  [ -f "$f" ] || return 0
  p=$(cat "$f"); kill "$p" 2>/dev/null || true
  for _ in $(seq 100); do running "$p" || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true; rm -f "$f"
}

stop() {
  local f
  for f in "$D"/slurmrestd.pid "$D"/slurmd-n*.pid "$D"/slurmctld.pid "$D"/munged.pid; do kill_pidfile "$f"; done
  # Anything else still chrooted into the tree (job steps a killed slurmd left behind).
  if [ -d "$R" ]; then
    local left p alive
    left=$(in_tree_pids)
    if [ -n "$left" ]; then
      kill $left 2>/dev/null || true
      for _ in $(seq 50); do
        alive=
        for p in $left; do running "$p" && alive=1; done
        [ -z "$alive" ] && break; sleep 0.1
      done
      [ -z "$alive" ] || kill -9 $left 2>/dev/null || true
    fi
  fi
  # The mounts `start` made, last first.
  if [ -f "$D/mounts" ]; then
    tac "$D/mounts" | while read -r m; do
      mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
    done
    rm -f "$D/mounts"
  fi
}

case "$cmd" in
  stop) stop; exit 0 ;;
  ctld-stop) kill_pidfile "$D/slurmctld.pid"; exit 0 ;;
  ctld-start)
    in_tree /usr/sbin/slurmctld
    for _ in $(seq 100); do timeout 2 "$D/bin/sinfo" -h >/dev/null 2>&1 && break; sleep 0.1; done
    exit 0 ;;
  start) ;;
  *) echo "usage: $0 install | start|stop|ctld-stop|ctld-start DIR" >&2; exit 2 ;;
esac

install_tree
stop
# What a run that never got to its `stop` left in the tree (killed, or a machine copied while a
# cluster ran): its daemons and its mounts. A second sysfs on the same mount point is refused
# ("sysfs already mounted", exit 32). The ports are fixed, so one cluster at a time runs from a
# tree: whatever still runs in it is a leftover.
left=$(in_tree_pids)
if [ -n "$left" ]; then
  echo "slurm24: stopping processes an earlier run left in $R: $left" >&2
  kill -9 $left 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(in_tree_pids)" ] && break; sleep 0.1; done
fi
for m in $(mounts_below "$R" | grep -vxF "$R" | sort -r); do
  echo "slurm24: unmounting $m, left by an earlier run" >&2
  umount "$m" 2>/dev/null || umount -l "$m"
done
echo "$R" >"$D/tree"
rm -rf "$D"/{state,log,fakegpu,spool,bin}
mkdir -p "$D"/{state,log,fakegpu,spool/n1,spool/n2,spool/n3,bin}
# Jobs of the account `nobody` run in DIR's spool: a directory from `mktemp -d` (mode 700) would
# make each of them fail at once (NonZeroExitCode), so DIR is opened to others for reading.
chmod go+rx "$D"
for i in 0 1 2 3 4 5 6 7; do mknod "$D/fakegpu/nvidia$i" c 195 $i; done
dd if=/dev/urandom of="$D/jwt.key" bs=32 count=1 status=none; chmod 600 "$D/jwt.key"

# Mounts: DIR at its own path inside the tree, and proc and sys (slurmd reads both). Each is
# written to DIR/mounts before it is made, so `stop` undoes it whatever fails after.
mount_in() {
  local target=$R$1; shift
  mkdir -p "$target"; echo "$target" >>"$D/mounts"; mount "$@" "$target"
}
mount_in "$D" --bind "$D"
mount_in /proc -t proc proc
mount_in /sys -t sysfs sysfs

# This machine's name resolves inside the tree as outside (munged and slurmd look it up).
{ echo "127.0.0.1 localhost"; cat /etc/hosts; } >"$R/etc/hosts"
mkdir -p "$R/run/munge"; chroot "$R" chown munge:munge /run/munge
if ! chroot "$R" munge -n >/dev/null 2>&1; then
  rm -f "$R/run/munge/munged.pid"
  chroot --userspec=munge:munge "$R" /usr/sbin/munged
  for _ in $(seq 50); do [ -s "$R/run/munge/munged.pid" ] && break; sleep 0.1; done
  cp "$R/run/munge/munged.pid" "$D/munged.pid"
fi

. "$(dirname "$0")/slurm-dev-conf.sh"
write_dev_conf "$D" dev24 $CTLD_PORT 17101 "AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
echo "CgroupPlugin=disabled" >"$D/cgroup.conf"

# Client wrappers: the tree's clients, chrooted, against this cluster's configuration.
for c in squeue scontrol sinfo sbatch scancel sacct srun; do
  printf '#!/bin/sh\nexec chroot %q /usr/bin/env SLURM_CONF=%q /usr/bin/%s "$@"\n' "$R" "$D/slurm.conf" "$c" >"$D/bin/$c"
  chmod 755 "$D/bin/$c"
done

in_tree /usr/sbin/slurmctld -i
for n in n1 n2 n3; do in_tree /usr/sbin/slurmd -N $n; done
ok=
for _ in $(seq 300); do
  [ "$(timeout 2 "$D/bin/sinfo" -h -N -o '%N %T' 2>/dev/null | sort -u | grep -c ' idle$')" = 3 ] && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || { echo "slurm24: the nodes did not come up idle; see $D/log" >&2; timeout 2 "$D/bin/sinfo" -N >&2 || true; exit 1; }

# slurmrestd refuses to run as root: as nobody, JWT auth, loopback only.
setsid chroot --userspec=nobody:nogroup "$R" /usr/bin/env SLURM_CONF="$D/slurm.conf" SLURM_JWT=daemon \
  /usr/sbin/slurmrestd -a rest_auth/jwt -s openapi/slurmctld 127.0.0.1:$REST_PORT \
  >"$D/log/slurmrestd.log" 2>&1 </dev/null &
echo $! >"$D/slurmrestd.pid"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$REST_PORT") 2>/dev/null && break; sleep 0.1; done
"$D/bin/scontrol" token username=root lifespan=86400 >"$D/token.env"   # SLURM_JWT=...
echo "export ORDO_SLURM24_DIR=$D   # PATH=$D/bin:\$PATH runs its clients"
