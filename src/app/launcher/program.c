/* program.c - resolves PROGRAM by torchrun's rules and names what stops it from running. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "launcher/program.h"

#define PROBE_TIMEOUT_MS 30000

/* 1: an executable file; 0: nothing there; -1: a file that is not executable; -2: a directory. */
static int executable(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) return -2;
  return access(path, X_OK) == 0 ? 1 : -1;
}

/* name (no '/') on PATH: out = the first executable match. Returns as executable(). */
static int search_path(const char *name, char *out, size_t size) {
  const char *path = getenv("PATH");
  int seen = 0;
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;; p += strcspn(p, ":") + 1) {
    size_t len = strcspn(p, ":");
    snprintf(out, size, "%.*s%s%s", (int)len, len ? p : ".", "/", name);
    int e = executable(out);
    if (e == 1) return 1;
    if (e == -1 && !seen) seen = -1;
    if (!p[len]) break;
  }
  return seen;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Whether name (up to a separator) is torch or a torch submodule. */
static int names_torch(const char *name) {
  while (*name == ' ' || *name == '\t') name++;
  return !strncmp(name, "torch", 5) && !isalnum((unsigned char)name[5]) && name[5] != '_';
}

int cddp__program_imports_torch(const char *script) {
  FILE *f = fopen(script, "r");
  char line[4096];
  int found = 0;
  for (int n = 0; f && !found && n < 20000 && fgets(line, sizeof line, f); n++) {
    const char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (!strncmp(s, "from ", 5)) found = names_torch(s + 5);
    else if (!strncmp(s, "import ", 7))
      for (const char *item = s + 6; item && !found; item = strchr(item + 1, ',')) found = names_torch(item + 1);
  }
  if (f) fclose(f);
  return found;
}

/* Interpreter flags a spare reproduces: they take no value and mean the same for -c. */
static int plain_flag(const char *a) {
  return a[0] == '-' && a[1] && strspn(a + 1, "uBsEIq") == strlen(a + 1);
}

static int is_python(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strncmp(base, "python", 6) != 0) return 0;
  return strspn(base + 6, "0123456789.") == strlen(base + 6);
}

int cddp__program_mentions(const char *script, const char *word) {
  FILE *f = fopen(script, "r");
  char line[4096];
  int found = 0;
  for (int n = 0; f && !found && n < 20000 && fgets(line, sizeof line, f); n++) found = strstr(line, word) != NULL;
  if (f) fclose(f);
  return found;
}

int cddp__program_python_args(char *const *argv, char *why, size_t why_size) {
  if (!argv[0] || !is_python(argv[0])) {
    snprintf(why, why_size, "'%.200s' is not a Python interpreter", argv[0] ? argv[0] : "");
    return -1;
  }
  int i = 1;
  while (argv[i] && plain_flag(argv[i])) i++;
  if (!argv[i]) {
    snprintf(why, why_size, "no script");
    return -1;
  }
  if (!strcmp(argv[i], "-m")) return argv[i + 1] ? i : -1;
  if (argv[i][0] == '-') {
    snprintf(why, why_size, "the interpreter flag %.100s", argv[i]);
    return -1;
  }
  return i;
}

/* Runs interp -c code [a1 [a2]] with no input or output, bound by PROBE_TIMEOUT_MS: its exit
 * code, or -1 when it did not run or answer in time. */
static int run_probe(const char *interp, const char *code, const char *a1, const char *a2) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
    execl(interp, interp, "-c", code, a1, a2, (char *)NULL);
    _exit(127);
  }
  uint64_t deadline = cddp__deadline_ms(PROBE_TIMEOUT_MS);
  int st;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -1;
    if (cddp__now_ns() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(2000);
  }
  return WIFEXITED(st) && WEXITSTATUS(st) != 127 ? WEXITSTATUS(st) : -1;
}

/* Runs the interpreter once: exit 3 = no torch (when need_torch, or when the module or its
 * package imports torch), 4 = no module (when module is not ""), 0 = fine; -1 = it did not run
 * or answer in time. A module's source is read, not run (its package's __init__ is imported). */
