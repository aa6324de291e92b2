# etimer.py - for tests/sh/test_torch_timer.sh: torch.distributed.elastic.timer's FileTimerClient
# against the agent's pipe (TORCHELASTIC_TIMER_FILE). "expire": a released timer, then rank 1
# overstays 'data_load'. "hostile": lines no request should be, then a release; nobody is killed.
import os
import sys
import time

import torch.distributed.elastic.timer as timer
from torch.distributed.elastic.timer.file_based_local_timer import FileTimerClient

rank = int(os.environ["RANK"])
path = os.environ["TORCHELASTIC_TIMER_FILE"]
timer.configure(FileTimerClient(path))
if sys.argv[1] == "expire":
    with timer.expires(after=2, scope="warmup"):
        pass
    with timer.expires(after=3, scope="data_load"):
        print(f"rank {rank} in data_load", flush=True)
        if rank == 1:
            time.sleep(60)
else:
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    for line in ('{"version": 1, "pid": 1, "scope_id": "init", "expiration_time": 0, "signal": 9}',
                 "x" * 5000, '{"pid": "1"', '{"version": 1, "pid": %d, "scope_id": "\\u001b[2J", '
                 '"expiration_time": 0, "signal": 0}' % os.getpid(), "[]"):
        os.write(fd, (line + "\n").encode())
    os.close(fd)
    with timer.expires(after=1, scope="short"):
        pass
    time.sleep(2)
print(f"rank {rank} done", flush=True)
