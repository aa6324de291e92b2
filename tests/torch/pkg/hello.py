# pkg/hello.py - run as `cddp run -m pkg.hello`: proves the module form reaches Python's -m.
import os
print(f"module ok rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} as {__name__}", flush=True)
