"""Capturing one forward as a CUDA graph, shared by the decode and the prefill graphs."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture_graph(device: torch.device, pool, warm_up: Callable[[], object], body: Callable[[], object],
                  warm_ups: int = 1) -> torch.cuda.CUDAGraph:
    """Run `warm_up` `warm_ups` times on a side stream (compiling and autotuning kernels, creating
    library handles, none of which a capture may do), then capture `body` into a graph drawing from
    `pool`. The capture is `thread_local`: a graph first needed mid-stream must not fail because
    another thread pins memory or queries an event meanwhile; no other thread uses this stream."""
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(warm_ups):
            warm_up()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        body()
    return graph
