"""NVML sampler: GPU utilization as nvidia-smi reports it, polled from a thread.

`nvmlDeviceGetUtilizationRates(handle).gpu` is "the percent of time over the past sample
period during which one or more kernels was executing" (NVML docs), a period of 1/6 s to 1 s
chosen by the driver. A GPU that runs one tiny kernel per period therefore reads near 100%:
this is the polled figure that RL-Scope found inflates GPU usage, and `rlsys.profiler.gpu`
sets it against the true busy time (the union of kernel intervals).

`open_nvml()` returns the initialized `pynvml` module (package `nvidia-ml-py`, the `gpu`
extra) or None where there is no NVIDIA driver or GPU, which makes the sampler a no-op.
Tests pass a fake module with the same four functions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlsys.trace import clock_ns

DEFAULT_PERIOD_S = 0.1


@dataclass(frozen=True)
class Sample:
    time_ns: int  # the event clock when the reading was taken
    device: int  # NVML device index
    gpu_percent: float  # utilization.gpu: time with a kernel running, over the driver's period
    memory_percent: float  # utilization.memory: time the memory was read or written


def open_nvml() -> Any | None:
    """`pynvml`, initialized, if it imports and finds at least one GPU; else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no package, no driver, no device: all mean "no GPU to sample"
        return None
    try:
        if pynvml.nvmlDeviceGetCount() > 0:
            return pynvml
    except Exception:
        pass
    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()
    return None


class NvmlSampler:
    """Reads every device's utilization each `period_s` on a daemon thread until `stop()`."""

    def __init__(
        self, nvml: Any, period_s: float = DEFAULT_PERIOD_S, clock: Callable[[], int] = clock_ns
    ) -> None:
        self.nvml = nvml
        self.period_s = period_s
        self.clock = clock
        self.samples: list[Sample] = []
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i)
                        for i in range(nvml.nvmlDeviceGetCount())]  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlsys-nvml", daemon=True)

    def sample_once(self) -> None:
        for index, handle in enumerate(self.handles):
            rates = self.nvml.nvmlDeviceGetUtilizationRates(handle)
            self.samples.append(Sample(self.clock(), index, float(rates.gpu),
                                       float(rates.memory)))  # fmt: skip

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a device that stops answering ends sampling, not the run
                return
            self._stop.wait(self.period_s)

    def start(self) -> NvmlSampler:
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        """Stop sampling, shut NVML down; returns the samples."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()
        return self.samples


def start_sampler(period_s: float = DEFAULT_PERIOD_S) -> NvmlSampler | None:
    """A running sampler where NVML finds a GPU; None (and nothing started) elsewhere."""
    nvml = open_nvml()
    return NvmlSampler(nvml, period_s).start() if nvml is not None else None
