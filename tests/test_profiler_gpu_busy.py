"""The NVML sampler (with a fake NVML) and true GPU-busy time against polled utilization."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from profile_fixtures import PID, summary_of

from rlsys.profiler import hooks
from rlsys.profiler.collectors import gpu_tracing
from rlsys.profiler.collectors.nvml import NvmlSampler, Sample, open_nvml, start_sampler
from rlsys.profiler.gpu import BusyTime, add_gpu_section, device_comparison, gpu_section
from rlsys.profiler.report_html import render_report
from rlsys.profiler.verdict import verdict
from rlsys.trace import Category, Event, ProcessInfo, Session

MS = 1_000_000


class FakeNvml:
    """The four pynvml calls the sampler makes; utilization readings come from a list."""

    def __init__(self, readings: list[int], devices: int = 1) -> None:
        self.readings = list(readings)
        self.devices = devices
        self.shut_down = False

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle{index}"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        if not self.readings:
            raise RuntimeError("device lost")
        return SimpleNamespace(gpu=self.readings.pop(0), memory=7)

    def nvmlShutdown(self) -> None:
        self.shut_down = True


def test_the_sampler_reads_every_device_with_its_clock() -> None:
    ticks = iter(range(0, 10**9, 100))
    sampler = NvmlSampler(FakeNvml([90, 10, 80, 20], devices=2), clock=lambda: next(ticks))
    sampler.sample_once()
    sampler.sample_once()
    assert sampler.samples == [Sample(0, 0, 90.0, 7.0), Sample(100, 1, 10.0, 7.0),
                               Sample(200, 0, 80.0, 7.0), Sample(300, 1, 20.0, 7.0)]  # fmt: skip


def test_the_sampler_thread_polls_until_stopped_and_shuts_nvml_down() -> None:
    nvml = FakeNvml([50] * 1000)
    sampler = NvmlSampler(nvml, period_s=0.001).start()
    deadline = time.monotonic() + 10
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    samples = sampler.stop()
    assert len(samples) >= 3 and nvml.shut_down
    count = len(samples)
    time.sleep(0.02)
    assert len(sampler.samples) == count  # stopped means stopped


def test_a_device_that_stops_answering_ends_sampling_quietly() -> None:
    sampler = NvmlSampler(FakeNvml([40, 60]), period_s=0.0).start()
    sampler._thread.join(timeout=10)
    assert [s.gpu_percent for s in sampler.stop()] == [40.0, 60.0]


def test_without_nvml_there_is_no_sampler(monkeypatch) -> None:
    broken = SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(OSError("no driver")))
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert open_nvml() is None and start_sampler() is None


def test_busy_time_measures_the_union_inside_a_window() -> None:
    busy = BusyTime([(10, 20), (15, 30), (50, 60)])
    assert busy.covered(0, 100) == 30
    assert busy.covered(25, 55) == 10
    assert busy.covered(12, 13) == 1 and busy.covered(30, 50) == 0 and busy.covered(5, 5) == 0


def test_one_short_kernel_per_period_reads_as_busy_but_is_not() -> None:
    """RL-Scope's point: 1 ms of kernel per 100 ms window, NVML says 100%."""
    kernels = [(w * 100 * MS + 50 * MS, w * 100 * MS + 51 * MS) for w in range(10)]
    samples = [Sample((w + 1) * 100 * MS, 0, 100.0, 0.0) for w in range(10)]
    row = device_comparison(BusyTime(kernels), samples, (0, 1000 * MS), 100 * MS)
    assert row["busy_percent"] == pytest.approx(1.0)
    assert row["polled_percent"] == 100.0 and row["samples"] == 10
    assert row["busy_seconds"] == pytest.approx(0.010) and row["span_seconds"] == 1.0
    assert row["timeline"]["busy_percent"] == [1.0] * 10
    assert row["timeline"]["seconds"][0] == 0.1


