/* config.c - loads the training config (libyaml events), applies --set overrides, checks
 * cross-field rules, writes the resolved YAML and hashes it; the keys live in config_schema.c. */
#include "trainer/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "common/check.h"
#include "trainer/config_schema.h"

#define MAX_KEYS 64
#define MAX_FILE (1 << 20)

/* Where each key got its value, for errors that name it (cross-field checks). */
typedef struct loader {
  yaml_parser_t p;
  const char *path;
  cddp_train_config_t *c;
  int line_of[MAX_KEYS];  /* file line that set the key, 0 = not in the file */
  int ovr_of[MAX_KEYS];   /* index of the --set that set it last, -1 = none */
  const char *const *ovr;
  char sections[MAX_KEYS][128];
  int section_line[MAX_KEYS];
  int n_sections;
} loader_t;

/* Errors stay one line whatever the input held (a multi-line scalar, a tab). */
static void one_line(char *msg) {
  for (unsigned char *q = (unsigned char *)msg; *q; q++)
    if (*q < 0x20 || *q == 0x7f) *q = '?';
}

/* cddp__fail with the message made one line. */
static cddp_result_t fail_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cddp_result_t fail_line(const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  one_line(msg);
  return cddp__fail(CDDP_INVALID_ARG, "%s", msg);
}

void cddp__config_defaults(cddp_train_config_t *c) {
  memset(c, 0, sizeof *c);
  char err[256];
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    int rc = cddp__cfg_parse(&cddp__cfg_keys[i], cddp__cfg_keys[i].def, c, err, sizeof err);
    (void)rc; /* the test checks every default parses */
  }
  c->model.in_c = 1, c->model.in_h = 28, c->model.in_w = 28, c->model.n_classes = 10;
}

