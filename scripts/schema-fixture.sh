#!/usr/bin/env bash
# Makes a fixture database with a given `ordo` binary, for the schema migration tests
# (crates/ordo-server/tests/migrate.rs): every table the server keeps, with rows in them.
#
#   bash scripts/schema-fixture.sh ORDO_BINARY OUT_DIR
#
# writes OUT_DIR/server.db (a server that ran jobs: tokens, nodes, jobs of every kind, an
# array, a held job, a dependency, audit records, activity series) and OUT_DIR/admin.db (a
# database where only `ordo admin token create` ran: no activity tables), and
# OUT_DIR/server.tokens (the admin's and alice's tokens of server.db). It runs a real server
# and one agent with 2 fake GPUs (--no-cgroup where the binary has that flag) on loopback, as
# the invoking user, then stops them (SIGTERM) and checkpoints the WAL into the file.
#
# The fixtures under crates/ordo-server/tests/data/ were made with this script from the commit
# named in their README; a later schema version adds its own fixture made by the binary of the
# version before it.
set -euo pipefail
ORDO=$(realpath "$1")
OUT=$(realpath -m "$2")
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/ordo-schema-fixture.XXXXXX)
trap 'kill $AGENT $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
cd "$WORK"
DB=$WORK/server.db

"$ORDO" admin token create fixture-admin --admin --db admin.db >/dev/null 2>&1

ADMIN=$("$ORDO" admin token create admin --admin --db "$DB" 2>/dev/null)
ALICE=$("$ORDO" admin token create alice --expires 3650d --db "$DB" 2>/dev/null)
(umask 077; "$ORDO" admin token create gpu1 --agent --db "$DB" > gpu1.token 2>/dev/null)
"$ORDO" admin token create leaver --db "$DB" >/dev/null 2>&1
"$ORDO" admin token revoke leaver --db "$DB" >/dev/null

"$ORDO" server --db "$DB" --listen 127.0.0.1:0 --policy fifo+easy --heartbeat 100ms --node-timeout 2s \
  > server.out 2> server.log &
SERVER=$!
for _ in $(seq 100); do grep -q listening server.out 2>/dev/null && break; sleep 0.1; done
URL=$(grep -o 'http://[^ ]*' server.out)
NOCG=""
"$ORDO" agent --help | grep -q -- --no-cgroup && NOCG=--no-cgroup
"$ORDO" agent --server "$URL" --token-file gpu1.token --name gpu1 --gpus 2 --gpu-activity seed:1 \
  --activity-every 1s --run-as "$(id -un)" --work-dir "$WORK/work" --grace 200ms $NOCG 2> agent.log &
AGENT=$!
# Connection flags right after the subcommand (after `--` everything is the job's command).
c() { local sub=$1; shift; "$ORDO" "$sub" --server "$URL" --token "$ALICE" "$@"; }
a() { local sub=$1; shift; "$ORDO" "$sub" --server "$URL" --token "$ADMIN" "$@"; }
for _ in $(seq 100); do
  [ "$(c nodes --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] && break
  sleep 0.1
done
ok=$(c submit --gpus 1 --cpus 1 --mem 64M --time 1m --name ok -- sh -c 'echo fixture; sleep 2')
c submit --gpus 1 --time 1m --name fails -- sh -c 'exit 3' >/dev/null
c submit --gpus 1 --time 1m --name after --after-ok "$ok" -- true >/dev/null
c submit --gpus 1 --time 1m --name sweep --array 0-3%1 -- sleep 1 >/dev/null
held=$(c submit --gpus 2 --time 1h --name held --priority -1 -- sleep 100)
c hold "$held" >/dev/null
cancelled=$(c submit --gpus 2 --time 1h --name cancelled -- sleep 100)
c cancel "$cancelled" >/dev/null
# (--reason since the change is required to give one; binaries from before it have no such flag)
"$ORDO" policy set --server "$URL" --token "$ADMIN" sjf+easy --reason fixture >/dev/null 2>&1 \
  || "$ORDO" policy set --server "$URL" --token "$ADMIN" sjf+easy >/dev/null
# Until every job but the held one has ended, and a few activity samples are in.
for _ in $(seq 300); do
  left=$(c queue --json | python3 -c 'import json,sys; print(sum(1 for j in json.load(sys.stdin)["jobs"] if j.get("held_by") is None))')
  [ "$left" = 0 ] && break
  sleep 0.2
done
sleep 3
kill -TERM "$AGENT"; wait "$AGENT" 2>/dev/null || true
kill -TERM "$SERVER"; wait "$SERVER" 2>/dev/null || true
python3 - "$DB" "$WORK/admin.db" <<'EOF'
import sqlite3, sys
for p in sys.argv[1:]:
    c = sqlite3.connect(p)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
EOF
cp "$DB" "$OUT/server.db"
cp "$WORK/admin.db" "$OUT/admin.db"
# The tokens of server.db's users, for tests that start a server on it (fixture secrets only).
printf 'admin %s\nalice %s\n' "$ADMIN" "$ALICE" > "$OUT/server.tokens"
rm -f "$OUT"/*.db-wal "$OUT"/*.db-shm
echo "fixtures in $OUT: $(ls "$OUT")"
