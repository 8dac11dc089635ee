#!/usr/bin/env bash
# Device check for issue 19: GPU activity through NVML on a machine with a real NVIDIA GPU.
# Run from the repository root:   bash scripts/device-check-nvml.sh
#
# 1. the NVML sampler's own test, with ORDO_REQUIRE_NVML=1 (so it fails instead of skipping);
# 2. end to end, as a user would: `ordo server` on loopback, `ordo agent --gpus auto` (real GPUs,
#    activity from NVML every second), a 1-GPU job that leaves its GPU idle (flagged
#    allocated-but-idle after 10 s) and, where python3 has torch with CUDA, a 1-GPU job that keeps
#    its GPU busy (mean busy % above 50); /metrics must carry every GPU's busy ratio and memory.
# Exit status: 0 all passed, 1 a check failed, 2 no NVIDIA GPU here (nothing was checked).
# ORDO_DEVICE_CHECK_FAKE=1 runs step 2 on 2 fake GPUs whose activity comes from a file (idle),
# without NVML: it checks this script's own plumbing on a machine without a GPU.
# ORDO_BIN=PATH uses an `ordo` binary built elsewhere (no cargo build); ORDO_DEVICE_CHECK_NO_UNIT=1
# leaves out step 1 (it compiles the sampler's test); ORDO_AGENT_EXTRA adds flags to the agent's
# command line (e.g. --no-cgroup where the machine has no cgroup the agent may use).
#
# Step 2 also checks the GPUs' model and memory (issue 30): `ordo nodes` shows NVML's name as
# ordo keeps it (`NVIDIA H200` is `h200`) and NVML's total memory; a job asking for that model
# (and that much memory) runs, one asking a model or more memory no node has is refused (422).
# About 3-6 minutes on a 16-core machine from a cold build; every step has a timeout.
set -uo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }

