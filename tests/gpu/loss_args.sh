# tests/gpu/loss_args.sh - the GPT run whose loss the GPU must match (sourced by run.sh and
# make_ref.sh): gpt_kjv's data, a 2-layer d-128 model, 200 AdamW steps of 32 sequences of 128 bytes.
LOSS=(--config configs/gpt_kjv.yaml --set model.n_layer=2 --set model.d_model=128 --set model.n_head=4
      --set schedule.warmup_steps=20 --set train.max_steps=200 --set eval.every_epoch=false --set eval.at_end=false
      --set log.every_steps=1 --set checkpoint.every_steps=0)