static int probe(const char *interp, const char *module, int need_torch) {
  static const char code[] =
      "import importlib.util as u, re, sys\n"
      "m, t = sys.argv[1], sys.argv[2] == '1'\n"
      "have = u.find_spec('torch') is not None\n"
      "if t and not have: sys.exit(3)\n"
      "try: s = u.find_spec(m) if m else None\n"
      "except ModuleNotFoundError as e: sys.exit(3 if (e.name or '').split('.')[0] == 'torch' else 4)\n"
      "except Exception: sys.exit(4)\n"
      "if m and s is None: sys.exit(4)\n"
      "if m and not have:\n"
      "  try:\n"
      "    if s.submodule_search_locations is not None: s = u.find_spec(m + '.__main__')\n"
      "    src = open(s.origin, errors='replace').read(4 << 20)\n"
      "  except Exception: src = ''\n"
      "  if re.search(r'^[ \\t]*(from[ \\t]+torch\\b|import[ \\t]+([\\w.]+[ \\t]*,[ \\t]*)*torch\\b)', src, re.M): sys.exit(3)\n"
      "sys.exit(0)\n";
  int r = run_probe(interp, code, module, need_torch ? "1" : "0");
  return r == 3 || r == 4 || r == 0 ? r : -1;
}

/* The probe's exit status carries both numbers: 10 + major * 20 + minor (both capped), under 256. */
#define TORCH_MINOR_CAP 19
int cddp__program_torch_major(const char *interp, int *minor) {
  static const char code[] = /* reads torch/version.py: importing torch would take seconds */
      "import importlib.util as u, os, re, sys\n"
      "s = u.find_spec('torch')\n"
      "if s is None: sys.exit(10)\n"
      "try: t = open(os.path.join(s.submodule_search_locations[0], 'version.py')).read()\n"
      "except Exception: sys.exit(1)\n"
      "m = re.search(r\"__version__ = '(\\d+)\\.(\\d+)\", t)\n"
      "sys.exit(10 + int(m.group(1)) * 20 + min(int(m.group(2)), 19) if m and int(m.group(1)) < 10 else 1)\n";
  int r = run_probe(interp, code, NULL, NULL);
  if (minor) *minor = r >= 10 ? (r - 10) % (TORCH_MINOR_CAP + 1) : 0;
  return r >= 10 ? (r - 10) / (TORCH_MINOR_CAP + 1) : -1;
}

/* A script with the run bit whose "#!" line names a Python ("#!/opt/venv/bin/python3" or
 * "#!/usr/bin/env python3"): out = that interpreter's path (a name looked up on PATH). Returns 1
 * when it names one that runs, 0 when there is no such line (or it names no Python), and fails
 * with one line when the interpreter it names is not there. */
static int shebang_python(const char *script, char *out, size_t size) {
  char line[512], name[512];
  FILE *f = access(script, X_OK) == 0 ? fopen(script, "r") : NULL;
  int got = f && fgets(line, sizeof line, f) && !strncmp(line, "#!", 2);
  if (f) fclose(f);
  if (!got) return 0;
  const char *s = line + 2 + strspn(line + 2, " \t");
  size_t len = strcspn(s, " \t\r\n");
  snprintf(name, sizeof name, "%.*s", (int)len, s);
  if (!strcmp(name, "/usr/bin/env") || !strcmp(name, "/bin/env")) { /* env NAME: not env -S or env VAR=... */
    s += len + strspn(s + len, " \t");
    len = strcspn(s, " \t\r\n");
    snprintf(name, sizeof name, "%.*s", (int)len, s);
    if (!is_python(name) || strchr(name, '/')) return 0;
    if (search_path(name, out, size) == 1) return 1;
  } else {
    if (name[0] != '/' || !is_python(name)) return 0;
    snprintf(out, size, "%s", name);
    if (executable(out) == 1) return 1;
  }
  cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' names the interpreter '%s' in its #! line, which %s; fix that line, or "
             "pass --python", script, name, strchr(name, '/') ? "is not an executable file" : "is not on PATH");
  return -1;
}

/* The interpreter: --python / CDDP_PYTHON, else python3; a name is looked up on PATH. */
static cddp_result_t find_interp(const cddp_run_opts_t *o, const char *what, char *out, size_t size) {
  const char *py = o->python[0] ? o->python : "python3";
  const char *given = o->python[0] ? "--python (or CDDP_PYTHON)" : "the default";
  int e = strchr(py, '/') ? (snprintf(out, size, "%s", py), executable(py)) : search_path(py, out, size);
  if (e == 1) return CDDP_OK;
  if (e == 0 && !strchr(py, '/'))
    return cddp__fail(CDDP_INVALID_ARG, "%s runs with Python, but '%s' (%s) is not on PATH; pass --python PATH or set "
                      "CDDP_PYTHON", what, py, given);
  return cddp__fail(CDDP_INVALID_ARG, "%s runs with Python, but the interpreter '%s' (%s) %s; pass --python PATH or set "
                    "CDDP_PYTHON", what, py, given, e == 0 ? "does not exist" : e == -2 ? "is a directory" : "is not executable");
}

