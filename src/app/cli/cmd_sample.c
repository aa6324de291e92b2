/* cmd_sample.c - `cddp sample`: text from a trained byte-level GPT checkpoint (temperature,
 * top-k), so a user can see what the model learned. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cddp/ckpt.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/check.h"
#include "trainer/config.h"
#include "trainer/device.h"
#include "trainer/gpt.h"
#include "trainer/ops.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp sample --ckpt PATH [--prompt TEXT] [-n N] [--temperature T] [--top-k K]\n"
          "                   [--seed S] [--config YAML] [--device cpu|cuda|auto]\n"
          "  --ckpt PATH        a checkpoint dir, a checkpoints/ dir (its newest) or a run dir\n"
          "  --prompt TEXT      the text to continue (default: a new line)\n"
          "  -n N               bytes to generate (default 200)\n"
          "  --temperature T    > 0; lower is more conservative (default 0.8)\n"
          "  --top-k K          sample among the K likeliest bytes; 0 = all (default 40)\n"
          "  --seed S           the sampler's seed (default 1): same seed, same text\n"
          "  --config YAML      the run's config (default: config.yaml of the checkpoint's run)\n"
          "  --device D         where the model runs: cpu, cuda or auto (default: the run's train.device)\n");
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* PATH as given -> a checkpoint dir and the run's config.yaml beside its checkpoints/. */
static int resolve(const char *path, char *ckpt, size_t cap, char *config, size_t ccap) {
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/DONE", path);
  struct stat st;
  if (stat(probe, &st) == 0) {
    snprintf(ckpt, cap, "%s", path);
  } else {
    char root[4200];
    snprintf(root, sizeof root, "%s/checkpoints", path);
    const char *r = is_dir(root) ? root : path;
    if (cddp_ckpt_find_latest(r, ckpt, cap) != CDDP_OK) {
      fprintf(stderr, "cddp sample: no complete checkpoint at %s: %s\n", path, cddp_last_error());
      return -1;
    }
  }
  if (!config[0]) {
    if (snprintf(config, ccap, "%.4000s/../../config.yaml", ckpt) >= (int)ccap) return -1;
    if (stat(config, &st) != 0) {
      fprintf(stderr, "cddp sample: cannot find the run's config (%s); pass --config\n", config);
      return -1;
    }
  }
  return 0;
}

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* One byte from the logits of the last position: temperature, top-k, then a draw. */
static int pick(const float *logits, int vocab, float temp, int top_k, uint64_t *rng) {
  double p[CDDP_GPT_VOCAB], mx = -INFINITY, kth = -INFINITY;
  int likeliest = 0;
  for (int v = 0; v < vocab; v++)
    if (logits[v] > mx) mx = logits[v], likeliest = v;
  if (top_k > 0 && top_k < vocab) { /* the k-th largest logit: keep those at or above it */
    float sorted[CDDP_GPT_VOCAB];
    memcpy(sorted, logits, (size_t)vocab * sizeof *sorted);
    for (int i = 0; i < top_k; i++) {
      int best = i;
      for (int j = i + 1; j < vocab; j++)
        if (sorted[j] > sorted[best]) best = j;
      float tmp = sorted[i];
      sorted[i] = sorted[best], sorted[best] = tmp;
    }
    kth = sorted[top_k - 1];
  }
  double sum = 0;
  for (int v = 0; v < vocab; v++) sum += p[v] = logits[v] >= kth ? exp((logits[v] - mx) / temp) : 0;
  double u = (double)(next_u64(rng) >> 11) / 9007199254740992.0 * sum;
  for (int v = 0; v < vocab; v++)
    if ((u -= p[v]) <= 0 && p[v] > 0) return v;
  return likeliest; /* rounding left u > 0: the likeliest */
}

/* (0, 100] */
static int parse_temperature(const char *v, void *dst) {
  char *end;
  double t = strtod(v, &end);
  if (end == v || *end || !(t > 0) || t > 100) return -1;
  *(double *)dst = t;
  return 0;
}

