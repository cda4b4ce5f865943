#!/bin/bash
# Writes 1 to the reward only when every case adds up.
set -e
for case in "2 3 5" "10 -4 6" "0 0 0"; do
  set -- $case
  got=$(sh /app/calc.sh "$1" "$2")
  echo "calc.sh $1 $2 = $got (want $3)"
  [ "$got" = "$3" ]
done
echo 1 > /logs/verifier/reward.txt
