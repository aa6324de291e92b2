/* test_config.c - the training config: schema, every error class (naming key and line),
 * --set overrides, write/load round trip, hashes, shipped configs/ and docs/config.md. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cddp/ddp.h"
#include "common/check.h"
#include "test.h"
#include "trainer/config.h"
#include "trainer/config_schema.h"

/* Writes text to a fresh temp file; returns its path (static buffer). */
static const char *temp_yaml(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/cddp_cfg_XXXXXX.yaml");
  int fd = mkstemps(path, 5);
  if (fd < 0) TEST_FAIL("mkstemps failed");
  size_t n = strlen(text);
  if (write(fd, text, n) != (ssize_t)n) TEST_FAIL("write failed");
  close(fd);
  return path;
}

/* Loads text (plus overrides) and checks that it fails with every needle in the error. */
static void expect_fail_ovr(const char *text, const char *const *ovr, int n_ovr, const char *n1,
                            const char *n2, const char *n3) {
  const char *path = text ? temp_yaml(text) : NULL;
  cddp_train_config_t c;
  cddp__clear_error();
  cddp_result_t r = cddp__config_load(&c, path, ovr, n_ovr);
  if (path) unlink(path);
  if (r != CDDP_INVALID_ARG)
    TEST_FAIL("load of <<%s>> returned %s, expected INVALID_ARG", text ? text : "", cddp_result_name(r));
  const char *e = cddp_last_error();
  const char *needles[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i] && !strstr(e, needles[i]))
      TEST_FAIL("error '%s' lacks '%s' (config <<%s>>)", e, needles[i], text ? text : "");
  if (strchr(e, '\n')) TEST_FAIL("error spans lines: '%s'", e);
}
static void expect_fail(const char *text, const char *n1, const char *n2, const char *n3) {
  expect_fail_ovr(text, NULL, 0, n1, n2, n3);
}

static cddp_train_config_t load_ok(const char *text, const char *const *ovr, int n_ovr) {
  const char *path = text ? temp_yaml(text) : NULL;
  cddp_train_config_t c;
  cddp_result_t r = cddp__config_load(&c, path, ovr, n_ovr);
  if (path) unlink(path);
  if (r != CDDP_OK) TEST_FAIL("load failed: %s (config <<%s>>)", cddp_last_error(), text ? text : "");
  return c;
}

TEST(every_default_parses_and_contract_keys_exist) {
  cddp_train_config_t c;
  char err[256];
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    const cddp__cfg_key_t *k = &cddp__cfg_keys[i];
    if (cddp__cfg_parse(k, k->def, &c, err, sizeof err) != 0)
      TEST_FAIL("default of %s ('%s'): %s", k->key, k->def, err);
    CHECK(strchr(k->key, '.') != NULL);
    CHECK(k->doc && *k->doc);
    for (int j = 0; j < i; j++) CHECK(strcmp(cddp__cfg_keys[j].key, k->key) != 0);
  }
  /* keys of one section are contiguous (the writer opens each section once) */
  for (int i = 2; i < cddp__cfg_n_keys; i++) {
    const char *a = cddp__cfg_keys[i].key;
    size_t na = (size_t)(strchr(a, '.') - a);
    for (int j = 0; j + 1 < i; j++) {
      const char *b = cddp__cfg_keys[j].key, *prev = cddp__cfg_keys[i - 1].key;
      if (strncmp(a, b, na + 1) == 0 && strncmp(a, prev, na + 1) != 0)
        TEST_FAIL("section of %s is split (also before %s)", a, prev);
    }
  }
  static const char *contract[] = {
      "model.type", "model.hidden", "model.conv_channels", "model.kernel", "data.dir",
      "data.name", "data.drop_last", "train.seed", "train.epochs", "train.max_steps",
      "batch.global", "batch.micro", "batch.reference", "batch.lr_scaling", "optim.type",
      "optim.momentum", "optim.nesterov", "optim.weight_decay", "optim.beta1", "optim.beta2",
      "optim.eps", "optim.grad_clip", "optim.lr", "schedule.type", "schedule.warmup_steps",
      "schedule.min_lr", "ddp.bucket_mb", "ddp.threads", "checkpoint.every_steps",
      "checkpoint.keep", "eval.every_epoch", "log.every_steps", "debug.sample_log"};
  for (size_t i = 0; i < CDDP_ARRAY_LEN(contract); i++)
    if (cddp__cfg_find(contract[i]) < 0) TEST_FAIL("config.h names %s; the schema lacks it", contract[i]);
  CHECK(cddp__config_key_name(0) != NULL);
  CHECK(cddp__config_key_name(-1) == NULL);
  CHECK(cddp__config_key_name(cddp__cfg_n_keys) == NULL);
}

