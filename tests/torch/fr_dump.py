# fr_dump.py - for tests/sh/test_torch_flight.sh: prints the flight-recorder variables it was given,
# then (torch 2.x over gloo) runs three all_reduces and a barrier and has torch write its own
# flight-recorder dump, as torch's watchdog does on a timeout, to TORCH_FR_DUMP_TEMP_FILE<rank>.
import os
import torch
import torch.distributed as dist

for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_ON_TIMEOUT",
             "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
    print(f"rank {os.environ['RANK']} env {name}={os.environ.get(name, '<unset>')}", flush=True)
dist.init_process_group("gloo")
t = torch.ones(6)
for _ in range(3):
    dist.all_reduce(t)
dist.barrier()
if torch.__version__ >= "2" and os.environ.get("TORCH_FR_DUMP_TEMP_FILE"):
    import torch._C._distributed_c10d as c10d
    c10d._dump_fr_trace_file(dist.get_rank(), True, True)
    print(f"rank {dist.get_rank()} dumped", flush=True)
dist.destroy_process_group()
