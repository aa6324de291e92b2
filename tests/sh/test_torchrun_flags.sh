#!/usr/bin/env bash
# test_torchrun_flags.sh - `cddp run` against the installed torch 2.x torchrun (.venv, made by
# scripts/install-deps.sh test): every flag of torchrun's own argument parser is either cddp's
# (in `cddp run --help`) or refused with one line and listed in docs/launcher.md; a refused flag's
# PET_<FLAG> too; and a worker sees the same environment keys under both launchers, except
# the documented list.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
ROOT=$PWD PY=$PWD/.venv/bin/python
if ! "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
  echo "ok 1 - $t_name # SKIP $PY has no torch (scripts/install-deps.sh test)"; exit 0
fi
T=$(mktemp -d /tmp/cddp-torchrun-flags.XXXXXX)
trap 'rm -rf "$T"' EXIT

# torchrun's flags, from its parser (not its --help text): one line per flag, its spellings
"$PY" -c '
from torch.distributed.run import get_args_parser
for a in get_args_parser()._actions:
    if a.option_strings:
        print(" ".join(a.option_strings))' >"$T/flags" || { fail "torchrun's parser" "$(cat "$T/flags")"; finish; }
"$CDDP" run --help >"$T/help" 2>&1
sed -n '/<!-- refused-flags: begin -->/,/<!-- refused-flags: end -->/p' docs/launcher.md |
  grep -o '^| `--[a-z-]*`' | tr -d '|` ' >"$T/documented"
n_own=0 n_refused=0
while read -r spellings; do
  long=$(tr ' ' '\n' <<<"$spellings" | grep -- '^--' | head -1)
  dash=${long//_/-}
  if grep -qE -- "(^  |,)$dash( |$)" "$T/help"; then
    for s in $spellings; do # each spelling reaches cddp's flag: --help would print usage, the rest parse
      [ "$s" = -h ] || [ "$s" = --help ] && continue
      out=$("$CDDP" run "$s" 2>&1 </dev/null); [[ "$out" == *"unknown flag"* ]] && fail "torchrun's $s" "cddp: $out"
    done
    n_own=$((n_own + 1)); continue
  fi
  out=$("$CDDP" run --standalone "$long" 1 x.py 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && [[ "$out" == "cddp run: torchrun's $long is not supported: "* ]] &&
     grep -qx -- "$dash" "$T/documented"; then n_refused=$((n_refused + 1))
  else fail "torchrun's $long: neither cddp's nor refused and documented" "exit $rc: $out"; fi
done <"$T/flags"
[ $((n_own + n_refused)) = "$(wc -l <"$T/flags")" ] && [ "$n_own" -gt 15 ] &&
  ok "every torchrun 2.x flag: $n_own cddp's, $n_refused refused with one line and documented" ||
  fail "torchrun flags" "$n_own cddp's, $n_refused refused, of $(wc -l <"$T/flags")"
# a listed flag torchrun no longer has is a stale line in the docs
stale=$(while read -r f; do grep -q -- "$f\b" "$T/flags" || echo "$f"; done <"$T/documented")
[ -z "$stale" ] && ok "docs/launcher.md refuses only flags torchrun has" || fail "stale refused flags" "$stale"
out=$(PET_NUMA_BINDING=node "$CDDP" run --standalone x.py 2>&1); rc=$?
[ $rc = 2 ] && [[ "$out" == "cddp run: torchrun's PET_NUMA_BINDING (--numa-binding) is not supported: "* ]] &&
  ok "a refused flag's PET_ variable: one line" || fail "PET_NUMA_BINDING" "exit $rc: $out"
out=$("$CDDP" run --standalone --shutdown-timeout soon x.py 2>&1); rc=$?
[ $rc = 2 ] && [ "$out" = "cddp run: --shutdown-timeout must be a number of seconds >= 0, got 'soon'" ] &&
  ok "--shutdown-timeout is --grace-period" || fail "--shutdown-timeout" "exit $rc: $out"

# the workers' environment keys under torchrun 2.x and cddp run, the same clean start
printf 'import os\nprint("ENVKEYS", " ".join(sorted(os.environ)), flush=True)\n' >"$T/envkeys.py"
keys() { grep -o 'ENVKEYS.*' | head -1 | tr ' ' '\n' | sed 1d | sort; }
clean=(env -i PATH=/usr/bin:/bin HOME="$HOME")
(cd "$T" && "${clean[@]}" timeout 120 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 envkeys.py 2>&1) | keys >"$T/torchrun.keys"
(cd "$T" && "${clean[@]}" CDDP_PYTHON="$PY" timeout 120 "$CDDP" run --standalone --nproc-per-node 2 envkeys.py 2>&1) | keys >"$T/cddp.keys"
extra=$(sed -n 's/^<!-- env-extra: \(.*\) -->$/\1/p' docs/launcher.md)
filter() { local k x; while read -r k; do for x in $extra CDDP_PYTHON; do [[ "$k" == $x ]] && continue 2; done; echo "$k"; done; }
d=$(diff <(filter <"$T/torchrun.keys") <(filter <"$T/cddp.keys") | grep '^[<>]' | tr '\n' ' ')
if [ -s "$T/torchrun.keys" ] && [ -s "$T/cddp.keys" ] && [ -z "$d" ]; then
  ok "a worker's environment: torchrun 2.x's keys, cddp's the same but the documented ones ($(wc -l <"$T/torchrun.keys") keys)"
else fail "worker environment keys (< torchrun only, > cddp only)" "${d:-no keys: $(wc -l <"$T/torchrun.keys")/$(wc -l <"$T/cddp.keys")}"; fi
finish