TEST(defaults_and_enum_values_match_the_c_enums) {
  cddp_train_config_t c = load_ok(NULL, NULL, 0);
  CHECK_EQ(c.model.kind, CDDP_MODEL_MLP);
  CHECK_EQ(c.model.n_hidden, 2);
  CHECK_EQ(c.model.hidden[1], 1024);
  CHECK_EQ(c.model.in_c, 1);
  CHECK_EQ(c.model.in_h, 28);
  CHECK_EQ(c.model.n_classes, 10);
  CHECK_EQ(c.ref_batch, c.global_batch); /* batch.reference 0 resolves to batch.global */
  CHECK(strcmp(c.data_dir, "/usr/share/datasets/fashion-mnist") == 0);
  CHECK_NEAR(c.optim.eps, 1e-8, 1e-15);
  const char *ovr[] = {"model.type=cnn", "optim.type=adamw", "schedule.type=linear",
                       "batch.lr_scaling=sqrt"};
  c = load_ok(NULL, ovr, 4);
  CHECK_EQ(c.model.kind, CDDP_MODEL_CNN);
  CHECK_EQ(c.optim.kind, CDDP_OPTIM_ADAMW);
  CHECK_EQ(c.sched, CDDP_SCHED_LINEAR);
  CHECK_EQ(c.lr_scaling, CDDP_LR_SCALE_SQRT);
  const char *ovr2[] = {"schedule.type=cosine", "batch.lr_scaling=linear", "schedule.type=constant"};
  c = load_ok(NULL, ovr2, 3);
  CHECK_EQ(c.sched, CDDP_SCHED_CONSTANT); /* the last --set wins */
  CHECK_EQ(c.lr_scaling, CDDP_LR_SCALE_LINEAR);
  CHECK_EQ(c.compress, CDDP_COMPRESS_NONE);
  const char *cz[] = {"ddp.compress=bf16", "ddp.compress=sign", "ddp.compress=fp16"};
  const cddp_compress_t czv[] = {CDDP_COMPRESS_BF16, CDDP_COMPRESS_SIGN, CDDP_COMPRESS_F16};
  for (int i = 0; i < 3; i++) CHECK_EQ(load_ok(NULL, cz + i, 1).compress, czv[i]);
  CHECK_EQ(load_ok("ddp:\n  compress: fp16\n", NULL, 0).compress, CDDP_COMPRESS_F16);
  expect_fail("ddp:\n  compress: half\n", ":2:", "ddp.compress", "fp16");
}