int cddp__cmd_sample(int argc, char **argv) {
  const char *path = NULL, *prompt = "\n";
  char config[4096] = "";
  long n = 200, top_k = 40;
  double temp = 0.8;
  uint64_t seed = 1;
  const char *config_flag = NULL, *device_flag = NULL;
  const cddp__flag_t flags[] = {
      CDDP__FLAG_STR_ROW("--device", NULL, &device_flag),
      CDDP__FLAG_STR_ROW("--ckpt", NULL, &path),
      CDDP__FLAG_STR_ROW("--prompt", NULL, &prompt),
      CDDP__FLAG_STR_ROW("--config", NULL, &config_flag),
      CDDP__FLAG_LONG_ROW("-n", &n, 0, 1000000, "0..1000000"),
      CDDP__FLAG_FN_ROW("--temperature", &temp, parse_temperature, "a number > 0"),
      CDDP__FLAG_LONG_ROW("--top-k", &top_k, 0, 256, "0..256"),
      CDDP__FLAG_U64_ROW("--seed", &seed, "a number"),
  };
  const cddp__cli_t cli = {.cmd = "sample", .flags = flags, .n_flags = (int)CDDP_ARRAY_LEN(flags), .usage = usage};
  int parsed = cddp__flags_parse(&cli, argc, argv);
  if (parsed >= 0) return parsed;
  if (config_flag) snprintf(config, sizeof config, "%s", config_flag);
  if (!path) return fprintf(stderr, "cddp sample: --ckpt PATH is required (a checkpoint or run dir)\n"), 2;
  char dir[4020];
  if (resolve(path, dir, sizeof dir, config, sizeof config) != 0) return 1;
  cddp_train_config_t cfg;
  if (cddp__config_load(&cfg, config, NULL, 0) != CDDP_OK) {
    fprintf(stderr, "cddp sample: %s\n", cddp_last_error());
    return 1;
  }
  static const char *const devices[] = {"cpu", "cuda", "auto"}; /* train.device's order */
  if (device_flag) {
    int k = 0;
    while (k < 3 && strcmp(device_flag, devices[k])) k++;
    if (k == 3) return fprintf(stderr, "cddp sample: --device %.40s: not cpu, cuda or auto\n", device_flag), 2;
    cfg.device = k;
  }
  cddp_device_choice_t choice;
  if (cddp__device_resolve((cddp_device_kind_t)cfg.device, &choice) != CDDP_OK)
    return fprintf(stderr, "cddp sample: %s\n", cddp_last_error()), 2;
  const cddp_ops_t *ops = cddp__device_ops(&choice);
  if (cfg.model.kind != CDDP_MODEL_GPT) {
    fprintf(stderr, "cddp sample: %s trains model.type %s, not gpt: nothing to sample\n", config,
            cfg.model.kind == CDDP_MODEL_CNN ? "cnn" : "mlp");
    return 1;
  }
  cddp_gpt_t *m = NULL;
  cddp_ckpt_t *c = NULL;
  float *params = NULL, *dparams = NULL, row[CDDP_GPT_VOCAB];
  uint8_t *window = NULL;
  int rc = 1, T = cfg.gpt.context;
  if (cddp__gpt_create_on(ops, &cfg.gpt, 1, &m) != CDDP_OK || cddp_ckpt_load(dir, &c) != CDDP_OK) {
    fprintf(stderr, "cddp sample: %s\n", cddp_last_error());
    goto out;
  }
  size_t np = cddp__gpt_param_count(m);
  params = malloc(np * sizeof *params);
  window = malloc((size_t)T);
  if (!params || !window) goto out;
  for (int i = 0; i < cddp__gpt_n_params(m); i++) {
    const cddp_param_info_t *p = cddp__gpt_param(m, i);
    if (cddp_ckpt_tensor(c, "model", p->name, params + p->offset, p->count) != CDDP_OK) {
      fprintf(stderr, "cddp sample: %s (does %s match the checkpoint?)\n", cddp_last_error(), config);
      goto out;
    }
    size_t bad = 0; /* a run that diverged saved NaN or Inf: its text would be noise, or nothing */
    for (size_t k = 0; k < p->count; k++) bad += !isfinite(params[p->offset + k]);
    if (bad) {
      fprintf(stderr, "cddp sample: %s: tensor %s holds %zu non-finite values (NaN or Inf) of %zu: the run "
              "diverged before this checkpoint; sample an earlier one (--ckpt .../checkpoints/step-N)\n", dir, p->name,
              bad, (size_t)p->count);
      goto out;
    }
  }
  if (ops != &cddp__ops_cpu) { /* the weights to the device, once */
    if (!(dparams = ops->alloc(np * sizeof *dparams))) {
      fprintf(stderr, "cddp sample: out of %s memory for %zu parameters\n", ops->name, np);
      goto out;
    }
    ops->to_device(dparams, params, np * sizeof *params);
  }
  cddp__gpt_bind(m, dparams ? dparams : params, NULL);
  size_t plen = strlen(prompt);
  int len = (int)(plen < (size_t)T ? plen : (size_t)T);
  memcpy(window, prompt + plen - (size_t)len, (size_t)len);
  fputs(prompt, stdout);
  for (long k = 0; k < n; k++) {
    if (len == 0) window[len++] = '\n';
    cddp__gpt_forward(m, window, NULL, 1, len);
    const float *logits = cddp__gpt_logits(m) + (size_t)(len - 1) * CDDP_GPT_VOCAB;
    if (dparams) { /* the last position's, from the device */
      ops->to_host(row, logits, sizeof row);
      logits = row;
    }
    int finite = 1;
    for (int v = 0; v < CDDP_GPT_VOCAB; v++) finite &= isfinite(logits[v]) != 0;
    if (!finite) { /* finite weights can still overflow */
      fprintf(stderr, "cddp sample: the model's output is not finite (NaN or Inf) at byte %ld: %s cannot be sampled\n",
              k + 1, dir);
      goto out;
    }
    int b = pick(logits, CDDP_GPT_VOCAB, (float)temp, (int)top_k, &seed);
    putchar(b);
    if (len == T) memmove(window, window + 1, (size_t)T - 1), len--;
    window[len++] = (uint8_t)b;
  }
  putchar('\n');
  rc = 0;
out:
  cddp_ckpt_close(c);
  cddp__gpt_destroy(m);
  if (dparams) ops->release(dparams);
  free(params), free(window);
  return rc;
}