static cddp_result_t fail_at(loader_t *ld, size_t line0, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cddp_result_t fail_at(loader_t *ld, size_t line0, const char *key, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (key && *key) return fail_line("%s:%zu: %s: %s", ld->path, line0 + 1, key, msg);
  return fail_line("%s:%zu: %s", ld->path, line0 + 1, msg);
}

static cddp_result_t next_event(loader_t *ld, yaml_event_t *ev) {
  if (yaml_parser_parse(&ld->p, ev)) return CDDP_OK;
  const yaml_parser_t *p = &ld->p;
  size_t line = p->problem_mark.line;
  if (p->context)
    return fail_at(ld, line, NULL, "YAML syntax error: %s %s (line %zu)",
                   p->problem ? p->problem : "?", p->context, p->context_mark.line + 1);
  return fail_at(ld, line, NULL, "YAML syntax error: %s", p->problem ? p->problem : "?");
}

static const char *kind_word(yaml_event_type_t t) {
  return t == YAML_MAPPING_START_EVENT ? "a map" : t == YAML_SEQUENCE_START_EVENT ? "a list"
         : t == YAML_ALIAS_EVENT ? "an alias" : "a scalar";
}

static int is_null_scalar(const yaml_event_t *ev) {
  if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *v = (const char *)ev->data.scalar.value;
  return !*v || strcmp(v, "~") == 0 || strcmp(v, "null") == 0;
}

/* The value of leaf key i (named path in errors): a scalar, or a list for a list key. */
static cddp_result_t parse_leaf(loader_t *ld, int i, const char *path) {
  const cddp__cfg_key_t *k = &cddp__cfg_keys[i];
  yaml_event_t ev;
  char err[512];
  cddp_result_t r = next_event(ld, &ev);
  if (r != CDDP_OK) return r;
  size_t line = ev.start_mark.line;
  ld->line_of[i] = (int)line + 1;
  if (ev.type == YAML_SCALAR_EVENT) {
    const char *v = (const char *)ev.data.scalar.value;
    if (is_null_scalar(&ev)) r = fail_at(ld, line, path, "missing value (expected %s)", cddp__cfg_type_name(k));
    else if (cddp__cfg_parse(k, v, ld->c, err, sizeof err) != 0) r = fail_at(ld, line, path, "%s", err);
    yaml_event_delete(&ev);
    return r;
  }
  if (ev.type != YAML_SEQUENCE_START_EVENT || k->type != CDDP__CFG_INT_LIST) {
    r = fail_at(ld, line, path, "expected %s, got %s", cddp__cfg_type_name(k), kind_word(ev.type));
    yaml_event_delete(&ev);
    return r;
  }
  yaml_event_delete(&ev);
  int v[CDDP_MODEL_MAX_LAYERS], n = 0;
  for (;;) {
    if ((r = next_event(ld, &ev)) != CDDP_OK) return r;
    line = ev.start_mark.line;
    if (ev.type == YAML_SEQUENCE_END_EVENT) break;
    if (ev.type != YAML_SCALAR_EVENT)
      r = fail_at(ld, line, path, "list entries must be integers, got %s", kind_word(ev.type));
    else if (n == CDDP_MODEL_MAX_LAYERS)
      r = fail_at(ld, line, path, "at most %d entries", CDDP_MODEL_MAX_LAYERS);
    else if (cddp__cfg_parse_list_entry(k, (const char *)ev.data.scalar.value, &v[n], err, sizeof err))
      r = fail_at(ld, line, path, "entry %d: %s", n, err);
    yaml_event_delete(&ev);
    if (r != CDDP_OK) return r;
    n++;
  }
  yaml_event_delete(&ev);
  cddp__cfg_set_list(k, ld->c, v, n);
  return CDDP_OK;
}

/* The entries of a map whose MAPPING_START was just read; keys are prefix + "." + name. */
static cddp_result_t parse_map(loader_t *ld, const char *prefix, int depth) {
  for (;;) {
    yaml_event_t ev;
    cddp_result_t r = next_event(ld, &ev);
    if (r != CDDP_OK) return r;
    if (ev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&ev);
      return CDDP_OK;
    }
    size_t line = ev.start_mark.line;
    if (ev.type != YAML_SCALAR_EVENT) {
      r = fail_at(ld, line, prefix, "keys must be plain names, got %s", kind_word(ev.type));
      yaml_event_delete(&ev);
      return r;
    }
    char path[128];
    int len = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "",
                       (const char *)ev.data.scalar.value);
    yaml_event_delete(&ev);
    if (len >= (int)sizeof path) return fail_at(ld, line, NULL, "key too long: '%s'", path);
    int i = cddp__cfg_find(path);
    if (i >= 0) {
      if (ld->line_of[i])
        return fail_at(ld, line, path, "duplicate key (first set at line %d)", ld->line_of[i]);
      CDDP_CHECK(parse_leaf(ld, i, path));
      continue;
    }
    if (!cddp__cfg_is_section(path) || depth >= 4) {
      const char *near = cddp__cfg_suggest(path);
      if (near) return fail_at(ld, line, NULL, "unknown key '%s' (did you mean %s?)", path, near);
      return fail_at(ld, line, NULL, "unknown key '%s' (docs/config.md lists the keys)", path);
    }
    for (int s = 0; s < ld->n_sections; s++)
      if (strcmp(ld->sections[s], path) == 0)
        return fail_at(ld, line, path, "duplicate key (first at line %d)", ld->section_line[s]);
    if (ld->n_sections < MAX_KEYS) {
      snprintf(ld->sections[ld->n_sections], sizeof ld->sections[0], "%s", path);
      ld->section_line[ld->n_sections++] = (int)line + 1;
    }
    if ((r = next_event(ld, &ev)) != CDDP_OK) return r;
    yaml_event_type_t t = ev.type;
    line = ev.start_mark.line;
    yaml_event_delete(&ev);
    if (t != YAML_MAPPING_START_EVENT)
      return fail_at(ld, line, path, "expected a map of %s.* keys, got %s", path, kind_word(t));
    CDDP_CHECK(parse_map(ld, path, depth + 1));
  }
}