TEST(yaml_values_land_in_their_fields) {
  cddp_train_config_t c = load_ok(
      "model:\n  type: cnn\n  conv_channels: [8, 16, 32]\n  kernel: 5\n  hidden: [64]\n"
      "data: {dir: '/data/f mnist', drop_last: no}\n"
      "train:\n  seed: 18446744073709551615\n  max_steps: 5000000000\n"
      "batch:\n  global: 512\n  micro: 64\n  reference: 128\n"
      "optim:\n  lr: 1.5e-3\n  nesterov: true\n  grad_clip: 2\n"
      "schedule:\n  warmup_steps: 10\n  min_lr: 0.0001\n"
      "ddp:\n  bucket_mb: 0.5\n  threads: 2\n"
      "debug:\n  sample_log: on\n",
      NULL, 0);
  CHECK_EQ(c.model.kind, CDDP_MODEL_CNN);
  CHECK_EQ(c.model.n_conv, 3);
  CHECK_EQ(c.model.conv_channels[2], 32);
  CHECK_EQ(c.model.kernel, 5);
  CHECK_EQ(c.model.n_hidden, 1);
  CHECK_EQ(c.model.hidden[0], 64);
  CHECK_EQ(c.model.hidden[1], 0);
  CHECK(strcmp(c.data_dir, "/data/f mnist") == 0);
  CHECK_EQ(c.drop_last, 0);
  CHECK(c.seed == UINT64_MAX);
  CHECK(c.max_steps == 5000000000LL);
  CHECK_EQ(c.global_batch, 512);
  CHECK_EQ(c.micro_batch, 64);
  CHECK_EQ(c.ref_batch, 128);
  CHECK(c.lr == 1.5e-3f);
  CHECK_EQ(c.optim.nesterov, 1);
  CHECK_NEAR(c.optim.grad_clip, 2, 0);
  CHECK_EQ(c.warmup_steps, 10);
  CHECK(c.min_lr == 0.0001f);
  CHECK_NEAR(c.bucket_mb, 0.5, 0);
  CHECK_EQ(c.threads, 2);
  CHECK_EQ(c.sample_log, 1);
  /* flat dotted keys work too, and count as the same key as the nested form */
  c = load_ok("optim.lr: 0.25\nbatch: {global: 64, micro: 32}\n", NULL, 0);
  CHECK(c.lr == 0.25f);
  CHECK_EQ(c.micro_batch, 32);
  expect_fail("optim.lr: 0.25\noptim:\n  lr: 0.5\n", ":3:", "optim.lr", "duplicate key (first set at line 1)");
  /* an empty file, and one of comments only, give the defaults */
  c = load_ok("", NULL, 0);
  CHECK_EQ(c.global_batch, 256);
  c = load_ok("# nothing\n", NULL, 0);
  CHECK_EQ(c.epochs, 3);
}

TEST(unknown_keys_are_named_with_line_and_suggestion) {
  expect_fail("optim:\n  type: sgd\n  lrr: 0.1\n", ":3:", "unknown key 'optim.lrr'", "did you mean optim.lr?");
  expect_fail("model:\n  type: mlp\nlr: 0.1\n", ":3:", "'lr'", "did you mean optim.lr?");
  expect_fail("optimizer:\n  lr: 0.1\n", ":1:", "'optimizer'", "did you mean optim?");
  expect_fail("\n\nmodel:\n  hiden: [1]\n", ":4:", "model.hiden", "did you mean model.hidden?");
  /* other frameworks' names: too far for the edit distance, known by name */
  const char *torch_names[][2] = {{"optim.learning_rate=0.1", "did you mean optim.lr?"},
                                  {"learning_rate=0.1", "did you mean optim.lr?"},
                                  {"train.max_epochs=2", "did you mean train.epochs?"},
                                  {"batch.batch_size=64", "did you mean batch.global?"}};
  for (size_t i = 0; i < sizeof torch_names / sizeof torch_names[0]; i++)
    expect_fail_ovr(NULL, torch_names[i], 1, "unknown key", torch_names[i][1], NULL);
  expect_fail("zzz: 1\n", ":1:", "unknown key 'zzz'", "docs/config.md");
  expect_fail("model:\n  type:\n    deep: 1\n", ":3:", "model.type", "got a map");
}

TEST(wrong_types_ranges_and_choices_are_named_with_line) {
  expect_fail("train:\n  epochs: three\n", ":2:", "train.epochs", "expected an integer, got 'three'");
  expect_fail("train:\n  epochs: 2.5\n", ":2:", "train.epochs", "expected an integer");
  expect_fail("optim:\n  lr: fast\n", ":2:", "optim.lr", "expected a number, got 'fast'");
  expect_fail("optim:\n  lr: .nan\n", ":2:", "optim.lr", "expected a number");
  expect_fail("optim:\n  lr: inf\n", ":2:", "optim.lr", "finite");
  expect_fail("optim:\n  lr: 0\n", ":2:", "optim.lr", "must be in (0, 100], got 0");
  expect_fail("optim:\n  momentum: 1\n", ":2:", "optim.momentum", "must be in [0, 1), got 1");
  expect_fail("batch:\n  global: 0\n", ":2:", "batch.global", "must be in [1, 16777216], got 0");
  expect_fail("train:\n  seed: -1\n", ":2:", "train.seed", "non-negative integer");
  expect_fail("train:\n  epochs: 99999999999999999999\n", ":2:", "train.epochs", "expected an integer");
  expect_fail("data:\n  drop_last: maybe\n", ":2:", "data.drop_last", "expected true or false");
  expect_fail("optim:\n  type: adam\n", ":2:", "optim.type", "expected one of sgd, adamw, got 'adam'");
  expect_fail("data:\n  name: mnist\n", ":2:", "data.name", "expected one of fashion-mnist");
  expect_fail("optim:\n  lr:\n", ":2:", "optim.lr", "missing value");
  expect_fail("optim:\n  lr: [1]\n", ":2:", "optim.lr", "expected a number, got a list");
  char longdir[400];
  snprintf(longdir, sizeof longdir, "data:\n  dir: %0300d\n", 7);
  expect_fail(longdir, ":2:", "data.dir", "too long");
}

