/* config_schema.h - the one table of training-config keys (internal to config*.c and its
 * test): type, field, default, range or choices and doc of each dotted key, and the value
 * parsers/formatters that defaults, YAML, --set, the writer, the hash and the docs share. */
#ifndef CDDP_TRAINER_CONFIG_SCHEMA_H
#define CDDP_TRAINER_CONFIG_SCHEMA_H

#include <stddef.h>
#include <stdio.h>

#include "trainer/config.h"

typedef enum cddp__cfg_type {
  CDDP__CFG_INT,      /* int */
  CDDP__CFG_INT64,    /* int64_t */
  CDDP__CFG_UINT64,   /* uint64_t */
  CDDP__CFG_FLOAT,    /* float */
  CDDP__CFG_DOUBLE,   /* double */
  CDDP__CFG_BOOL,     /* int 0/1 */
  CDDP__CFG_STRING,   /* char[aux] */
  CDDP__CFG_ENUM,     /* an int-sized C enum whose values are the choices' indices */
  CDDP__CFG_INT_LIST, /* int[CDDP_MODEL_MAX_LAYERS]; count (int) at offset aux */
} cddp__cfg_type_t;

enum { CDDP__CFG_LO_OPEN = 1, CDDP__CFG_HI_OPEN = 2 }; /* range bound excluded */

typedef struct cddp__cfg_key {
  const char *key;        /* dotted path, e.g. "optim.lr" */
  cddp__cfg_type_t type;
  size_t off;             /* field offset in cddp_train_config_t */
  size_t aux;             /* STRING: capacity in bytes; INT_LIST: offset of the count */
  const char *def;        /* default, as text the parser reads */
  double lo, hi;          /* numbers (each list entry): range; lo > hi means none */
  int flags;              /* CDDP__CFG_LO_OPEN | CDDP__CFG_HI_OPEN */
  const char *choices;    /* ENUM (and a STRING that must be one of them): "a|b|c" */
  const char *doc;        /* one line */
} cddp__cfg_key_t;

extern const cddp__cfg_key_t cddp__cfg_keys[];
extern const int cddp__cfg_n_keys;

/* Index of key in the table, or -1. */
int cddp__cfg_find(const char *key);
/* 1 when some key starts with "section." (section is a map of keys). */
int cddp__cfg_is_section(const char *section);
/* The nearest known key or section to a mistyped one, or NULL when none is close. */
const char *cddp__cfg_suggest(const char *typed);

/* Parses text as key k's value into c (lists: "[1,2]", "1,2" or "1"). Returns 0, or -1
 * with a message like "expected an integer, got 'x'" in err. */
int cddp__cfg_parse(const cddp__cfg_key_t *k, const char *text, cddp_train_config_t *c,
                    char *err, size_t cap);
/* One list entry (checked against the key's range) into *out; 0 or -1 with err. */
int cddp__cfg_parse_list_entry(const cddp__cfg_key_t *k, const char *text, int *out,
                               char *err, size_t cap);
/* Stores a parsed list (n <= CDDP_MODEL_MAX_LAYERS) into c. */
void cddp__cfg_set_list(const cddp__cfg_key_t *k, cddp_train_config_t *c, const int *v, int n);
/* The value as the resolved YAML writes it (round-trips through cddp__cfg_parse; strings
 * double-quoted, lists "[a, b]"). Returns the length (truncated to cap-1). */
int cddp__cfg_format(const cddp__cfg_key_t *k, const cddp_train_config_t *c, char *buf, size_t cap);
/* "an integer", "a number", "true or false", "one of sgd, adamw", "a list of integers"... */
const char *cddp__cfg_type_name(const cddp__cfg_key_t *k);
/* "[1, 1000000]", "(0, 10]", "sgd | adamw", "" when unconstrained. */
void cddp__cfg_range_text(const cddp__cfg_key_t *k, char *buf, size_t cap);

/* The schema as a Markdown table (docs/config.md holds the same rows). */
void cddp__config_print_schema(FILE *f);

#endif /* CDDP_TRAINER_CONFIG_SCHEMA_H */
