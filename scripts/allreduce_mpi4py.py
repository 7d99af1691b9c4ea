"""The baseline of scripts/bench-dist: MPI_Allreduce (sum, float32, in place) called through
MPI's own Python bindings on each size given, as strata's allreduce_bench example does.
Run under mpirun; rank 0 prints "<MiB> <seconds>" per timed call."""
import sys
import time

import numpy as np
from mpi4py import MPI

WARMUP = 2

comm = MPI.COMM_WORLD
for mib in (int(a) for a in sys.argv[1:]):
    buf = np.ones(mib << 18, dtype=np.float32)
    for _ in range(WARMUP):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    comm.Barrier()
    start = time.perf_counter()
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    secs = time.perf_counter() - start
    if comm.Get_rank() == 0:
        print(f"{mib} {secs:.9f}")
comm.Barrier()