TEST(lists_entries_and_lengths_are_checked) {
  expect_fail("model:\n  hidden: [1, 2, 3, 4, 5, 6, 7, 8, 9]\n", ":2:", "model.hidden", "at most 8 entries");
  expect_fail("model:\n  hidden:\n    - 1\n    - 2\n    - 3\n    - 4\n    - 5\n    - 6\n    - 7\n"
              "    - 8\n    - 9\n",
              ":11:", "model.hidden", "at most 8 entries");
  expect_fail("model:\n  hidden:\n    - 64\n    - wide\n", ":4:", "model.hidden", "entry 1: expected an integer");
  expect_fail("model:\n  hidden: [64, 0]\n", ":2:", "model.hidden", "must be in [1, 65536], got 0");
  expect_fail("model:\n  hidden: [[1]]\n", ":2:", "model.hidden", "got a list");
  /* a value that spans lines is shown on one line (expect_fail checks) */
  expect_fail("model:\n  hidden: [1x\n    y]\n", ":2:", "model.hidden", "got '1x y'");
  cddp_train_config_t c = load_ok("model:\n  hidden: 512\n", NULL, 0); /* a scalar is one entry */
  CHECK_EQ(c.model.n_hidden, 1);
  CHECK_EQ(c.model.hidden[0], 512);
  c = load_ok("model:\n  hidden: []\n", NULL, 0); /* logistic regression */
  CHECK_EQ(c.model.n_hidden, 0);
}

TEST(structure_errors_duplicates_syntax_and_files) {
  expect_fail("optim:\n  lr: 0.1\n  lr: 0.2\n", ":3:", "optim.lr", "duplicate key (first set at line 2)");
  expect_fail("optim:\n  lr: 0.1\nbatch:\n  global: 8\noptim:\n  momentum: 0.5\n", ":5:", "optim",
              "duplicate key (first at line 1)");
  expect_fail("optim: 3\n", ":1:", "optim", "expected a map of optim.* keys, got a scalar");
  expect_fail("optim:\n  - lr\n", ":2:", "optim", "got a list");
  expect_fail("- a\n- b\n", ":1:", "expected a map of keys at the top level", "got a list");
  expect_fail("just a string\n", ":1:", "top level", NULL);
  expect_fail("data:\n  dir: \"open\n", "YAML syntax error", ".yaml:3:", "quoted scalar");
  expect_fail("optim:\n\tlr: 0.1\n", "YAML syntax error", ".yaml:2:", "cannot start any token");
  expect_fail("optim: {lr: 0.1\n", "YAML syntax error", ".yaml:2:", NULL);
  expect_fail("optim:\n  lr: &a 0.1\n  eps: *a\n", ":3:", "optim.eps", "alias");
  expect_fail("a: 1\n---\nb: 2\n", "unknown key 'a'", NULL, NULL);
  expect_fail("---\n{}\n---\n{}\n", ":3:", "one YAML document", NULL);
  cddp_train_config_t c;
  CHECK_RESULT(cddp__config_load(&c, "/nonexistent/cfg.yaml", NULL, 0), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "/nonexistent/cfg.yaml: No such file or directory") != NULL);
  CHECK_RESULT(cddp__config_load(&c, "/tmp", NULL, 0), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "/tmp: Is a directory") != NULL);
  char fifo[4200]; /* a FIFO nobody writes to: one line at once, not a start that hangs */
  cddp_test_path(fifo, sizeof fifo, "fifo.yaml");
  CHECK(mkfifo(fifo, 0600) == 0);
  cddp_result_t fr = cddp__config_load(&c, fifo, NULL, 0);
  unlink(fifo);
  CHECK_EQ(fr, CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "not a regular file") != NULL);
}

