/* errfile.c - finds the message in torch's JSON error file, without a JSON library: only the
 * string value of the innermost leading "message" key is decoded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "launcher/errfile.h"

#define ERRFILE_MAX_BYTES (1 << 20)

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static int hexval(const char *p, const char *end, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    if (p + i >= end) return 0;
    char c = p[i];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
               : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
    if (d > 15) return 0;
    *v = *v * 16 + d;
  }
  return 1;
}

/* Appends code point cp as UTF-8 if it fits. */
static void put_utf8(char *out, size_t size, size_t *o, unsigned cp) {
  char b[4];
  size_t n = cp < 0x80 ? (b[0] = (char)cp, 1)
           : cp < 0x800 ? (b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 63)), 2)
           : cp < 0x10000 ? (b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 63)),
                             b[2] = (char)(0x80 | (cp & 63)), 3)
                          : (b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 63)),
                             b[2] = (char)(0x80 | (cp >> 6 & 63)), b[3] = (char)(0x80 | (cp & 63)), 4);
  if (*o + n < size) memcpy(out + *o, b, n), *o += n;
}

/* Decodes the JSON string at p (just after its opening quote) up to the first newline of its
 * value. Returns 1 when the string was well formed up to there. */
static int decode_first_line(const char *p, const char *end, char *out, size_t size) {
  size_t o = 0;
  while (p < end && *p != '"') {
    unsigned cp;
    if (*p != '\\') {
      if (*p == '\n') break;
      if (o + 1 < size) out[o++] = (unsigned char)*p < 0x20 ? ' ' : *p; /* raw controls (and NUL) are not text */
      p++;
      continue;
    }
    if (++p >= end) return 0;
    char e = *p++;
    switch (e) {
    case 'n': goto done; /* the first line is the message; the rest is a traceback */
    case 't': cp = ' '; break;
    case 'r': case 'b': case 'f': continue;
    case 'u':
      if (!hexval(p, end, &cp)) return 0;
      p += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && p + 6 <= end && p[0] == '\\' && p[1] == 'u') { /* a surrogate pair */
        unsigned lo;
        if (hexval(p + 2, end, &lo) && lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), p += 6;
      }
      break;
    default: cp = (unsigned char)e; /* \" \\ \/ */
    }
    put_utf8(out, size, &o, cp < 0x20 ? ' ' : cp); /* controls (and NUL) are not text */
  }
done:
  while (o > 0 && out[o - 1] == ' ') o--;
  out[o] = '\0';
  return o > 0;
}

int cddp__errfile_parse(const char *buf, size_t len, char *out, size_t size) {
  const char *end = buf + len, *p = skip_ws(buf, end);
  int found = 0;
  if (size) out[0] = '\0';
  /* { "message" : { "message" : "..." ... } }: follow "message" keys inward */
  while (!found && p < end && *p == '{') {
    p = skip_ws(p + 1, end);
    if (end - p < 9 || memcmp(p, "\"message\"", 9)) break;
    p = skip_ws(p + 9, end);
    if (p >= end || *p != ':') break;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '"') found = decode_first_line(p + 1, end, out, size);
    else if (p >= end || *p != '{') break;
  }
  if (!found && size) out[0] = '\0'; /* a malformed string may have left part of itself */
  return found;
}

void cddp__errfile_path(const char *dir, int rank, char *buf, size_t size) {
  snprintf(buf, size, "%s/rank%d.json", dir, rank);
}

int cddp__errfile_read(const char *path, char *out, size_t size, uint64_t *mtime_ns) {
  if (size) out[0] = '\0';
  int fd = cddp__open_regular(path); /* the worker's file: a FIFO there must not hang the agent */
  if (fd < 0) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  if (mtime_ns) *mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
  if (st.st_size <= 0) {
    close(fd);
    return 0;
  }
  size_t len = (size_t)(st.st_size < ERRFILE_MAX_BYTES ? st.st_size : ERRFILE_MAX_BYTES);
  char *buf = malloc(len);
  ssize_t got = buf ? pread(fd, buf, len, 0) : -1;
  close(fd);
  int found = got > 0 && cddp__errfile_parse(buf, (size_t)got, out, size);
  free(buf);
  return found;
}
