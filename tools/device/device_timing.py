"""How the device scripts time one run of a callable: CUDA events around it
on the current stream (the device's time, not the host's queueing), or the
wall clock on the CPU."""

import time


def seconds_of(run, cuda):
    """Seconds ``run()`` took: CUDA events when ``cuda``, else wall time."""
    if cuda:
        import torch  # Only the device path needs it.
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        run()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) * 1e-3
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
