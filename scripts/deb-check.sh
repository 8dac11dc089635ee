#!/usr/bin/env bash
# Checks the Debian package as an admin would meet it, on this machine, as root (CI runs it in
# a container without systemd as PID 1, so the units' command lines are run by this script as
# systemd would run them, not by systemd):
#
#   bash scripts/deb-check.sh target/debian/ordo_*.deb
#
# 1. `dpkg -i`; the files are where they belong (binary, units, /etc/ordo samples, completions,
#    man pages), the `ordo` account exists, `ordo --version` names a commit;
# 2. `systemd-analyze verify` on the installed units (Debian's systemd package is installed
#    when absent);
# 3. the server's ExecStart, read from the installed unit, run as the unit's User=, and the
#    agent's ExecStart as its User= (root), both on the installed /etc/ordo files with only
#    what docs/INSTALL.md says to change (a free port, the server's URL, 2 fake GPUs, the
#    node's token); a job submitted by a user runs as that user's Unix account and completes;
# 4. `dpkg --purge`: the binary and units are gone, the database is kept.
# It refuses a machine where ordo is installed, and leaves nothing behind (even on failure).
set -euo pipefail
DEB=$(realpath "$1")
export DEBIAN_FRONTEND=noninteractive
fail() { echo "deb-check: FAILED: $*" >&2; exit 1; }
say() { echo "deb-check: $*"; }

[ "$(id -u)" = 0 ] || fail "run as root (it installs a package)"
if ! command -v systemd-analyze >/dev/null; then
  apt-get update -qq && apt-get install -y -qq systemd >/dev/null
fi

if dpkg-query -W -f='${Status}' ordo 2>/dev/null | grep -q installed || [ -e /var/lib/ordo ] || [ -e /etc/ordo ]; then
  fail "ordo is installed here already (or /var/lib/ordo, /etc/ordo exist): this check installs and purges it, so run it on a machine without it"
fi
PIDS=()
WORK=$(mktemp -d /tmp/ordo-deb-check.XXXXXX)
chmod 755 "$WORK"
stop() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); }
# Whatever happens, nothing of this check is left: the processes, the package, its state.
# (The test user `ordotest` too, when this run made it.)
MADE_USER=
cleanup() {
  stop; dpkg --purge ordo >/dev/null 2>&1 || true; rm -rf "$WORK" /var/lib/ordo /var/lib/ordo-agent /etc/ordo
  [ -z "$MADE_USER" ] || userdel ordotest 2>/dev/null || true
}
trap cleanup EXIT

# --- 1. install
dpkg -i "$DEB" >/dev/null
UNITS=/lib/systemd/system
[ -d "$UNITS" ] || UNITS=/usr/lib/systemd/system
for f in /usr/bin/ordo "$UNITS/ordo-server.service" "$UNITS/ordo-agent.service" /etc/ordo/server.toml \
  /etc/ordo/agent.toml /usr/share/bash-completion/completions/ordo /usr/share/zsh/vendor-completions/_ordo \
  /usr/share/fish/vendor_completions.d/ordo.fish /usr/share/man/man1/ordo.1.gz /usr/share/man/man1/ordo-server.1.gz \
  /usr/share/man/man1/ordo-agent.1.gz /usr/share/doc/ordo/INSTALL.md; do
  [ -e "$f" ] || fail "$f is not installed"
done
dpkg-query -W -f='${Conffiles}\n' ordo | grep -q /etc/ordo/server.toml || fail "/etc/ordo/server.toml is not a conffile"
getent passwd ordo >/dev/null || fail "no ordo account"
[ "$(stat -c %U /var/lib/ordo)" = ordo ] || fail "/var/lib/ordo is not the ordo account's"
/usr/bin/ordo --version | grep -Eq '^ordo [0-9.]+ \(commit [0-9a-f]{7,}' || fail "ordo --version names no commit: $(/usr/bin/ordo --version)"
bash -c 'source /usr/share/bash-completion/completions/ordo && complete -p ordo' >/dev/null || fail "bash completion"
zcat /usr/share/man/man1/ordo-agent.1.gz | grep -q -- 'config' || fail "ordo-agent(1) lacks --config"
say "installed: $(/usr/bin/ordo --version); $(ls /usr/share/man/man1/ordo*.1.gz | wc -l) man pages"

