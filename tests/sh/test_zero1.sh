#!/usr/bin/env bash
# test_zero1.sh - ddp.shard_optimizer (ZeRO-1): bitwise the unsharded run's weights and losses on
# 2 and 3 ranks (uneven shards) with accumulation, AdamW and global-norm clipping; checkpoints
# that hold the whole optimizer state and resume on another world size, sharded or not; the
# combination it refuses. Re-forming: test_zero1_elastic.sh.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-zero1-test.XXXXXX)
trap 'pkill -KILL -f "$T" 2>/dev/null; rm -rf "$T"' EXIT
CFG=configs/fmnist_mlp.yaml
# global 384 = micro 64 x world x accumulation splits over 1, 2, 3 and 6 ranks; the MLP's 227670
# parameters make shards of 113840 + 113830 floats on 2 ranks, 75904 + 75904 + 75862 on 3
BASE=(--config "$CFG" --work-dir "$T" --set model.hidden=[256,100] --set train.max_steps=30 --set eval.every_epoch=false
      --set ddp.threads=1 --set batch.global=384 --set batch.micro=64 --set checkpoint.every_steps=15)
ADAM=(--set optim.type=adamw --set optim.lr=0.002 --set optim.grad_clip=0.5 --set optim.weight_decay=0.01)
train() { # NP NAME ARGS...: cddp train on NP ranks (1: alone)
  local np=$1 name=$2; shift 2
  if [ "$np" = 1 ]; then timeout 300 "$CDDP" train "${BASE[@]}" --name "$name" "$@" >"$T/$name.out" 2>&1
  else timeout 300 "$CDDP" run --standalone --nproc-per-node "$np" "$CDDP" train "${BASE[@]}" --name "$name" "$@" >"$T/$name.out" 2>&1; fi
}
losses() { grep -v '"eval"' "$1/metrics.jsonl" | sed -n 's/.*"loss":\([^,}]*\).*/\1/p'; }
ck() { echo "$T/$1/checkpoints/step-0000000$2"; }
# same_tensors A B: every tensor of safetensors file A bitwise equal to B's (metadata aside)
same_tensors() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)] + [k for k in b if k not in a]
print("%d tensors, %d differ%s" % (len(a), len(bad), (": " + ", ".join(bad[:3])) if bad else ""))
sys.exit(1 if bad or not a else 0)
PY
}

# 1. sharded against unsharded, same world: bitwise equal weights, optimizer state, losses
for np in 2 3; do
  for opt in sgd adamw; do
    extra=(); [ $opt = adamw ] && extra=("${ADAM[@]}")
    train $np "u$np$opt" "${extra[@]}" --set ddp.shard_optimizer=false; r1=$?
    train $np "z$np$opt" "${extra[@]}" --set ddp.shard_optimizer=true; r2=$?
    st=$(same_tensors "$(ck "u$np$opt" 30)/state.safetensors" "$(ck "z$np$opt" 30)/state.safetensors")
    if [ $r1 = 0 ] && [ $r2 = 0 ] && grep -q "ZeRO-1 (optimizer state sharded, one copy of the weights in shared memory): reduce-scatter after" "$T/z$np$opt.out" &&
       grep -q "all-reduce overlapped" "$T/u$np$opt.out" &&
       [ "$(losses "$T/u$np$opt" | wc -l)" = 30 ] && [ "$(losses "$T/u$np$opt")" = "$(losses "$T/z$np$opt")" ] &&
       cmp -s "$(ck "u$np$opt" 30)/model.safetensors" "$(ck "z$np$opt" 30)/model.safetensors" &&
       same_tensors "$(ck "u$np$opt" 30)/state.safetensors" "$(ck "z$np$opt" 30)/state.safetensors" >/dev/null
    then ok "$np ranks, $opt$([ $opt = adamw ] && echo ' + clip 0.5'), accumulation $((6 / np)): sharded, one copy of the weights in shared memory = unsharded bitwise (30 losses, weights, state: $st)"
    else fail "$np ranks $opt sharded vs unsharded" "rc $r1/$r2, state $st: $(tail -2 "$T/z$np$opt.out" | tr '\n' ' ')"; fi
  done
