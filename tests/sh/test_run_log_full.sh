#!/usr/bin/env bash
# test_run_log_full.sh - a worker's --log-dir log on a full disk: the agent says once which log
# it cannot write and why (ENOSPC), the rest of that worker's output is not logged, and the job
# goes on to its end (exit 0); it used to drop the lines without a word. Needs root (mount); a
# skip otherwise.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
if [ "$(id -u)" != 0 ]; then echo "ok 1 - $t_name:full log disk # SKIP needs root to mount a tmpfs"; exit 0; fi
T=$(mktemp -d /tmp/cddp-run-log-full.XXXXXX)
cleanup() { umount "$T/logs" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
mkdir -p "$T/logs"
mount -t tmpfs -o size=256k tmpfs "$T/logs" || { fail "mount a 256 KiB tmpfs on $T/logs"; finish; }
# each worker writes ~1 MiB of lines (more than the disk holds), then a last line, and ends well
cat >"$T/chatty.sh" <<'EOS'
#!/bin/sh
yes "a line of output that fills the log disk up, sixty-four bytes or so......" | head -n 16000
echo "last line of rank $RANK"
EOS
chmod +x "$T/chatty.sh"
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 --log-dir "$T/logs" --tee 0 "$T/chatty.sh" >"$T/out" 2>"$T/err"
rc=$?
said=$(grep -c "cannot write rank [01]'s log $T/logs/.*rank[01].log: No space left on device; the rest of its output is not logged, the job goes on" "$T/err")
if [ $rc = 0 ] && [ "$said" -ge 1 ] && [ "$said" -le 2 ]; then
  ok "a full log disk: one line per log naming it and ENOSPC, the job ends well"
else fail "a full log disk" "rc $rc, said $said times: $(grep -v '^\[rank' "$T/err" | head -3 | tr '\n' ' ')"; fi
for r in 0 1; do
  n=$(grep -c "cannot write rank $r's log" "$T/err")
  [ "$n" -le 1 ] || { fail "said once per log" "rank $r: $n lines"; finish; }
done
ok "said at most once per log, however many lines follow"
finish