TEST(cross_field_checks_name_where_the_key_was_set) {
  expect_fail("batch:\n  global: 256\n  micro: 512\n", ".yaml:3: batch.micro", "larger than batch.global (256)", NULL);
  expect_fail("batch:\n  global: 256\n  micro: 96\n", ".yaml:3: batch.micro", "does not divide batch.global", NULL);
  expect_fail("train:\n  max_steps: 10\nschedule:\n  warmup_steps: 10\n", ":4: schedule.warmup_steps",
              "less than train.max_steps (10)", NULL);
  /* a short run of a config with a long warm-up: the line gives the second --set to add */
  const char *short_run[] = {"train.max_steps=60"};
  expect_fail_ovr("schedule:\n  warmup_steps: 100\n", short_run, 1, "schedule.warmup_steps",
                  "less than train.max_steps (60)", "--set schedule.warmup_steps=6");
  expect_fail("optim:\n  momentum: 0\n  nesterov: true\n", ":3: optim.nesterov", "momentum > 0", NULL);
  expect_fail("model:\n  kernel: 4\n", ":2: model.kernel", "odd", NULL);
  expect_fail("optim:\n  lr: 0.01\nschedule:\n  min_lr: 0.1\n", ":4: schedule.min_lr", "larger than optim.lr", NULL);
  expect_fail("model:\n  type: cnn\n  conv_channels: []\n", ":3: model.conv_channels", "at least one", NULL);
  expect_fail("model:\n  type: cnn\n  conv_channels: [1, 1, 1, 1, 1]\n", "model.conv_channels", "halve", NULL);
  /* a default that turns bad: named as the default */
  expect_fail("batch:\n  global: 64\n", "batch.micro (default)", "larger than batch.global (64)", NULL);
  /* warmup without max_steps is the trainer's business (it knows the epoch length) */
  load_ok("schedule:\n  warmup_steps: 100000\n", NULL, 0);
}

TEST(overrides_apply_after_the_file_and_are_validated) {
  const char *file = "optim:\n  lr: 0.1\nmodel:\n  hidden: [8]\n";
  const char *ovr[] = {"optim.lr=0.25", " model.hidden = [512,256] ", "data.dir=/x=y",
                       "train.epochs=7"};
  cddp_train_config_t c = load_ok(file, ovr, 4);
  CHECK(c.lr == 0.25f);
  CHECK_EQ(c.model.n_hidden, 2);
  CHECK_EQ(c.model.hidden[0], 512);
  CHECK_EQ(c.model.hidden[1], 256);
  CHECK(strcmp(c.data_dir, "/x=y") == 0);
  CHECK_EQ(c.epochs, 7);
  const char *ovr2[] = {"model.hidden=300,200,100"};
  c = load_ok(file, ovr2, 1);
  CHECK_EQ(c.model.n_hidden, 3);
  CHECK_EQ(c.model.hidden[2], 100);

  const char *bad1[] = {"optim.lr=abc"};
  expect_fail_ovr(file, bad1, 1, "--set optim.lr=abc: expected a number, got 'abc'", NULL, NULL);
  const char *bad2[] = {"optim.lrr=0.1"};
  expect_fail_ovr(file, bad2, 1, "--set optim.lrr=0.1", "unknown key 'optim.lrr'", "did you mean optim.lr?");
  const char *bad3[] = {"optim.lr"};
  expect_fail_ovr(file, bad3, 1, "--set optim.lr: expected key=value", NULL, NULL);
  const char *bad4[] = {"optim=3"};
  expect_fail_ovr(file, bad4, 1, "--set optim=3", "is a map", NULL);
  const char *bad5[] = {"model.hidden=[1,2,3,4,5,6,7,8,9]"};
  expect_fail_ovr(NULL, bad5, 1, "--set model.hidden=", "at most 8 entries", NULL);
  const char *bad6[] = {"model.hidden=[1,,2]"};
  expect_fail_ovr(NULL, bad6, 1, "--set model.hidden=", "expected an integer, got ''", NULL);
  const char *bad7[] = {"batch.micro=96"};
  expect_fail_ovr(file, bad7, 1, "--set batch.micro=96", "does not divide batch.global (256)", NULL);
  const char *bad8[] = {"optim.type=adam"};
  expect_fail_ovr(NULL, bad8, 1, "--set optim.type=adam", "expected one of sgd, adamw", NULL);
  const char *bad10[] = {"data.dir=/x\x89y"}; /* not UTF-8: no YAML could hold it */
  expect_fail_ovr(NULL, bad10, 1, "--set data.dir=", "not valid UTF-8 (byte 0x89 at offset 2)", NULL);
  const char *bad11[] = {"data.dir=/x\xed\xa0\x80"}; /* a UTF-16 surrogate */
  expect_fail_ovr(NULL, bad11, 1, "--set data.dir=", "not valid UTF-8 (byte 0xed at offset 2)", NULL);
  const char *bad9[] = {"batch.global=0"};
  expect_fail_ovr(NULL, bad9, 1, "--set batch.global=0", "must be in [1, 16777216]", NULL);
}