done
# over TCP the ring reduce-scatter sums in ring order: 2 ranks still bitwise (a + b = b + a),
# 3 ranks within rounding of the unsharded run (docs/zero1.md)
for np in 2 3; do
  train $np "tu$np" "${ADAM[@]}" --transport tcp --set ddp.shard_optimizer=false; r1=$?
  train $np "tz$np" "${ADAM[@]}" --transport tcp --set ddp.shard_optimizer=true; r2=$?
  worst=$(paste <(losses "$T/tu$np") <(losses "$T/tz$np") | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r } END { printf "%.2g", w + 0 }')
  same=$(cmp -s "$(ck "tu$np" 30)/model.safetensors" "$(ck "tz$np" 30)/model.safetensors" && echo bitwise || echo "not bitwise")
  if [ $r1 = 0 ] && [ $r2 = 0 ] && grep -q "world $np (tcp), .*ZeRO-1 (optimizer state sharded): reduce-scatter + all-gather" "$T/tz$np.out" &&
     [ "$(losses "$T/tz$np" | wc -l)" = 30 ] &&
     { [ "$same" = bitwise ] || { [ $np = 3 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; }; }
  then ok "tcp, $np ranks, adamw + clip: sharded weights $same to the unsharded run's, losses within $worst"
  else fail "tcp $np ranks sharded vs unsharded" "rc $r1/$r2 $same worst=$worst: $(tail -2 "$T/tz$np.out" | tr '\n' ' ')"; fi
done
# clipping bit: the global norm is every shard's sum of squares added over the ranks
if grep -q '"grad_norm":0\.[6-9]' "$T/z3adamw/metrics.jsonl" &&
   [ "$(sed -n 's/.*"grad_norm":\([^,}]*\).*/\1/p' "$T/u3adamw/metrics.jsonl")" = "$(sed -n 's/.*"grad_norm":\([^,}]*\).*/\1/p' "$T/z3adamw/metrics.jsonl")" ]
then ok "clipping at 0.5 took effect with the global norm: the logged norms (> 0.5) equal the unsharded run's"
else fail "global norm" "$(grep -m1 -o '"grad_norm":[^,]*' "$T/z3adamw/metrics.jsonl")"; fi

# 2. a sharded checkpoint (2 ranks, step 15) resumes elsewhere; the losses go on
ref=z2adamw
for spec in "2 false" "1 false" "3 true" "3 false"; do
  set -- $spec; np=$1 z=$2; name="r$np$z"
  train "$np" "$name" "${ADAM[@]}" --set ddp.shard_optimizer="$z" --resume-from "$(ck $ref 15)"; rc=$?
  got=$(losses "$T/$name"); want=$(losses "$T/$ref" | tail -15)
  worst=$(paste <(echo "$want") <(echo "$got") | awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r } END { printf "%.2g", w + 0 }')
  if [ "$np" = 2 ]; then # the same world: bitwise
    verdict=$([ "$got" = "$want" ] && cmp -s "$(ck $ref 30)/model.safetensors" "$(ck "$name" 30)/model.safetensors" && echo same)
    what="bitwise the uninterrupted sharded run's losses and weights"
  else # other accumulation: float sums round differently, the state must still be the same state
    verdict=$(awk -v w="$worst" 'BEGIN { if (w <= 1e-5) print "same" }')
    what="losses within $worst relative of the uninterrupted run's"
  fi
  if [ $rc = 0 ] && grep -q "resuming from" "$T/$name.out" && [ "$(echo "$got" | wc -l)" = 15 ] && [ "$verdict" = same ]
  then ok "saved sharded on 2 ranks, resumed on $np rank(s) shard_optimizer=$z: $what"
  else fail "resume on $np ranks shard_optimizer=$z" "rc=$rc worst=$worst $(tail -2 "$T/$name.out" | tr '\n' ' ')"; fi
done
# an unsharded checkpoint resumed sharded: bitwise on the same world
train 2 rz "${ADAM[@]}" --set ddp.shard_optimizer=true --resume-from "$(ck u2adamw 15)"; rc=$?
if [ $rc = 0 ] && cmp -s "$(ck u2adamw 30)/model.safetensors" "$(ck rz 30)/model.safetensors" &&
   [ "$(losses "$T/rz")" = "$(losses "$T/u2adamw" | tail -15)" ]
then ok "unsharded checkpoint resumed with shard_optimizer: bitwise the unsharded run's weights and losses"
else fail "unsharded -> sharded resume" "rc=$rc $(tail -2 "$T/rz.out" | tr '\n' ' ')"; fi

# 3. refused combinations: one line naming both keys, exit 2
train 2 bad1 --set ddp.shard_optimizer=true --set ddp.compress=bf16; rc=$?
if [ $rc = 2 ] && grep -q "ddp.shard_optimizer=true: cannot be combined with ddp.compress bf16" "$T/bad1.out"
then ok "shard_optimizer with ddp.compress bf16: exit 2, one line naming both keys"
else fail "compress refused" "rc=$rc $(tail -2 "$T/bad1.out" | tr '\n' ' ')"; fi

# 4. ddp.shard_optimizer auto (the default): where the ranks can share one copy of the weights
# (one host over shared memory, a world that cannot re-form) and ddp.compress is none, the first
# steps time ZeRO-1 sharing the weights against the all-reduce and keep the faster
# (overlap_trial.c); off over TCP, with compression, under --restart-mode replace, and alone.
# CDDP_TRIAL_PICK makes the trial keep a given way, so that both the switch into ZeRO-1 and the
# one back out of it are checked: the same bits as the all-reduce run either way.
# (40 steps: the trial decides at step 31)
auto_case() { # NAME WANT-PATTERN NP [cddp run options] -- [train options]
  local name=$1 want=$2 np=$3 run=(); shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do run+=("$1"); shift; done; shift
  CDDP_DEBUG=INFO timeout 300 "$CDDP" run --standalone --nproc-per-node "$np" "${run[@]}" "$CDDP" train "${BASE[@]}" --name "$name" \
    --set train.max_steps=40 "$@" >"$T/$name.out" 2>&1; local rc=$?
  local line; line=$(grep -m1 -o "ddp.shard_optimizer auto: $want.*" "$T/$name.out")
  if [ $rc = 0 ] && [ -n "$line" ] && [ "$(losses "$T/$name" | wc -l)" = 40 ]
  then ok "auto, $name: $line"
  else fail "auto, $name" "rc=$rc want '$want': $(grep -h 'shard_optimizer' "$T/$name.out" | head -1) $(tail -2 "$T/$name.out" | tr '\n' ' ')"; fi
}
same_as() { # NAME REF: NAME's weights, state tensors and losses (40 steps) bitwise REF's
  cmp -s "$(ck "$2" 40)/model.safetensors" "$(ck "$1" 40)/model.safetensors" && [ "$(losses "$T/$1")" = "$(losses "$T/$2")" ] &&
    same_tensors "$(ck "$2" 40)/state.safetensors" "$(ck "$1" 40)/state.safetensors" >/dev/null
}
train 2 u2sgd40 --set ddp.shard_optimizer=false --set train.max_steps=40
train 2 u2adamw40 "${ADAM[@]}" --set ddp.shard_optimizer=false --set train.max_steps=40
timed="median step [0-9.]* ms with ZeRO-1 sharing the weights, [0-9.]* ms with the all-reduce [a-z ]* (6 steps each, in turns of 3, mean of 2 ranks)"
auto_case a2 "$timed: \(ZeRO-1\|the all-reduce\)" 2 --
same_as a2 u2sgd40 && ok "auto on 2 ranks, the fastest way kept: bitwise the all-reduce run's weights, state and losses" ||
  fail "auto against the all-reduce run" "$(tail -2 "$T/a2.out" | tr '\n' ' ')"
CDDP_TRIAL_PICK=sharded auto_case a2z "$timed: ZeRO-1 (CDDP_TRIAL_PICK)" 2 -- "${ADAM[@]}"
same_as a2z u2adamw40 && ok "auto kept ZeRO-1 (AdamW + clip, accumulation 3): bitwise the all-reduce run's weights, state and losses" ||
  fail "auto into ZeRO-1" "$(tail -2 "$T/a2z.out" | tr '\n' ' ')"
CDDP_TRIAL_PICK=after auto_case a2r "$timed: the all-reduce (CDDP_TRIAL_PICK)" 2 -- "${ADAM[@]}"
same_as a2r u2adamw40 && ok "auto went back to the all-reduce after timing ZeRO-1 (moments all-gathered, weights unshared): bitwise the all-reduce run's" ||
  fail "auto out of ZeRO-1" "$(tail -2 "$T/a2r.out" | tr '\n' ' ')"
auto_case atcp "ZeRO-1 off: the ranks cannot share one copy of the parameters (not all over shared memory, or the world may re-form)" 2 -- --transport tcp
auto_case abf16 "ZeRO-1 off: ddp.compress is not none" 2 -- --set ddp.compress=bf16
auto_case areplace "ZeRO-1 off: the ranks cannot share one copy of the parameters" 2 --restart-mode replace --
auto_case a1 "ZeRO-1 off: a world of one" 1 --

# 5. the bench's smoke: bench/zero1_bench.sh, one short round on the MLP with AdamW; the sharded
# rows hold half of m and v (14.2 -> 7.1 MB a rank): at least 4 MB less peak RSS on each rank
# (the allocator's own swings are about 1 MB)
bash bench/zero1_bench.sh --steps 20 --rounds 1 --models mlp-adamw --out "$T/bench" >"$T/bench.out" 2>&1; rc=$?
rows=$(awk '$1 == "mlp-adamw" && $2 == 1 && $4 ~ /^[0-9]+$/ && $5 ~ /^[0-9.]+$/ && $7 ~ /^[0-9.]+$/' "$T/bench.out" | wc -l)
saved=$(sed -n 's/^mlp-adamw  *saved per rank: r0 \([-0-9.]*\) MB, r1 \([-0-9.]*\) MB.*/\1 \2/p' "$T/bench.out")
if [ $rc = 0 ] && [ "$rows" = 2 ] && [ -n "$saved" ] && awk -v s="$saved" 'BEGIN { split(s, a, " "); exit !(a[1] >= 4 && a[2] >= 4) }'
then ok "bench/zero1_bench.sh smoke: whole and sharded rows, peak RSS saved per rank (MB, r0 r1): $saved"
else fail "zero1 bench smoke" "rc=$rc rows=$rows saved=[$saved] $(tail -4 "$T/bench.out" | tr '\n' ' ')"; fi
finish
