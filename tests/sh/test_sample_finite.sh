#!/usr/bin/env bash
# test_sample_finite.sh - `cddp sample` from a checkpoint whose weights are not finite (a run that
# diverged saved NaN or Inf): one line naming the tensor, exit 1, no text. It used to print NUL
# bytes and exit 0. The same checkpoint with finite weights samples.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-sample.XXXXXX)
trap 'rm -rf "$T"' EXIT
# poison DIR VALUE: every float32 of DIR/model.safetensors set to VALUE; the MANIFEST's crc32s
# made true again, so the checkpoint verifies and only its numbers are wrong
poison() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys, zlib
d, value = sys.argv[1], float(sys.argv[2])
b = bytearray(open(d + "/model.safetensors", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
for k, v in json.loads(b[8:8 + n]).items():
    if k != "__metadata__" and v["dtype"] == "F32":
        s, e = v["data_offsets"]
        b[8 + n + s:8 + n + e] = struct.pack("<f", value) * ((e - s) // 4)
open(d + "/model.safetensors", "wb").write(b)
lines = [l for l in open(d + "/MANIFEST").read().splitlines() if not l.startswith("crc32 ")]
lines = ["file model.safetensors %d %08x" % (len(b), zlib.crc32(bytes(b))) if l.startswith("file model.safetensors ") else l
         for l in lines]
text = "".join(l + "\n" for l in lines)
open(d + "/MANIFEST", "w").write(text + "crc32 %08x\n" % zlib.crc32(text.encode()))
PY
}
timeout 120 "$CDDP" train --config configs/gpt_kjv.yaml --work-dir "$T" --name g --set model.n_layer=1 --set model.d_model=32 \
  --set model.n_head=2 --set model.context=32 --set train.max_steps=2 --set schedule.warmup_steps=1 \
  --set checkpoint.every_steps=2 --set eval.every_epoch=false >"$T/g.out" 2>&1 || fail "tiny gpt" "$(tail -2 "$T/g.out")"
out=$("$CDDP" sample --ckpt "$T/g" --prompt "And" -n 8 2>&1); rc=$?
[ $rc = 0 ] && [ "${out:0:3}" = "And" ] && ok "finite weights: sampled" || fail "finite" "rc=$rc: $out"
for v in nan inf; do
  cp -r "$T/g" "$T/$v"; poison "$T/$v/checkpoints/step-000000002" "$v"
  "$CDDP" ckpt verify "$T/$v" >/dev/null 2>&1 || fail "$v: the poisoned checkpoint does not verify" ""
  "$CDDP" sample --ckpt "$T/$v" -n 8 >"$T/$v.stdout" 2>"$T/$v.err"; rc=$?
  [ $rc = 1 ] && [ ! -s "$T/$v.stdout" ] && [ "$(wc -l <"$T/$v.err")" = 1 ] &&
    grep -q "^cddp sample: $T/$v/checkpoints/step-000000002: tensor wte.weight holds [0-9]* non-finite values (NaN or Inf) of [0-9]*: the run diverged" "$T/$v.err" &&
    ok "all-$v weights: one line naming the tensor, exit 1, no text" || fail "$v weights" "rc=$rc: $(cat "$T/$v.err") / $(od -c "$T/$v.stdout" | head -2)"
done
finish
