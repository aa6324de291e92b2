/* test_torch_fr.c - the reader of torch's flight-recorder dumps: a dump in torch's documented
 * layout read field by field, and hostile pickles (code-running opcodes, truncation, a list
 * that holds itself, memo misuse, huge lengths) each refused with one line, never a crash. */
#include <string.h>

#include "cli/torch_fr.h"
#include "test.h"

#define LEN(s) (sizeof(s) - 1)

static int parse(const char *b, size_t n, cddp__fr_dump_t *d, char *err) {
  return cddp__torch_fr_parse((const unsigned char *)b, n, d, err, 200);
}

/* {"entries": [{...all_reduce...}, {...broadcast, memoised keys...}], "version": "2.10"} */
static const char dump[] =
    "\x80\x02}q\x00(\x8c\x07" "entries]q\x01"
    "}(\x8c\x11" "collective_seq_idK\x05\x8c\x0e" "profiling_nameq\x02\x8c\x0f" "gloo:all_reduce"
    "\x8c\x05stateq\x03\x8c\x09" "scheduled\x8c\x07retired\x88"
    "\x8c\x0binput_sizes]](K\x02K\x03" "ea\x8c\x0cinput_dtypes]\x8c\x05" "Floata"
    "\x8c\x0dprocess_group\x8c\x01" "0\x8c\x0a" "default_pg\x86"
    "\x8c\x0ftime_created_ns\x8a\x08\xe7\x56\xa8\x91\xc5\x21\xec\x18"
    "\x8c\x06" "frames](}(\x8c\x08" "filenameq\x04\x8c\x10/v/torch/dist.py\x8c\x04lineq\x05MN\x10\x8c\x04nameq\x06\x8c\x0a" "all_reduceu"
    "}(h\x04\x8c\x10/home/u/train.pyh\x05K\x0ch\x06\x8c\x0atrain_stepueu"
    "a}(\x8c\x11" "collective_seq_idJ\x06\x00\x00\x00h\x02\x8c\x0egloo:broadcasth\x03\x8c\x07startedu"
    "a\x8c\x07version\x8c\x04" "2.10u.";

TEST(torch_fr_documented_layout) {
  cddp__fr_dump_t d;
  char err[200] = "";
  if (parse(dump, LEN(dump), &d, err) != 0) TEST_FAIL("refused: %s", err);
  CHECK_EQ(d.total, 2);
  CHECK_EQ(d.n, 2);
  CHECK(!strcmp(d.version, "2.10"));
  CHECK_EQ(d.e[0].seq, 5);
  CHECK(!strcmp(d.e[0].op, "all_reduce") && !strcmp(d.e[0].backend, "gloo"));
  CHECK(!strcmp(d.e[0].dtype, "Float") && !strcmp(d.e[0].group, "default_pg"));
  CHECK_EQ(d.e[0].count, 6);
  CHECK_EQ(d.e[0].retired, 1);
  CHECK_EQ(d.e[0].created_ns, 1795847483849987815LL);
  if (strcmp(d.e[0].where, "train_step (train.py:12)")) TEST_FAIL("where '%s'", d.e[0].where);
  CHECK_EQ(d.e[1].seq, 6);
  CHECK(!strcmp(d.e[1].op, "broadcast") && !strcmp(d.e[1].state, "started"));
  CHECK_EQ(d.e[1].count, -1);
  CHECK_EQ(d.e[1].retired, 0);
}

/* each prefix of a good dump is refused (it ends without STOP, or inside an argument) */
TEST(torch_fr_every_truncation_refused) {
  cddp__fr_dump_t d;
  char err[200];
  for (size_t n = 0; n < LEN(dump); n++) {
    err[0] = '\0';
    if (parse(dump, n, &d, err) == 0) TEST_FAIL("a dump cut at %zu bytes was read", n);
    CHECK(err[0] != '\0' && !strchr(err, '\n'));
  }
}

TEST(torch_fr_hostile_refused) {
  static const struct { const char *b; size_t n; const char *says; } bad[] = {
      {"\x80\x02" "cos\nsystem\n(S'true'\ntR.", LEN("\x80\x02" "cos\nsystem\n(S'true'\ntR."), "opcode 0x63"},              /* GLOBAL: what runs code */
      {"\x80\x02}(X\xff\xff\xff\x7f" "a", LEN("\x80\x02}(X\xff\xff\xff\x7f" "a"), "past the end"},                  /* a length past the end */
      {"\x80\x02]q\x00h\x00" "a.", LEN("\x80\x02]q\x00h\x00" "a."), "not one dict"},                          /* a list holding itself */
      {"\x80\x02h\x05.", LEN("\x80\x02h\x05."), "memo 5 unset"},                                   /* a memo never set */
      {"\x80\x02q\x00.", LEN("\x80\x02q\x00."), "memo of nothing"},
      {"\x80\x02K\x01" "a.", LEN("\x80\x02K\x01" "a."), "APPEND"},                                     /* APPEND onto an int */
      {"\x80\x02}" "u.", LEN("\x80\x02}" "u."), "no MARK"},
      {"\x80\x02}K\x01s.", LEN("\x80\x02}K\x01s."), "SETITEM"},                                      /* a key without a value */
      {"\x80\x02\x8a\x09" "123456789.", LEN("\x80\x02\x8a\x09" "123456789."), "integer of 9 bytes"},
      {"\x80\x09}.", LEN("\x80\x09}."), "protocol 9"},
      {"\x80\x02}.", LEN("\x80\x02}."), "no \"entries\""},
      {"\x80\x02}\x8c\x07" "entriesK\x01s.", LEN("\x80\x02}\x8c\x07" "entriesK\x01s."), "no \"entries\""},
      {"\x80\x02}}.", LEN("\x80\x02}}."), "not one dict"},
      {"(\x80\x02}.", LEN("(\x80\x02}."), "not a pickle"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cddp__fr_dump_t d;
    char err[200] = "";
    if (parse(bad[i].b, bad[i].n, &d, err) == 0) TEST_FAIL("case %zu was read", i);
    if (!strstr(err, bad[i].says)) TEST_FAIL("case %zu says '%s', not '%s'", i, err, bad[i].says);
  }
}

/* a dump of more entries than are kept: the last CDDP__FR_MAX_ENTRIES, in order */
TEST(torch_fr_keeps_the_last) {
  static char b[8192];
  size_t n = 0;
  n += (size_t)sprintf(b + n, "\x80\x02}\x8c\x07" "entries](");
  for (int k = 1; k <= 100; k++) n += (size_t)sprintf(b + n, "}\x8c\x11" "collective_seq_idM%c%cs", k & 0xff, k >> 8);
  n += (size_t)sprintf(b + n, "es.");
  cddp__fr_dump_t d;
  char err[200] = "";
  if (parse(b, n, &d, err) != 0) TEST_FAIL("refused: %s", err);
  CHECK_EQ(d.total, 100);
  CHECK_EQ(d.n, CDDP__FR_MAX_ENTRIES);
  CHECK_EQ(d.e[0].seq, 100 - CDDP__FR_MAX_ENTRIES + 1);
  CHECK_EQ(d.e[d.n - 1].seq, 100);
}
