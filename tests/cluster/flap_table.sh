#!/usr/bin/env bash
# flap_table.sh [RUNS] [CUTS] - the whole link-flap table of docs/store.md ("A link flap"): the
# store host's link cut for each of CUTS seconds (default 0.5,1,2,2.5,3,3.5,5,8), RUNS times
# each (default 3), with tests/sh/test_elastic_netns.sh's flap case (3 namespace hosts,
# --nnodes 2:3, replace mode). One row per case: the cut, the take-over time (none: ridden out),
# the exit codes of hosts 1-3, the time to the end, and the case's verdict. CI runs 1, 3 and 8 s
# once; run this under `flock /tmp/cddp-cluster.lock` (it uses network namespaces).
cd "$(dirname "$0")/../.." || exit 2
runs=${1:-3} cuts=${2:-0.5,1,2,2.5,3,3.5,5,8} bad=0 n=0
printf '%-5s %-4s %s\n' run cut "result (test_elastic_netns flap lines)"
for r in $(seq "$runs"); do
  out=$(CDDP_TEST_KEEP=${CDDP_TEST_KEEP:-} bash tests/sh/test_elastic_netns.sh "flap:$cuts" 2>/dev/null)
  for s in ${cuts//,/ }; do
    name=flap${s/./_} n=$((n + 1))
    fails=$(grep -c "^not ok .*:$name: " <<<"$out")
    line=$(grep "^# $name: " <<<"$out" | sed 's/^# [^:]*: //; s/; test time so far.*//')
    [ "$fails" = 0 ] && [ -n "$line" ] && v=pass || { v="FAIL ($fails)"; bad=$((bad + 1)); }
    printf '%-5s %-4s %s: %s\n' "$r" "$s" "$v" "${line:-no summary}"
    [ "$v" = pass ] || grep "^not ok .*:$name: " <<<"$out" | cut -c1-300 | sed 's/^/      /'
  done
done
echo "$((n - bad)) of $n cases passed"
[ $bad = 0 ]
