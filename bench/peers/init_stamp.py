"""init_stamp.py - launch -> init_process_group for bench/torchrun_bench.sh: every worker prints
`init RANK T` (T: Unix seconds) the moment dist.init_process_group("gloo") has returned, then
leaves the group and exits. Run it under a launcher: torchrun or `cddp run` with 2 workers.
"""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"init {os.environ['RANK']} {time.time():.3f}", flush=True)
dist.destroy_process_group()