static char *config_text(const cddp_train_config_t *c) {
  static char buf[1 << 14];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  CHECK(f != NULL);
  CHECK_OK(cddp__config_write(c, f));
  fclose(f);
  return buf;
}

/* quotes, a backslash, YAML's specials, controls, DEL, U+0089 (a C1 control: YAML wants it
 * escaped), two- and four-byte UTF-8 written as they are */
#define ODD_DIR "/odd \"dir\"\\with: colon #hash\ttab\nline\x7f" "\xc2\x89" "caf\xc3\xa9" "\xf0\x9f\x98\x80"

TEST(write_then_load_round_trips_every_key) {
  const char *ovr[] = {"model.type=cnn", "model.hidden=[100]", "model.conv_channels=[3,5,7]",
                       "data.dir=" ODD_DIR, "train.seed=18446744073709551615",
                       "optim.lr=0.1", "optim.eps=3.14159274e-05", "optim.type=adamw",
                       "ddp.bucket_mb=0.1", "schedule.type=linear", "train.max_steps=123456789012",
                       "batch.reference=1000", "debug.sample_log=true", "data.drop_last=false"};
  cddp_train_config_t a = load_ok(NULL, ovr, (int)CDDP_ARRAY_LEN(ovr));
  char text[1 << 14];
  snprintf(text, sizeof text, "%s", config_text(&a));
  /* nested maps: sections at column 0, keys indented under them */
  CHECK(strstr(text, "\nmodel:\n  type: cnn\n") != NULL);
  CHECK(strstr(text, "  conv_channels: [3, 5, 7]\n") != NULL);
  CHECK(strstr(text, "  lr: 0.1\n") != NULL); /* the shortest text that reads back the same float */
  CHECK(strstr(text, "  eps: 3.1415926e-05\n") != NULL);
  cddp_train_config_t b = load_ok(text, NULL, 0);
  CHECK(strcmp(config_text(&b), text) == 0);
  CHECK(cddp__config_hash(&a) == cddp__config_hash(&b));
  CHECK(strcmp(b.data_dir, ODD_DIR) == 0);
  CHECK(b.lr == a.lr);
  CHECK(b.optim.eps == a.optim.eps);
  CHECK(b.bucket_mb == a.bucket_mb);
  CHECK(b.seed == a.seed);
  CHECK_EQ(b.model.n_conv, 3);
  CHECK(memcmp(&a.model, &b.model, sizeof a.model) == 0);
  CHECK(memcmp(&a.optim, &b.optim, sizeof a.optim) == 0);
  /* every key is written */
  for (int i = 0; i < cddp__cfg_n_keys; i++) {
    const char *leaf = strrchr(cddp__cfg_keys[i].key, '.') + 1;
    char needle[80];
    snprintf(needle, sizeof needle, "\n  %s: ", leaf);
    if (!strstr(text, needle)) TEST_FAIL("written config lacks %s", cddp__cfg_keys[i].key);
  }
}

