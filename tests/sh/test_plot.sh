#!/usr/bin/env bash
# test_plot.sh - `cddp plot RUN_DIR` draws a run's metrics with gnuplot (PNG, SVG and PDF): the
# run name as written, aligned x-axes, an accuracy panel after an evaluation, tokens/s for a text
# model; bad input gets one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-plot.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v gnuplot >/dev/null; then echo "ok 1 - test_plot:plot # SKIP gnuplot is not installed"; exit 0; fi
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/fmnist_mlp.yaml \
  --work-dir "$T" --name my_run_1 --set model.hidden=[32] --set train.max_steps=30 >/dev/null 2>&1

R=$T/my_run_1
out=$("$CDDP" plot "$R" 2>&1); rc=$?
magic=$(head -c 8 "$R/metrics.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
if [ $rc = 0 ] && [ "$magic" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$R/metrics.png")" -gt 20000 ] &&
   [ "$out" = "cddp plot: 30 steps, 1 evaluations, per-rank work -> $R/metrics.png" ]; then ok "PNG of 30 steps, the final eval and the ranks' work, nothing on stderr"
else fail "png" "rc=$rc magic=$magic $out"; fi

# SVG: the run's name as written (gnuplot's enhanced text made '_1' a subscript), 5 panels (loss,
# eval accuracy, samples/s, comm, each rank's own work) whose x-axes line up: each panel's 'step' label and its tick
# '10' sit at the same x (the left margin used to follow each panel's y tick labels)
"$CDDP" plot "$R" --out "$T/n.svg" >/dev/null 2>&1; rc=$?
# xs TEXT FILE: the x of every centred label TEXT in an SVG of gnuplot, one per line (the label
# plain, or in one tspan as gnuplot's enhanced text writes it)
xs() { grep -B1 -E "<text>(<tspan[^>]*>)?$1(</tspan>)?</text>" "$2" | grep 'text-anchor="middle"' | sed -n 's/.*translate(\([0-9.]*\),.*/\1/p'; }
[ $rc = 0 ] && grep -q "<text>my_run_1</text>" "$T/n.svg" && ok "SVG: the title 'my_run_1' as written" ||
  fail "svg: title" "rc=$rc: $(grep -m1 -A1 'font-size="12.00"  text-anchor="middle"' "$T/n.svg" | tail -1)"
[ "$(xs step "$T/n.svg" | wc -l)" = 5 ] && grep -q "<text>eval accuracy</text>" "$T/n.svg" &&
  grep -q "<text>own work per rank (ms)</text>" "$T/n.svg" && grep -q "<text>rank 0</text>" "$T/n.svg" &&
  grep -q "<text>rank 1</text>" "$T/n.svg" && ! grep -q "<text>rank 2</text>" "$T/n.svg" &&
  ok "SVG: 5 panels, the eval accuracy and each of the 2 ranks' own work among them" ||
  fail "svg: accuracy and per-rank panels" "$(xs step "$T/n.svg" | wc -l) panels"
if [ "$(xs step "$T/n.svg" | sort -u | wc -l)" = 1 ] && [ "$(xs ' 10' "$T/n.svg" | wc -l)" -ge 3 ] &&
   [ "$(xs ' 10' "$T/n.svg" | sort -u | wc -l)" = 1 ]
then ok "SVG: the panels' x-axes line up ('step' and tick 10 at x = $(xs step "$T/n.svg" | head -1), $(xs ' 10' "$T/n.svg" | head -1))"
else fail "svg: x-axes" "step x: $(xs step "$T/n.svg" | tr '\n' ' ') tick 10 x: $(xs ' 10' "$T/n.svg" | tr '\n' ' ')"; fi

"$CDDP" plot "$R" --out "$T/m.pdf" >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && [ "$(head -c 5 "$T/m.pdf")" = "%PDF-" ] && ok "--out .pdf writes a PDF" ||
  fail "pdf" "rc=$rc: $(head -c 8 "$T/m.pdf" | od -An -c)"

# a text model's metrics (tokens_per_s = 128 x samples_per_s), no evaluation: tokens/s, 3 panels
mkdir -p "$T/gpt"
for i in $(seq 20); do
  echo "{\"step\":$i,\"epoch\":1,\"loss\":$((40 - i)).5,\"samples\":32,\"samples_per_s\":$((i + 70)).0,\"tokens_per_s\":$((128 * (i + 70))).0,\"step_ms\":400,\"comm_ms\":$i}"
done >"$T/gpt/metrics.jsonl"
"$CDDP" plot "$T/gpt" --out "$T/gpt.svg" >/dev/null 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "<text>tokens/s</text>" "$T/gpt.svg" && ! grep -q "samples/s" "$T/gpt.svg" &&
   grep -q "<text> 10000</text>" "$T/gpt.svg" && ! grep -q "<text> 80</text>" "$T/gpt.svg" && [ "$(xs step "$T/gpt.svg" | wc -l)" = 3 ] && ! grep -q accuracy "$T/gpt.svg"
then ok "text model: the throughput panel is tokens/s (9088-11520), no accuracy panel without an evaluation"
else fail "tokens/s" "rc=$rc $(grep -o '<text>[a-z/]*/s</text>' "$T/gpt.svg")"; fi

# the exposed-comm panel of a long run (700 noisy steps, comm up 3x from step 300): each step
# faint, a moving mean of each series bold, the key above the panel (it covered the data): every
# key entry sits between the panel above's 'step' label and this panel's top tick
mkdir -p "$T/long"
awk 'BEGIN { srand(3); for (i = 1; i <= 700; i++) { c = 5 + 10 * rand() * rand() * (i > 300 ? 3 : 1)
  printf "{\"step\":%d,\"loss\":%.3f,\"samples_per_s\":%.1f,\"step_ms\":%.2f,\"comm_ms\":%.2f}\n", i, 2 / (1 + i / 100), 2000, 40 + c, c } }' >"$T/long/metrics.jsonl"
