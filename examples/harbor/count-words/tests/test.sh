#!/bin/bash
# Two rewards: the script exists, and its output is right.
cd /srv/words
printf 'b a b\nc a b\n' > /tmp/sample.txt
exists=0; right=0
[ -x count.sh ] || [ -f count.sh ] && exists=1
out=$(bash count.sh /tmp/sample.txt 2>&1 || true)
echo "$out"
[ "$out" = "$(printf 'b 3\na 2\nc 1')" ] && right=1
printf '{"exists": %s, "right": %s}\n' "$exists" "$right" > /logs/verifier/reward.json