static cddp_result_t parse_stream(loader_t *ld) {
  yaml_event_t ev;
  cddp_result_t r;
  int docs = 0;
  for (;;) {
    if ((r = next_event(ld, &ev)) != CDDP_OK) return r;
    yaml_event_type_t t = ev.type;
    size_t line = ev.start_mark.line;
    int null_root = t == YAML_SCALAR_EVENT && is_null_scalar(&ev);
    yaml_event_delete(&ev);
    switch (t) {
    case YAML_STREAM_END_EVENT: return CDDP_OK;
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT: break;
    case YAML_DOCUMENT_START_EVENT:
      if (docs++) return fail_at(ld, line, NULL, "expected one YAML document, found a second");
      break;
    case YAML_MAPPING_START_EVENT: CDDP_CHECK(parse_map(ld, "", 0)); break;
    default:
      if (null_root) break; /* an empty document: defaults */
      return fail_at(ld, line, NULL, "expected a map of keys at the top level, got %s", kind_word(t));
    }
  }
}

static cddp_result_t load_file(loader_t *ld, const char *path) {
  /* O_NONBLOCK and a regular file only: a FIFO or a device would block the start for ever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return cddp__fail(CDDP_INVALID_ARG, "config %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return cddp__fail(CDDP_INVALID_ARG, "config %s: %s", path,
                      S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file (a FIFO or a device)");
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return cddp__fail(CDDP_SYSTEM, "config %s: %s", path, strerror(errno));
  }
  char *buf = malloc(MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    return cddp__fail(CDDP_SYSTEM, "config %s: out of memory", path);
  }
  size_t n = fread(buf, 1, MAX_FILE + 1, f);
  int rerr = ferror(f) ? errno : 0;
  fclose(f);
  cddp_result_t r = CDDP_OK;
  if (rerr) r = cddp__fail(CDDP_INVALID_ARG, "config %s: %s", path, strerror(rerr));
  else if (n > MAX_FILE) r = cddp__fail(CDDP_INVALID_ARG, "config %s: larger than %d bytes", path, MAX_FILE);
  if (r == CDDP_OK) {
    if (!yaml_parser_initialize(&ld->p)) {
      free(buf);
      return cddp__fail(CDDP_SYSTEM, "config %s: yaml_parser_initialize failed", path);
    }
    yaml_parser_set_input_string(&ld->p, (const unsigned char *)buf, n);
    r = parse_stream(ld);
    yaml_parser_delete(&ld->p);
  }
  free(buf);
  return r;
}

static cddp_result_t apply_override(loader_t *ld, int j) {
  const char *o = ld->ovr[j];
  const char *eq = o ? strchr(o, '=') : NULL;
  if (!eq) return fail_line("--set %s: expected key=value", o ? o : "(null)");
  char key[128];
  const char *a = o, *b = eq;
  while (a < b && (*a == ' ' || *a == '\t')) a++;
  while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
  snprintf(key, sizeof key, "%.*s", (int)(b - a), a);
  const char *val = eq + 1;
  while (*val == ' ' || *val == '\t') val++;
  int i = cddp__cfg_find(key);
  if (i < 0) {
    if (cddp__cfg_is_section(key))
      return fail_line("--set %s: '%s' is a map; set one of its keys (%s.*)", o, key, key);
    const char *near = cddp__cfg_suggest(key);
    return fail_line("--set %s: unknown key '%s'%s%s%s", o, key,
                      near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
  }
  char err[512];
  if (cddp__cfg_parse(&cddp__cfg_keys[i], val, ld->c, err, sizeof err) != 0)
    return fail_line("--set %s: %s", o, err);
  ld->ovr_of[i] = j;
  return CDDP_OK;
}

/* "configs/x.yaml:9: batch.micro", "--set batch.micro=96" or "batch.micro (default)". */
static const char *where(const loader_t *ld, const char *key, char *buf, size_t cap) {
  int i = cddp__cfg_find(key);
  if (i >= 0 && ld->ovr_of[i] >= 0) snprintf(buf, cap, "--set %s", ld->ovr[ld->ovr_of[i]]);
  else if (i >= 0 && ld->line_of[i]) snprintf(buf, cap, "%s:%d: %s", ld->path, ld->line_of[i], key);
  else snprintf(buf, cap, "%s (default)", key);
  return buf;
}

#define CROSS_FAIL(key, ...)                                                          \
  do {                                                                               \
    char w_[320], m_[320];                                                           \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                            \
    return fail_line("%s: %s", where(ld, key, w_, sizeof w_), m_);                   \
  } while (0)

/* Rules between keys that need no world size (the trainer checks the split over ranks). */
static cddp_result_t resolve_and_check(loader_t *ld) {
  cddp_train_config_t *c = ld->c;
  if (c->micro_batch > c->global_batch)
    CROSS_FAIL("batch.micro", "%d is larger than batch.global (%d)", c->micro_batch, c->global_batch);
  if (c->global_batch % c->micro_batch)
    CROSS_FAIL("batch.micro", "%d does not divide batch.global (%d)", c->micro_batch, c->global_batch);
  if (c->ref_batch == 0) c->ref_batch = c->global_batch;
  if (c->max_steps > 0 && c->warmup_steps >= c->max_steps)
    CROSS_FAIL("schedule.warmup_steps", "%lld must be less than train.max_steps (%lld); for a short run "
               "lower it too, e.g. --set schedule.warmup_steps=%lld", (long long)c->warmup_steps,
               (long long)c->max_steps, (long long)(c->max_steps / 10));
  if (c->min_lr > c->lr)
    CROSS_FAIL("schedule.min_lr", "%.9g is larger than optim.lr (%.9g)", (double)c->min_lr, (double)c->lr);
  if (c->optim.nesterov && (c->optim.kind != CDDP_OPTIM_SGD || c->optim.momentum <= 0.0f))
    CROSS_FAIL("optim.nesterov", "needs optim.type sgd and optim.momentum > 0");
  /* compressed gradients reach every rank whole (error feedback, low rank): no shard to scatter */
  if (c->shard_optimizer == CDDP_SHARD_ON && c->compress != 0)
    CROSS_FAIL("ddp.shard_optimizer", "cannot be combined with ddp.compress %s (the compressed all-reduce has no "
               "reduce-scatter form): use ddp.compress none, or ddp.shard_optimizer false",
               (const char *[]){"none", "bf16", "sign", "fp16", "powersgd"}[c->compress]);
  if (c->model.kernel % 2 == 0)
    CROSS_FAIL("model.kernel", "must be odd, got %d", c->model.kernel);
  if (strcmp(c->dataset, "fashion-mnist") == 0)
    c->model.in_c = 1, c->model.in_h = 28, c->model.in_w = 28, c->model.n_classes = 10;
  int text = strcmp(c->dataset, "kjv") == 0;
  if (text != (c->model.kind == CDDP_MODEL_GPT))
    CROSS_FAIL("model.type", "%s needs data.name %s, not %s", c->model.kind == CDDP_MODEL_GPT ? "gpt" : "an image model",
               c->model.kind == CDDP_MODEL_GPT ? "kjv" : "fashion-mnist", c->dataset);
  c->gpt.vocab = 256; /* bytes */
  if (c->model.kind == CDDP_MODEL_GPT && c->gpt.d_model % c->gpt.n_head)
    CROSS_FAIL("model.n_head", "%d does not divide model.d_model (%d)", c->gpt.n_head, c->gpt.d_model);
  if (c->model.kind == CDDP_MODEL_CNN) {
    if (c->model.n_conv == 0) CROSS_FAIL("model.conv_channels", "a cnn needs at least one conv block");
    if ((c->model.in_h >> c->model.n_conv) < 1 || (c->model.in_w >> c->model.n_conv) < 1)
      CROSS_FAIL("model.conv_channels", "%d conv blocks halve a %dx%d input to nothing",
                 c->model.n_conv, c->model.in_h, c->model.in_w);
  }
  return CDDP_OK;
}

cddp_result_t cddp__config_load(cddp_train_config_t *c, const char *path,
                               const char *const *overrides, int n_overrides) {
  static __thread loader_t ld; /* ~5 KiB: off the stack */
  cddp_train_config_t tmp;
  memset(&ld, 0, sizeof ld);
  CDDP_CHECK(cddp__cfg_n_keys <= MAX_KEYS ? CDDP_OK
                                         : cddp__fail(CDDP_INTERNAL, "config: too many keys"));
  cddp__config_defaults(&tmp);
  ld.c = &tmp;
  ld.path = path ? path : "(no config file)";
  ld.ovr = overrides;
  for (int i = 0; i < MAX_KEYS; i++) ld.ovr_of[i] = -1;
  if (path) CDDP_CHECK(load_file(&ld, path));
  for (int j = 0; j < n_overrides; j++) CDDP_CHECK(apply_override(&ld, j));
  CDDP_CHECK(resolve_and_check(&ld));
  *c = tmp;
  return CDDP_OK;
}

/* The resolved YAML: sections opened as the dotted keys enter them, schema order. */
static char *format_config(const cddp_train_config_t *c, size_t *len_out) {
  size_t cap = 8192, len = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  len += (size_t)snprintf(buf, cap, "# cddp train: resolved config (every key; docs/config.md)\n");
  const char *prev = "";
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    const cddp__cfg_key_t *k = &cddp__cfg_keys[i];
    char val[600], line[800];
    cddp__cfg_format(k, c, val, sizeof val);
    /* common leading segments with the previous key */
    size_t common = 0, depth = 0;
    for (size_t j = 0; k->key[j] && k->key[j] == prev[j]; j++)
      if (k->key[j] == '.') common = j + 1, depth++;
    size_t o = 0;
    const char *seg = k->key + common;
    for (const char *dot; (dot = strchr(seg, '.')); seg = dot + 1, depth++)
      o += (size_t)snprintf(line + o, sizeof line - o, "%*s%.*s:\n", (int)(2 * depth), "",
                            (int)(dot - seg), seg);
    o += (size_t)snprintf(line + o, sizeof line - o, "%*s%s: %s\n", (int)(2 * depth), "", seg, val);
    if (len + o + 1 > cap) {
      cap = 2 * (len + o + 1);
      char *nb = realloc(buf, cap);
      if (!nb) return free(buf), NULL;
      buf = nb;
    }
    memcpy(buf + len, line, o + 1);
    len += o;
    prev = k->key;
  }
  *len_out = len;
  return buf;
}