FAKE=${ORDO_DEVICE_CHECK_FAKE:-}
if [ -z "$FAKE" ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no NVIDIA GPU or driver here (nvidia-smi -L fails): nothing to check"
    exit 2
  fi
  say "GPUs"
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,utilization.gpu --format=csv

  if [ -z "${ORDO_DEVICE_CHECK_NO_UNIT:-}" ]; then
    say "1. NVML sampler test (ORDO_REQUIRE_NVML=1)"
    ORDO_REQUIRE_NVML=1 timeout 900 cargo test --release -p ordo-server --features nvml --lib \
      nvml_samples_where_a_driver_is -- --nocapture || fail "the NVML sampler test"
  else
    say "1. NVML sampler test: left out (ORDO_DEVICE_CHECK_NO_UNIT)"
  fi
else
  say "FAKE mode: 2 fake GPUs, activity from a file (no NVML, step 1 left out)"
fi

say "2. end to end: server, agent on the real GPUs, an idle and a busy job"
if [ -n "${ORDO_BIN:-}" ]; then
  ORDO=$(realpath "$ORDO_BIN")
else
  timeout 900 cargo build --release -p ordo || fail "cargo build --release -p ordo"
  ORDO=$PWD/target/release/ordo
fi
"$ORDO" --version
D=$(mktemp -d /tmp/ordo-device-check.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  echo "logs and database kept in $D"
}
trap cleanup EXIT

ADMIN=$("$ORDO" admin token create admin --admin --db "$D/ordo.db") || fail "admin token"
ALICE=$("$ORDO" admin token create alice --db "$D/ordo.db") || fail "user token"
(umask 077; "$ORDO" admin token create gpu1 --agent --db "$D/ordo.db" > "$D/gpu1.token") || fail "agent token"

"$ORDO" server --db "$D/ordo.db" --listen 127.0.0.1:0 --policy fifo --idle-after 10s \
  > "$D/server.out" 2> "$D/server.log" &
PIDS+=($!)
URL=
for _ in $(seq 100); do
  URL=$(grep -o 'http://[0-9.:]*' "$D/server.out" 2>/dev/null | head -1)
  [ -n "$URL" ] && break
  sleep 0.1
done
[ -n "$URL" ] || fail "the server did not start (see $D/server.log)"
echo "server at $URL"

if [ -z "$FAKE" ]; then
  GPUS=(--gpus auto --gpu-activity nvml)
else
  printf '0 1 1500 70\n1 1 1500 70\n' > "$D/activity.txt"
  GPUS=(--gpus 2 --gpu-activity "file:$D/activity.txt" --gpu-model "NVIDIA A100-SXM4-80GB" --gpu-mem 81920M)
fi
# Root runs jobs as the submitter's Unix account: here every job runs as the current account.
"$ORDO" agent --server "$URL" --token-file "$D/gpu1.token" --name gpu1 "${GPUS[@]}" \
  --activity-every 1s --run-as "$(id -un)" --work-dir "$D/agent" ${ORDO_AGENT_EXTRA:-} \
  > "$D/agent.out" 2> "$D/agent.log" &
PIDS+=($!)

export ORDO_SERVER=$URL
c() { timeout 20 "$ORDO" "$@"; }
wait_until() { # WHAT SECONDS COMMAND...: retries COMMAND every second
  local what=$1 secs=$2; shift 2
  for _ in $(seq "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  fail "waited ${secs}s for $what"
}
wait_until "node gpu1" 30 sh -c "'$ORDO' nodes --token '$ADMIN' --json | grep -q '\"name\": \"gpu1\"'"
c nodes --token "$ADMIN"
NGPU=$(c nodes --token "$ADMIN" --json | grep -o '"gpus": [0-9]*' | head -1 | grep -o '[0-9]*$')
echo "gpu1 registered $NGPU GPUs"

say "2a. the GPUs' model and memory"
if [ -z "$FAKE" ]; then
  NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  SMI_MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | sort -n | head -1 | tr -d ' ')
else
  NAME="NVIDIA A100-SXM4-80GB"
  SMI_MEM=81920
fi
# As ordo keeps a model's name: lowercased, a leading NVIDIA or Tesla dropped, spaces made -.
WANT=$(printf '%s' "$NAME" | tr 'A-Z' 'a-z' | sed -e 's/^ *//' -e 's/^nvidia  *//' -e 's/^tesla  *//' -e 's/  */-/g')
MODEL=$(c nodes --token "$ADMIN" --json | grep -o '"gpu_model": "[^"]*"' | head -1 | sed 's/.*: "\(.*\)"/\1/')
GMEM=$(c nodes --token "$ADMIN" --json | grep -o '"gpu_mem_mib": [0-9]*' | head -1 | grep -o '[0-9]*$')
echo "nvidia-smi: $NAME, $SMI_MEM MiB; ordo nodes: ${MODEL:-none}, ${GMEM:-none} MiB"
[ "$MODEL" = "$WANT" ] || fail "gpu1's model is '$MODEL', expected '$WANT' (from '$NAME')"
[ -n "$GMEM" ] || fail "gpu1 reports no GPU memory"
# NVML's total in MiB against nvidia-smi's (the same figure; within 1% for rounding).
awk -v a="$GMEM" -v b="$SMI_MEM" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= b / 100) }' \
  || fail "gpu1's memory $GMEM MiB is not nvidia-smi's $SMI_MEM MiB"
FAMILY=${MODEL%%-*}
FIT=$(c submit --token "$ALICE" --gpus 1 --time 1m --gpu-model "$FAMILY" --gpu-mem "${GMEM}M" --json -- true \
  | grep -o '"id": [0-9]*' | grep -o '[0-9]*$') || fail "submit a job for $FAMILY with ${GMEM}M"
wait_until "job $FIT (for $FAMILY) to complete" 60 sh -c "'$ORDO' explain $FIT --token '$ALICE' --json | grep -q '\"state\": \"completed\"'"
c explain "$FIT" --token "$ALICE" | head -3
c submit --token "$ALICE" --gpus 1 --gpu-model no-such-gpu -- true 2> "$D/refused.txt" && fail "a job for no-such-gpu was taken"
cat "$D/refused.txt"
grep -q "422.*no node has a GPU of model no-such-gpu" "$D/refused.txt" || fail "the refusal does not name the model"
c submit --token "$ALICE" --gpus 1 --gpu-mem "$((GMEM + 1024))M" -- true 2> "$D/refused.txt" && fail "a job for more memory was taken"
cat "$D/refused.txt"
grep -q "422.*no node has GPUs with at least" "$D/refused.txt" || fail "the refusal does not name the memory"
curl -sf -H "Authorization: Bearer $ADMIN" "$URL/metrics" | grep '^ordo_node_info' \
  | grep -q "gpu_model=\"$MODEL\",gpu_memory_mib=\"$GMEM\"" || fail "/metrics has no ordo_node_info for gpu1's model"

