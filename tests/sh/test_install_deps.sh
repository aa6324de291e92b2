#!/usr/bin/env bash
# test_install_deps.sh - scripts/install-deps.sh test, on a copy of the repository's scripts with
# dpkg-query and df answered by shims: a .venv that holds every pin is only checked (no pip); a
# disk without room for torch 2.x is refused before pip starts, with one line naming the folder,
# what it has and what it needs; every line of requirements-torch.txt is a NAME==VERSION pin.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-install-deps.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/repo/scripts" "$T/bin"
cp scripts/install-deps.sh scripts/requirements-torch.txt "$T/repo/scripts/"
# every Debian package installed; the disk has $FREE_MB MB free
printf '#!/bin/sh\nprintf "install ok installed"\n' >"$T/bin/dpkg-query"
cat >"$T/bin/df" <<'EOF'
#!/bin/sh
echo "Filesystem 1048576-blocks Used Available Capacity Mounted on"
echo "/dev/fake 100000 90000 $FREE_MB 90% /"
EOF
chmod +x "$T/bin/"*
run_deps() { FREE_MB=$1 PATH="$T/bin:$PATH" timeout 60 "$T/repo/scripts/install-deps.sh" test >"$T/out" 2>&1; }

# 1: the pins file is a full lock: comments, then NAME==VERSION lines only, torch among them
bad=$(grep -v '^#' scripts/requirements-torch.txt | grep -cvE '^[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+-]*$')
if [ "$bad" = 0 ] && grep -q '^torch==2\.' scripts/requirements-torch.txt &&
   grep -q '^typing_extensions==\|^typing-extensions==' scripts/requirements-torch.txt; then
  ok "every line of requirements-torch.txt is a pin, the dependencies' included"
else fail "every line of requirements-torch.txt is a pin, the dependencies' included" "$bad bad lines"; fi

# 2: no .venv and 500 MB free: refused at once, one line, pip never started (no .venv made)
run_deps 500; rc=$?
if [ $rc = 1 ] && [ "$(wc -l <"$T/out")" = 1 ] && grep -q "$T/repo has 500 MB free.*needs about 9000 MB" "$T/out" &&
   [ ! -e "$T/repo/.venv" ]; then ok "too little disk: one line naming folder, free and needed MB"
else fail "too little disk: one line naming folder, free and needed MB" "rc $rc: $(head -c 300 "$T/out")"; fi

# 3: a .venv holding every pin (the repository's own, when made) is checked and left: rc 0, no line
if [ -x .venv/bin/python ] && [ "$(readlink -f .venv)" != "$(readlink -f "$T/repo/.venv")" ]; then
  ln -s "$(readlink -f .venv)" "$T/repo/.venv"
  run_deps 500; rc=$?
  if [ $rc = 0 ] && [ ! -s "$T/out" ]; then ok "pins held: checked in place, nothing installed"
  else fail "pins held: checked in place, nothing installed" "rc $rc: $(head -c 300 "$T/out")"; fi
else
  t_n=$((t_n + 1)); echo "ok $t_n - $t_name:pins held # SKIP no .venv here (tests/run.sh makes it first)"
fi
finish