# --- 2. the units
# (--man=no: the man pages' presence is checked above; `man` itself may be absent.)
rc=0
systemd-analyze verify --man=no "$UNITS/ordo-server.service" "$UNITS/ordo-agent.service" > "$WORK/verify.txt" 2>&1 || rc=$?
cat "$WORK/verify.txt"
if [ $rc != 0 ] || grep -Eq 'ordo-(server|agent)\.service' "$WORK/verify.txt"; then fail "systemd-analyze verify: exit $rc"; fi
say "systemd-analyze verify: no complaint about either unit"

# --- 3. the units' own command lines
key() { sed -n "s/^$2=//p" "$UNITS/$1" | tail -1; }
SERVER_CMD=$(key ordo-server.service ExecStart)
SERVER_USER=$(key ordo-server.service User)
AGENT_CMD=$(key ordo-agent.service ExecStart)
AGENT_USER=$(key ordo-agent.service User)
say "server: $SERVER_CMD (as $SERVER_USER); agent: $AGENT_CMD (as $AGENT_USER)"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -i "s/^listen = .*/listen = \"127.0.0.1:$PORT\"/" /etc/ordo/server.toml
sed -i "s#^server = .*#server = \"http://127.0.0.1:$PORT\"#; s/^gpus = .*/gpus = 2/" /etc/ordo/agent.toml
DB=/var/lib/ordo/ordo.db
if ! id ordotest >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin ordotest && MADE_USER=1
fi
USER_TOKEN=$(runuser -u "$SERVER_USER" -- /usr/bin/ordo admin token create ordotest --db "$DB" 2>/dev/null)
(umask 077; runuser -u "$SERVER_USER" -- /usr/bin/ordo admin token create "$(hostname)" --agent --db "$DB" \
  > /etc/ordo/agent.token 2>/dev/null)
# As systemd would: the unit's user, umask 0077, working directory /.
(cd / && umask 0077 && exec runuser -u "$SERVER_USER" -- $SERVER_CMD) > "$WORK/server.log" 2>&1 &
PIDS+=($!)
(cd / && exec $AGENT_CMD) > "$WORK/agent.log" 2>&1 &
PIDS+=($!)
c() { local sub=$1; shift; /usr/bin/ordo "$sub" --server "http://127.0.0.1:$PORT" --token "$USER_TOKEN" "$@"; }
for _ in $(seq 150); do
  [ "$(c nodes --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null)" = 1 ] && break
  sleep 0.2
done
c nodes >/dev/null || { cat "$WORK/server.log" "$WORK/agent.log"; fail "the agent did not register"; }
JOBDIR=$WORK/job && install -d -o ordotest -m 755 "$JOBDIR"
JOB=$(cd "$JOBDIR" && c submit --gpus 1 --time 1m --name deb-check -- sh -c 'echo "ran as $(id -un) in $PWD on $ORDO_NODE with GPUs $CUDA_VISIBLE_DEVICES"')
for _ in $(seq 150); do
  STATE=$(c explain "$JOB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $STATE in completed|failed|cancelled|timeout) break ;; esac
  sleep 0.2
done
# Its output is in the agent's work_dir; it ran in the submitter's directory.
JOBOUT=$(sed -n 's/^work_dir = "\(.*\)"/\1/p' /etc/ordo/agent.toml)/job-$JOB.out
OUT=$(cat "$JOBOUT" 2>/dev/null || true)
if [ "$STATE" != completed ] || ! grep -q "ran as ordotest in $JOBDIR " <<<"$OUT" || [ "$(stat -c %U "$JOBOUT")" != ordotest ]; then
  cat "$WORK/server.log" "$WORK/agent.log"
  fail "job $JOB: state $STATE, output: $OUT"
fi
say "job $JOB completed: $OUT"
stop

# --- 4. remove
dpkg --purge ordo >/dev/null
[ ! -e /usr/bin/ordo ] && [ ! -e "$UNITS/ordo-server.service" ] && [ ! -e /etc/ordo/server.toml ] || fail "purge left files"
[ -f "$DB" ] || fail "purge removed the database"
say "purged; the database was kept (this check removes it)"
say "ok"