"$CDDP" plot "$T/long" --out "$T/long.svg" >/dev/null 2>&1; rc=$?
# key_above SVG: the comm panel's key entries above its plot area (gnuplot writes each text as
# translate(x,y) then <text>label</text>)
key_above() {
  python3 - "$1" <<'PY'
import re, sys
t = [(float(y), s) for x, y, s in re.findall(r"translate\(([0-9.]+),([0-9.]+)\)[^<]*>\s*<text>([^<]*)</text>", open(sys.argv[1]).read())]
steps = sorted(y for y, s in t if s == "step")
lo, hi = steps[-2], steps[-1]                       # the comm panel lies between these
ticks = [y for y, s in t if lo < y < hi and re.fullmatch(r" ?-?[0-9.]+", s)]
keys = [y for y, s in t if s in ("ms, each step", "ms, moving mean (~20 steps)", "% of step, moving mean")]
sys.exit(not (len(keys) == 3 and ticks and all(lo < y < min(ticks) for y in keys)))
PY
}
if [ $rc = 0 ] && key_above "$T/long.svg"; then
  ok "exposed comm of 700 steps: each step faint, moving means bold, the key above the data"
else fail "comm panel" "rc=$rc: $(grep -o '<text>[^<]*step[^<]*</text>' "$T/long.svg" | tr '\n' ' ')"; fi

"$CDDP" plot "$R" --out "$T/m.svg" --title "it's mine" >/dev/null 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "<svg" "$T/m.svg" && grep -q "samples/s" "$T/m.svg" && grep -q "it&#39;s mine\|it's mine" "$T/m.svg"
then ok "SVG with a title holding a quote"; else fail "svg" "rc=$rc"; fi

bad() { # NAME WANT-REGEX EXPECTED-RC ARGS...
  local name=$1 want=$2 code=$3; shift 3
  local o r; o=$("$CDDP" plot "$@" 2>&1); r=$?
  if [ $r = "$code" ] && grep -Eq -e "$want" <<<"$o" && [ "$(grep -c . <<<"$o")" = 1 ]; then ok "bad input: $name"
  else fail "bad input: $name" "rc=$r: $o"; fi
}
bad "no run dir" "RUN_DIR is required" 2
bad "missing run" "cannot read $T/nope/metrics.jsonl" 1 "$T/nope"
mkdir -p "$T/empty" && : >"$T/empty/metrics.jsonl"
bad "no steps" "has no step lines" 1 "$T/empty"
bad "unknown flag" "unknown option '--bogus'" 2 "$R" --bogus
bad "second run dir" "unexpected argument 'extra'" 2 "$R" extra
# gnuplot injection: a newline in the title, or in the run folder's name (the default title),
# would end the quoted string and run the next line: system("touch ...") must create nothing
"$CDDP" plot "$R" --out "$T/inj.png" --title $'a\nsystem("touch '"$T"'/pwned")\n' >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && [ ! -e "$T/pwned" ] && [ -s "$T/inj.png" ] && ok "a newline in --title runs nothing" ||
  fail "title injection" "rc=$rc pwned=$(ls "$T/pwned" 2>&1)"
evil=$'a\nsystem("touch pwned2")\nb'
mkdir -p "$T/$evil" && cp "$R/metrics.jsonl" "$T/$evil/"
(cd "$T" && "$CDDP" plot "$evil" --out "$T/inj2.svg" >/dev/null 2>&1); rc=$?
[ $rc = 0 ] && [ ! -e "$T/pwned2" ] && grep -qF "<text>a system(\"touch pwned2\") b</text>" "$T/inj2.svg" &&
  ok "a newline in the run folder's name runs nothing (drawn as a space)" ||
  fail "folder-name injection" "rc=$rc pwned2=$(ls "$T/pwned2" 2>&1)"
bad "an output path with a newline" "holds a control character" 2 "$T/$evil"
[ ! -e "$T/pwned2" ] || fail "output path injection" "pwned2 created"
bad "--out of another kind" "--out $T/x.jpg: the name must end in .png, .svg or .pdf" 2 "$R" --out "$T/x.jpg"
finish