IDLE=$(c submit --token "$ALICE" --gpus 1 --time 10m --name idle-notebook --json -- sleep 120 \
  | grep -o '"id": [0-9]*' | grep -o '[0-9]*$') || fail "submit the idle job"
echo "idle job $IDLE"

BUSY=
if [ -z "$FAKE" ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  if [ "${NGPU:-1}" -ge 2 ]; then
    cat > "$D/busy.py" <<'EOF'
import time, torch
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 45
while time.time() < end:
    b = a @ a
    torch.cuda.synchronize()
EOF
    BUSY=$(c submit --token "$ALICE" --gpus 1 --time 10m --name busy-matmul --json -- python3 "$D/busy.py" \
      | grep -o '"id": [0-9]*' | grep -o '[0-9]*$') || fail "submit the busy job"
    echo "busy job $BUSY"
  else
    echo "one GPU only: the busy job is left out"
  fi
else
  echo "python3 with CUDA torch not found: the busy job is left out (the idle one still runs)"
fi

wait_until "job $IDLE flagged allocated-but-idle" 60 \
  sh -c "'$ORDO' nodes --token '$ADMIN' | grep -q 'job $IDLE is ALLOCATED-BUT-IDLE'"
c nodes --token "$ADMIN"
c explain "$IDLE" --token "$ALICE"
c explain "$IDLE" --token "$ALICE" | grep -q "GPU activity: busy" || fail "explain shows no GPU activity for job $IDLE"

say "/metrics"
curl -sf -H "Authorization: Bearer $ADMIN" "$URL/metrics" > "$D/metrics.txt" || fail "GET /metrics"
grep '^ordo_gpu' "$D/metrics.txt"
for g in $(seq 0 $((NGPU - 1))); do
  grep -q "^ordo_gpu_busy_ratio{node=\"gpu1\",gpu=\"$g\"} " "$D/metrics.txt" || fail "no busy ratio for GPU $g"
  grep -q "^ordo_gpu_memory_used_bytes{node=\"gpu1\",gpu=\"$g\"} " "$D/metrics.txt" || fail "no memory for GPU $g"
done
grep -q '^ordo_gpus_allocated_idle [1-9]' "$D/metrics.txt" || fail "ordo_gpus_allocated_idle is 0"

if [ -n "$BUSY" ]; then
  say "busy job $BUSY"
  sleep 20
  c explain "$BUSY" --token "$ALICE"
  MEAN=$(c explain "$BUSY" --token "$ALICE" --json | grep -o '"mean_busy_pct": [0-9.]*' | grep -o '[0-9.]*$')
  echo "busy job: mean busy ${MEAN:-none}%"
  [ -n "$MEAN" ] || fail "no activity for the busy job"
  awk -v m="$MEAN" 'BEGIN { exit !(m > 50) }' || fail "the busy job's mean busy % is $MEAN, not above 50"
  c nodes --token "$ADMIN" | grep -q "job $BUSY is ALLOCATED-BUT-IDLE" && fail "the busy job is flagged idle"
fi

c cancel "$IDLE" --token "$ALICE" >/dev/null
[ -n "$BUSY" ] && c cancel "$BUSY" --token "$ALICE" >/dev/null

say "the database as a trace"
c history --token "$ALICE"
kill "${PIDS[1]}" "${PIDS[0]}" 2>/dev/null; sleep 1; PIDS=()
timeout 120 "$ORDO" compare --trace "$D/ordo.db" --policies fifo || echo "(compare needs ended jobs that ran: none may have)"

say "PASSED"
