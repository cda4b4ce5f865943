#!/usr/bin/env bash
# The keyless demo: replays a recorded session of a model fixing a failing test, inside the
# docker sandbox, on a copy of examples/fix-failing-test, then runs the tests once more in
# the same kind of sandbox to show them passing. On a fresh machine it first sets up what
# the docker sandbox needs (as root: Debian's docker.io and mmdebstrap, a running dockerd,
# the sandbox image), as the test suite does.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then
    echo "== installing docker.io (needs root)"
    apt-get update -qq && apt-get install -y -qq docker.io >/dev/null
  fi
  echo "== starting dockerd"
  setsid dockerd >/tmp/runner-demo-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
cargo build --release --quiet
runner=target/x86_64-unknown-linux-gnu/release/runner
if ! docker image inspect runner-sandbox:bookworm >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || apt-get install -y -qq mmdebstrap >/dev/null
  echo "== building the sandbox image (offline base with mmdebstrap)"
  "$runner" image build
fi

work=$(mktemp -d /tmp/runner-demo.XXXXXX)
cp -r examples/fix-failing-test/. "$work"
# A checkout, as runner expects for the direct workspace: `git -C DIR diff` shows the fix.
git -C "$work" init -q
git -C "$work" -c user.name=demo -c user.email=demo@localhost add -A
git -C "$work" -c user.name=demo -c user.email=demo@localhost commit -qm "the failing test"
echo "== replaying examples/fix-failing-test.replay.jsonl in $work"
"$runner" --sandbox docker --model replay/examples/fix-failing-test.replay.jsonl --root "$work"
echo "== the tests afterwards, run in the sandbox"
"$runner" tool call bash '{"command": "python3 -m unittest", "description": "Run the tests"}' --sandbox docker --root "$work"
