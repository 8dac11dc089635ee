#!/usr/bin/env bash
# The whole `ordo batch` flow against the local emulators of OpenAI's and Anthropic's batch
# APIs (crates/ordo-batch/examples/emulator.rs): no account, no network. Plan, submit, status,
# fetch, resubmit what failed, fetch again, report; then the same for Anthropic, and a live run
# with deadlines. The output shown in examples/batch/README.md is this script's.
#
#   bash examples/batch/end-to-end.sh            (from the repository root)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
cargo build --release -q -p ordo
cargo build --release -q -p ordo-batch --features test-server --example emulator
ordo="$repo/target/release/ordo"
work=$(mktemp -d "${TMPDIR:-/tmp}/ordo-batch-demo.XXXXXX")
cp examples/batch/requests.jsonl examples/batch/claude.jsonl examples/batch/limits.toml examples/batch/prices.toml "$work"
cd "$work"
echo "sk-emulated-demo" > key
chmod 600 key

# The emulator: every 5th request a batch processes fails the first time; the key is required.
"$repo/target/release/examples/emulator" --fail-every 5 --key sk-emulated-demo > emulator.url &
emulator=$!
trap 'kill $emulator 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s emulator.url ] && break; sleep 0.1; done
url=$(head -1 emulator.url)

run() {
    echo "\$ ordo $*" | sed "s#$url#http://127.0.0.1:PORT#g"
    "$ordo" "$@" 2>&1 | sed "s#$url#http://127.0.0.1:PORT#g" || true
    echo
}

run batch plan requests.jsonl --limits limits.toml --prices prices.toml
run batch submit requests.jsonl --provider openai --endpoint "$url" --api-key-file key --limits limits.toml
run batch status --state requests.jsonl.ordo-batch.json --api-key-file key
run batch fetch --state requests.jsonl.ordo-batch.json --api-key-file key --out results.jsonl --wait --poll 1s
run batch submit --state requests.jsonl.ordo-batch.json --api-key-file key --retry-failed
run batch fetch --state requests.jsonl.ordo-batch.json --api-key-file key --out results.jsonl --wait --poll 1s
echo "\$ head -c 400 results.jsonl"
head -c 400 results.jsonl
echo
echo
run batch report requests.jsonl --limits limits.toml --prices prices.toml --batch-results results.jsonl --out report.html

# Anthropic: the embeddings of requests.jsonl cannot go there (refused by line); claude.jsonl can.
run batch submit requests.jsonl --provider anthropic --endpoint "$url" --api-key-file key --state anthropic.json
run batch submit claude.jsonl --provider anthropic --endpoint "$url" --api-key-file key
run batch fetch --state claude.jsonl.ordo-batch.json --api-key-file key --out claude-results.jsonl --wait --poll 1s
run batch report claude.jsonl --limits limits.toml --prices prices.toml --batch-results claude-results.jsonl --out claude-report.md
sed -n '/## Actual cost/,$p' claude-report.md
echo

# Live, within the limits, deadlines first; what cannot make it is said before sending.
run batch plan claude.jsonl --limits limits.toml --prices prices.toml --no-batch --deadline 5s --window 22:00-06:00 --tz Europe/Bucharest
run batch run claude.jsonl --endpoint "$url" --api-key-file key --limits limits.toml --prices prices.toml --deadline 5s --max-cost globex=0.001 --output live.jsonl
echo "work directory: $work"