TEST(hash_changes_with_one_key_and_key_hashes_name_it) {
  cddp_train_config_t base = load_ok(NULL, NULL, 0);
  uint64_t hb[64], hx[64];
  int n = cddp__config_key_hashes(&base, hb, 64);
  CHECK_EQ(n, cddp__cfg_n_keys);
  CHECK(n <= 64);
  CHECK_EQ(cddp__config_key_hashes(&base, hx, 3), n); /* fills at most cap */
  static const char *one[] = {"optim.momentum=0.8", "model.hidden=[1024,512]", "data.dir=/tmp/x",
                              "train.seed=43", "debug.sample_log=true", "ddp.bucket_mb=4.0000001",
                              "checkpoint.keep=4", "schedule.type=constant"};
  for (size_t t = 0; t < CDDP_ARRAY_LEN(one); t++) {
    cddp_train_config_t x = load_ok(NULL, &one[t], 1);
    CHECK(cddp__config_hash(&x) != cddp__config_hash(&base));
    CHECK_EQ(cddp__config_key_hashes(&x, hx, 64), n);
    int first = -1, count = 0;
    for (int i = 0; i < n; i++)
      if (hx[i] != hb[i]) count++, first = first < 0 ? i : first;
    CHECK_EQ(count, 1);
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)(strchr(one[t], '=') - one[t]), one[t]);
    if (strcmp(cddp__config_key_name(first), key) != 0)
      TEST_FAIL("--set %s: first differing key is %s", one[t], cddp__config_key_name(first));
  }
  /* the same config gives the same hash; hash = FNV-1a 64 of the written text */
  cddp_train_config_t again = load_ok(NULL, NULL, 0);
  CHECK(cddp__config_hash(&again) == cddp__config_hash(&base));
  const char *text = config_text(&base);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *p = text; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
  CHECK(h == cddp__config_hash(&base));
}

TEST(every_shipped_config_loads) {
  DIR *d = opendir("configs");
  if (!d) TEST_FAIL("configs/ not found (run from the repository root)");
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0) continue;
    char path[300];
    snprintf(path, sizeof path, "configs/%s", e->d_name);
    cddp_train_config_t c;
    if (cddp__config_load(&c, path, NULL, 0) != CDDP_OK) TEST_FAIL("%s", cddp_last_error());
    n++;
  }
  closedir(d);
  CHECK(n >= 3);
  cddp_train_config_t c;
  CHECK_OK(cddp__config_load(&c, "configs/fmnist_mlp.yaml", NULL, 0));
  CHECK_EQ(c.model.kind, CDDP_MODEL_MLP);
  CHECK_EQ(c.model.n_hidden, 2);
  CHECK_EQ(c.model.hidden[0], 1024);
  CHECK_EQ(c.model.hidden[1], 1024);
  CHECK_EQ(c.global_batch, 256);
  CHECK_EQ(c.micro_batch, 128);
  CHECK_EQ(c.optim.kind, CDDP_OPTIM_SGD);
  CHECK(c.optim.momentum == 0.9f);
  CHECK(c.lr == 0.05f);
  CHECK_EQ(c.epochs, 3);
  CHECK_EQ(c.ckpt_every, 200);
  CHECK_EQ(c.ckpt_keep, 3);
  CHECK_OK(cddp__config_load(&c, "configs/fmnist_cnn.yaml", NULL, 0));
  CHECK_EQ(c.model.kind, CDDP_MODEL_CNN);
  CHECK_EQ(c.model.n_conv, 2);
  CHECK_EQ(c.model.conv_channels[1], 32);
  CHECK_EQ(c.model.kernel, 3);
  CHECK_EQ(c.model.n_hidden, 1);
  CHECK_EQ(c.model.hidden[0], 128);
  CHECK_OK(cddp__config_load(&c, "configs/fmnist_mlp_adamw.yaml", NULL, 0));
  CHECK_EQ(c.optim.kind, CDDP_OPTIM_ADAMW);
}

/* docs/config.md holds the schema table row for row (regenerate: build/config_schema.md). */
static void write_table(void) {
  FILE *o = fopen("build/config_schema.md", "w");
  if (o) cddp__config_print_schema(o), fclose(o);
}

TEST(docs_list_every_key_as_the_schema_says) {
  FILE *f = fopen("docs/config.md", "r");
  if (!f) {
    write_table();
    TEST_FAIL("docs/config.md not found (run from the repository root)");
  }
  static char doc[1 << 16], table[1 << 15];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  doc[n] = '\0';
  fclose(f);
  FILE *t = fmemopen(table, sizeof table, "w");
  cddp__config_print_schema(t);
  fclose(t);
  for (char *line = table, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = '\0';
    if (!strstr(doc, line)) {
      *nl = '\n';
      write_table();
      TEST_FAIL("docs/config.md lacks the row '%.*s' (the whole table: build/config_schema.md)",
                (int)(strchr(line, '\n') - line), line);
    }
    *nl = '\n';
  }
}
