# warm_probe.py - what a worker sees of itself, printed the same way by a fresh worker and by
# a warm spare that took over (tests/sh/test_warm.sh). In the first attempt the last rank fails
# (exit 3) after a moment, so that every worker restarts; with ARGV "raise" the restarted one
# raises instead of printing.
import json
import os
import sys
import time

attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
rank = os.environ.get("RANK", "?")
if attempt == "1" and "raise" in sys.argv[1:]:
    raise ValueError("warm boom")
seen = {"name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
        "warm_vars": sorted(k for k in os.environ if k in ("CDDP_WARM_FD", "CDDP_WARM_PRELOAD")), "nice": os.nice(0),
        "world": os.environ.get("WORLD_SIZE")}
print(f"probe attempt {attempt} rank {rank} {json.dumps(seen, sort_keys=True)}", flush=True)
if attempt == "0" and rank == str(int(os.environ["WORLD_SIZE"]) - 1):
    time.sleep(float(os.environ.get("PROBE_FAIL_AFTER", "1.5")))
    sys.exit(3)
