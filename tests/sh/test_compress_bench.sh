#!/usr/bin/env bash
# test_compress_bench.sh - bench/compress_netns.sh --parse-only on made-up metrics: its medians, ratios and verdicts.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-test-compress-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
B=bench/compress_netns.sh

# fake DIR METHOD RUN BYTES "STEP_MS..." VAL: a metrics.jsonl as cddp train writes it (step lines,
# then the eval line)
fake() {
  local d=$1/runs/$2-r$3 s=0 ms
  mkdir -p "$d"
  : >"$d/metrics.jsonl"
  for ms in $5; do
    s=$((s + 1))
    printf '{"step":%d,"epoch":0,"loss":3.5,"lr":0.001,"grad_norm":1,"samples":32,"samples_per_s":20.0,"tokens_per_s":2560.0,"step_ms":%s,"compute_ms":300.000,"comm_ms":%s,"data_ms":0.004,"bytes_sent":%s,"compression":1.00,"time":1.0}\n' \
      "$s" "$ms" "$((ms / 2))" "$4" >>"$d/metrics.jsonl"
  done
  printf '{"eval":true,"epoch":0,"step":%d,"accuracy":0.300000,"loss":%s,"samples":1736}\n' "$s" "$6" >>"$d/metrics.jsonl"
}
# steps 1..3 are skipped (--skip 3): the slow first steps must not count
A=$T/a
fake "$A" none 1 13031424 "9000 9000 9000 1000 1200 1100 1300 1000" 2.2000
fake "$A" none 2 13031424 "9000 9000 9000 1100 1100 1200 1000 1100" 2.2100
fake "$A" bf16 1 6515712 "9000 9000 9000 600 650 600 700 600" 2.2010
fake "$A" sign 1 509040 "9000 9000 9000 400 410 420 400 400" 2.2400
fake "$A" powersgd 1 608256 "9000 9000 9000 450 450 460 450 440" 2.2150
out=$("$B" --parse-only "$A" --skip 3 2>&1); rc=$?
echo "$out" | sed 's/^/# /'
row() { echo "$out" | awk -v m="$1" '$1 == m'; }
# none: 10 steps pooled over 2 runs -> median 1100, p10 1000; val median of 2.2000, 2.2100 = 2.2050
[[ "$(row none)" =~ ^none\ +13\.031\ +1\.00\ +1100\.0\ +1\.00\ +550\.0\ +300\.0\ +1000\.0\ +1\.00\ +2\.2050\ +\+0\.00%$ ]] && ok fp32_row || fail fp32_row "$(row none)"
# bf16: half the bytes, median 600 -> 1100/600 = 1.83x; loss +0.18%
[[ "$(row bf16)" =~ ^bf16\ +6\.516\ +2\.00\ +600\.0\ +1\.83\ .*2\.2010\ +-0\.18%$ ]] && ok bf16_row || fail bf16_row "$(row bf16)"
# sign: 13031424 / 509040 = 25.60x fewer bytes; median 400; loss (2.24 - 2.205) / 2.205 = +1.59%
[[ "$(row sign)" =~ ^sign\ +0\.509\ +25\.60\ +400\.0\ +2\.75\ .*2\.2400\ +\+1\.59%$ ]] && ok sign_row || fail sign_row "$(row sign)"
# powersgd (GPT, rank 8): 13031424 / 608256 = 21.42x fewer bytes; median 450; loss +0.45%
[[ "$(row powersgd)" =~ ^powersgd\ +0\.608\ +21\.42\ +450\.0\ +2\.44\ .*2\.2150\ +\+0\.45%$ ]] && ok powersgd_row || fail powersgd_row "$(row powersgd)"
echo "$out" | grep -q '^PASS: powersgd cuts bytes >= 8x (fp32/powersgd = 21.424)' &&
  echo "$out" | grep -q '^PASS: powersgd val loss within 2%' && ok powersgd_verdicts || fail powersgd_verdicts "$out"
[ "$(echo "$out" | grep -c '^PASS: ')" = 7 ] && echo "$out" | grep -qx 'PASS: a stronger method meets both goals: sign powersgd' &&
  [ $rc = 0 ] && ok all_goals_pass || fail all_goals_pass "rc $rc"

# goals missed: bf16 only 1.5x faster, sign 3% worse, powersgd only 7x fewer bytes -> FAILs, exit 1
fake "$A" bf16 1 6515712 "9000 9000 9000 733 733 733 733 733" 2.2010
fake "$A" sign 1 509040 "9000 9000 9000 400 410 420 400 400" 2.2712
fake "$A" powersgd 1 1861632 "9000 9000 9000 450 450 460 450 440" 2.2150
out=$("$B" --parse-only "$A" --skip 3 2>&1); rc=$?
echo "$out" | grep -q '^FAIL: bf16 cuts step time' && echo "$out" | grep -q '^FAIL: sign val loss' &&
  echo "$out" | grep -q '^FAIL: powersgd cuts bytes' && echo "$out" | grep -q '^PASS: powersgd val loss' &&
  echo "$out" | grep -q '^PASS: sign cuts bytes' && echo "$out" | grep -qx 'FAIL: no stronger method meets both goals' &&
  [ $rc = 1 ] && ok missed_goals_fail || fail missed_goals_fail "rc $rc: $out"

# one stronger method meeting both goals is enough: sign 3% worse, powersgd fine -> exit 0
fake "$A" bf16 1 6515712 "9000 9000 9000 600 650 600 700 600" 2.2010
fake "$A" powersgd 1 608256 "9000 9000 9000 450 450 460 450 440" 2.2150
out=$("$B" --parse-only "$A" --skip 3 2>&1); rc=$?
echo "$out" | grep -q '^FAIL: sign val loss' && echo "$out" | grep -qx 'PASS: a stronger method meets both goals: powersgd' &&
  [ $rc = 0 ] && ok one_stronger_method_suffices || fail one_stronger_method_suffices "rc $rc: $out"

# --methods picks the rows (fp16 passes through untouched); a method without runs shows dashes
fake "$A" fp16 1 6515712 "9000 9000 9000 650 650 650 650 650" 2.2011
out=$("$B" --parse-only "$A" --skip 3 --methods "none fp16 sign bf16x" 2>&1)
[[ "$(row fp16)" =~ ^fp16\ +6\.516\ +2\.00\ +650\.0\ +1\.69 ]] && [[ "$(row bf16x)" =~ ^bf16x\ +-\ +-\ +-\  ]] &&
  ! echo "$out" | grep -q 'bf16 halves' && ok methods_option || fail methods_option "$out"

# bad input: one line, exit 2
out=$("$B" --parse-only "$T/none" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "not one" && ok bad_dir || fail bad_dir "rc $rc: $out"
out=$("$B" --steps 0 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--steps" && ok bad_steps || fail bad_steps "rc $rc: $out"
finish
