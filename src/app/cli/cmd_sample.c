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
#include "trainer/config.h"
#include "trainer/gpt.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: cddp sample --ckpt PATH [--prompt TEXT] [-n N] [--temperature T] [--top-k K]\n"
          "                   [--seed S] [--config YAML]\n"
          "  --ckpt PATH        a checkpoint dir, a checkpoints/ dir (its newest) or a run dir\n"
          "  --prompt TEXT      the text to continue (default: a new line)\n"
          "  -n N               bytes to generate (default 200)\n"
          "  --temperature T    > 0; lower is more conservative (default 0.8)\n"
          "  --top-k K          sample among the K likeliest bytes; 0 = all (default 40)\n"
          "  --seed S           the sampler's seed (default 1): same seed, same text\n"
          "  --config YAML      the run's config (default: config.yaml of the checkpoint's run)\n");
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
  for (int v = 0; v < vocab; v++) mx = fmax(mx, logits[v]);
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
  return (int)mx; /* not reached: rounding left u > 0; take the likeliest */
}

int cddp__cmd_sample(int argc, char **argv) {
  const char *path = NULL, *prompt = "\n";
  char config[4096] = "";
  long n = 200, top_k = 40;
  double temp = 0.8;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    int missing = 0;
    const char *v;
    char *end = NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--ckpt", &missing))) {
      path = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--prompt", &missing))) {
      prompt = v;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--config", &missing))) {
      snprintf(config, sizeof config, "%s", v);
    } else if ((v = cddp__flag_value(argc, argv, &i, "-n", &missing))) {
      n = strtol(v, &end, 10);
      if (*end || n < 0 || n > 1000000) return fprintf(stderr, "cddp sample: -n %s: expected 0..1000000\n", v), 2;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--temperature", &missing))) {
      temp = strtod(v, &end);
      if (*end || !(temp > 0) || temp > 100) return fprintf(stderr, "cddp sample: --temperature %s: expected a number > 0\n", v), 2;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--top-k", &missing))) {
      top_k = strtol(v, &end, 10);
      if (*end || top_k < 0 || top_k > 256) return fprintf(stderr, "cddp sample: --top-k %s: expected 0..256\n", v), 2;
    } else if ((v = cddp__flag_value(argc, argv, &i, "--seed", &missing))) {
      seed = strtoull(v, &end, 10);
      if (*end) return fprintf(stderr, "cddp sample: --seed %s: expected a number\n", v), 2;
    } else if (missing) {
      return fprintf(stderr, "cddp sample: %s needs a value\n", argv[i]), 2;
    } else {
      return fprintf(stderr, "cddp sample: unknown option '%s' (cddp sample --help)\n", argv[i]), 2;
    }
  }
  if (!path) return fprintf(stderr, "cddp sample: --ckpt PATH is required (a checkpoint or run dir)\n"), 2;
  char dir[4020];
  if (resolve(path, dir, sizeof dir, config, sizeof config) != 0) return 1;
  cddp_train_config_t cfg;
  if (cddp__config_load(&cfg, config, NULL, 0) != CDDP_OK) {
    fprintf(stderr, "cddp sample: %s\n", cddp_last_error());
    return 1;
  }
  if (cfg.model.kind != CDDP_MODEL_GPT) {
    fprintf(stderr, "cddp sample: %s trains model.type %s, not gpt: nothing to sample\n", config,
            cfg.model.kind == CDDP_MODEL_CNN ? "cnn" : "mlp");
    return 1;
  }
  cddp_gpt_t *m = NULL;
  cddp_ckpt_t *c = NULL;
  float *params = NULL;
  uint8_t *window = NULL;
  int rc = 1, T = cfg.gpt.context;
  if (cddp__gpt_create(&cfg.gpt, 1, &m) != CDDP_OK || cddp_ckpt_load(dir, &c) != CDDP_OK) {
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
  }
  cddp__gpt_bind(m, params, NULL);
  size_t plen = strlen(prompt);
  int len = (int)(plen < (size_t)T ? plen : (size_t)T);
  memcpy(window, prompt + plen - (size_t)len, (size_t)len);
  fputs(prompt, stdout);
  for (long k = 0; k < n; k++) {
    if (len == 0) window[len++] = '\n';
    cddp__gpt_forward(m, window, NULL, 1, len);
    int b = pick(cddp__gpt_logits(m) + (size_t)(len - 1) * CDDP_GPT_VOCAB, CDDP_GPT_VOCAB, (float)temp, (int)top_k, &seed);
    putchar(b);
    if (len == T) memmove(window, window + 1, (size_t)T - 1), len--;
    window[len++] = (uint8_t)b;
  }
  putchar('\n');
  rc = 0;
out:
  cddp_ckpt_close(c);
  cddp__gpt_destroy(m);
  free(params), free(window);
  return rc;
}