def gpu_session() -> Session:
    info = ProcessInfo(PID, 1, "python t.py", ("t.py",), "box", "3.11", None, None, 1.7e9, 0)
    events = [Event("train", Category.OPERATION, 0, 1000 * MS, PID, PID)]
    events += [Event("k", Category.GPU_KERNEL, w * 100 * MS, w * 100 * MS + 30 * MS, PID, 1,
                     device="cuda:0") for w in range(10)]  # fmt: skip
    return Session((info,), events)


def test_the_gpu_section_compares_busy_and_polled_per_device() -> None:
    samples = [Sample((w + 1) * 100 * MS, 0, 90.0, 0.0) for w in range(10)]
    section = gpu_section(gpu_session(), samples, period_s=0.1)
    (row,) = section["devices"]
    assert row["device"] == "cuda:0" and row["busy_percent"] == pytest.approx(30.0)
    assert section["polled_utilization"] == 90.0 and section["busy_percent"] == pytest.approx(30)
    no_samples = gpu_section(gpu_session(), [], period_s=0.1)
    assert no_samples["polled_utilization"] is None
    assert no_samples["devices"][0]["busy_percent"] == pytest.approx(30.0)
    cpu_only = Session(gpu_session().processes, gpu_session().events[:1])
    assert gpu_section(cpu_only, []) is None


def test_the_gpu_section_reaches_summary_plot_trace_report_and_verdict(tmp_path: Path) -> None:
    session = gpu_session()
    samples = [Sample((w + 1) * 100 * MS, 0, 90.0, 0.0) for w in range(10)]
    summary = summary_of(session.events)
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": []}))
    add_gpu_section(summary, session, samples, tmp_path)
    assert summary["gpu"]["polled_utilization"] == 90.0
    assert (tmp_path / "gpu_util.png").read_bytes()[:4] == b"\x89PNG"
    counters = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    first = next(c["args"] for c in counters if c["ph"] == "C")
    assert first == {"busy %": 30.0, "polled %": 90.0}
    sentences = verdict(summary)
    assert "The GPU ran kernels 30% of the time (NVML, as nvidia-smi, reported 90%" in sentences[1]
    page = render_report(summary)
    assert "GPU: true busy time vs polled utilization" in page and page.count("<img") == 2


def test_gpu_tracing_is_a_no_op_without_the_flag(monkeypatch) -> None:
    before = list(sys.meta_path)
    assert gpu_tracing.install({}) is False
    assert sys.meta_path == before


def test_gpu_tracing_starts_a_profiler_once_its_library_is_imported(monkeypatch, tmp_path) -> None:
    (tmp_path / "rlsys_fake_gpu_lib.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = []
    monkeypatch.setattr(gpu_tracing, "STARTERS",
                        {"rlsys_fake_gpu_lib": lambda m: started.append(m.READY)})  # fmt: skip
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(hooks, "_AFTER_IMPORT", {})
    assert gpu_tracing.install({gpu_tracing.GPU_ENV: "1"}) is True
    import rlsys_fake_gpu_lib  # noqa: F401

    assert started == [True]  # after the module's code ran, once
    assert hooks._AFTER_IMPORT == {}
    monkeypatch.delitem(sys.modules, "rlsys_fake_gpu_lib")


def test_emitted_gpu_events_land_in_the_recording(tmp_path: Path) -> None:
    from rlsys.trace import start_recording, stop_recording

    recorder = start_recording(tmp_path)
    try:
        kernel = Event("k", Category.GPU_KERNEL, 5, 9, recorder.pid, 1_000_000_007,
                       device="cuda:0", attrs={"stream": 7})  # fmt: skip
        gpu_tracing.emit([kernel], {(recorder.pid, 1_000_000_007): "cuda:0 stream 7"})
    finally:
        stop_recording()
    session = Session.load_dir(tmp_path)
    assert kernel in session.events
    assert session.thread_names[(recorder.pid, 1_000_000_007)] == "cuda:0 stream 7"