cddp_result_t cddp__program_resolve(const cddp_run_opts_t *o, char **prog, cddp__program_t *p) {
  char found[4096], what[4200];
  size_t n = 0;
  memset(p, 0, sizeof *p);
  while (prog[n]) n++;
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "missing PROGRAM (what each worker runs)");
  p->python = !o->no_python && (o->module || o->run_path || ends_with(prog[0], ".py"));
  if (!p->python) {
    int e = strchr(prog[0], '/') ? executable(prog[0]) : search_path(prog[0], found, sizeof found);
    if (e == 0 && !strchr(prog[0], '/') && executable(prog[0]) != 0)
      return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' is not on PATH, but there is a file of that name here: "
                        "run ./%s", prog[0], prog[0]);
    if (e == 0)
      return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' not found (%s); give its path, or install it", prog[0],
                        strchr(prog[0], '/') ? "no such file" : "not a command on PATH");
    if (e == -2) return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' is a directory, not a program", prog[0]);
    if (e == -1)
      return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' is not executable: chmod +x it, or run it with its interpreter "
                        "(a Python script: name it .py, or pass --run-path)", prog[0]);
    p->argv = calloc(n + 1, sizeof *p->argv);
    if (!p->argv) return cddp__fail(CDDP_SYSTEM, "out of memory");
    memcpy(p->argv, prog, n * sizeof *prog);
    return CDDP_OK;
  }
  int need_torch = 0;
  if (o->module) {
    snprintf(what, sizeof what, "-m %s", prog[0]);
  } else {
    snprintf(what, sizeof what, "PROGRAM '%s'", prog[0]);
    struct stat st;
    char cwd[4096];
    if (stat(prog[0], &st) != 0)
      return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' %s (in %s)", prog[0], errno == ENOENT ? "not found" : strerror(errno),
                        getcwd(cwd, sizeof cwd) ? cwd : "?");
    if (!S_ISREG(st.st_mode)) return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' is not a file", prog[0]);
    if (access(prog[0], R_OK) != 0) return cddp__fail(CDDP_INVALID_ARG, "PROGRAM '%s' is not readable", prog[0]);
    need_torch = cddp__program_imports_torch(prog[0]);
  }
  /* a script's own "#!" Python runs it (as ./script.py would), unless --python says otherwise */
  int own = !o->module && !o->python[0] ? shebang_python(prog[0], p->interp, sizeof p->interp) : 0;
  if (own < 0) return CDDP_INVALID_ARG;
  if (!own) CDDP_CHECK(find_interp(o, what, p->interp, sizeof p->interp));
  if (need_torch || o->module) {
    int r = probe(p->interp, o->module ? prog[0] : "", need_torch);
    if (r == 3)
      return cddp__fail(CDDP_INVALID_ARG, "%s imports torch, but %s has no torch module; pass --python (or set "
                        "CDDP_PYTHON to) an interpreter that has it", what, p->interp);
    if (r == 4)
      return cddp__fail(CDDP_INVALID_ARG, "%s: %s finds no module '%s'; check the name and PYTHONPATH, or pass --python",
                        what, p->interp, prog[0]);
    if (r < 0) return cddp__fail(CDDP_INVALID_ARG, "%s: the interpreter %s does not run", what, p->interp);
  }
  p->argv = calloc(n + 4, sizeof *p->argv);
  if (!p->argv) return cddp__fail(CDDP_SYSTEM, "out of memory");
  size_t k = 0;
  p->argv[k++] = p->interp;
  p->argv[k++] = "-u"; /* unbuffered, as torchrun: lines reach the console as they are written */
  if (o->module) p->argv[k++] = "-m";
  memcpy(p->argv + k, prog, n * sizeof *prog);
  return CDDP_OK;
}

void cddp__program_free(cddp__program_t *p) {
  free(p->argv);
  p->argv = NULL;
}
