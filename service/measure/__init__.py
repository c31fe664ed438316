"""`roofline measure`: the roofs and kernel timings of the machine it runs on, in the forms the service takes.

An adapter, not part of the computational core: it needs PyTorch (imported only when a measurement runs) and the
device it measures. The parts, each with one job:
- timing: one kernel's time as engines run it (warm-up, synchronised, the median of repeats);
- grids: the shapes and sizes a run visits, quick or full;
- roofs: main-memory bandwidth over sizes and each dtype's matmul peak, as measured-roof benchmarks;
- kernels: matmul timings over the grid, as kernel timings;
- collect: a run within a time budget, resumable, its environment recorded, written as files;
- upload: the files posted to a service (the device drafted from what was measured where it is new).
"""
