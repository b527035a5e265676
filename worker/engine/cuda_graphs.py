"""Capturing one forward as a CUDA graph, shared by the decode and the prefill graphs."""

from __future__ import annotations

from collections.abc import Callable

import torch

_capture_streams: dict[int, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The one side stream every warm-up and capture on `device` runs on. Libraries keep per-stream
    state for the life of the process (cuBLAS a workspace for each stream it ran on): a new stream
    per capture, as torch's pool hands them out in turn, left memory behind each time (the probe's
    holds of prefill graphs, 128 MiB each on an H100; once, with this stream: bench/NOTES.md)."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _capture_streams:
        _capture_streams[index] = torch.cuda.Stream(index)
    return _capture_streams[index]


def capture_graph(device: torch.device, pool, warm_up: Callable[[], object], body: Callable[[], object],
                  warm_ups: int = 1) -> torch.cuda.CUDAGraph:
    """Run `warm_up` `warm_ups` times on the capture stream (compiling and autotuning kernels,
    creating library handles, none of which a capture may do), then capture `body` on it into a
    graph drawing from `pool`. The capture is `thread_local`: a graph first needed mid-stream must
    not fail because another thread pins memory or queries an event meanwhile; no other thread uses
    this stream. `torch.cuda.graph` empties the allocator's cache first, which a capture needs: it
    cannot give cached blocks back to the device when its pool must grow (without it, a prefill
    graph's capture ran out of memory mid-stream on an H100)."""
    current = torch.cuda.current_stream(device)
    side = capture_stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(warm_ups):
            warm_up()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=side, capture_error_mode="thread_local"):
        body()
    return graph