cddp_result_t cddp__config_write(const cddp_train_config_t *c, FILE *f) {
  size_t len;
  char *text = format_config(c, &len);
  if (!text) return cddp__fail(CDDP_SYSTEM, "config write: out of memory");
  size_t w = fwrite(text, 1, len, f);
  free(text);
  if (w != len || fflush(f) != 0) return cddp__fail_errno(CDDP_SYSTEM, "config write");
  return CDDP_OK;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
  return h;
}
#define FNV_BASIS 0xcbf29ce484222325ULL

uint64_t cddp__config_hash(const cddp_train_config_t *c) {
  size_t len;
  char *text = format_config(c, &len);
  if (!text) return 0;
  uint64_t h = fnv1a(FNV_BASIS, text, len);
  free(text);
  return h;
}

int cddp__config_key_hashes(const cddp_train_config_t *c, uint64_t *out, int cap) {
  for (int i = 0; i < cddp__cfg_n_keys && i < cap; i++) {
    char val[600];
    int n = cddp__cfg_format(&cddp__cfg_keys[i], c, val, sizeof val);
    const char *key = cddp__cfg_keys[i].key;
    out[i] = fnv1a(fnv1a(fnv1a(FNV_BASIS, key, strlen(key)), "=", 1), val, (size_t)n);
  }
  return cddp__cfg_n_keys;
}

const char *cddp__config_key_name(int i) {
  return i >= 0 && i < cddp__cfg_n_keys ? cddp__cfg_keys[i].key : NULL;
}
