"""Where a Spark query's time went, for the throughput benchmarks: the CPU its own
processes used, the S3 server's, everyone else's on the machine, and its micro-batches'
phases, all over the same window of steady micro-batches.

The machine is shared (two cores, other engineers' jobs): a rate alone cannot say
whether a case was slower for its own sake or because another process took the cores.
``CpuSampler`` samples, every ``period_s``, the CPU seconds of

- the client: this process and its descendants (Spark's JVM, its Python workers),
  minus the S3 server's process tree;
- the server: the S3 server's process tree;
- the machine: every core's busy time (``/proc/stat``): what remains after the two
  above is other people's work;

and ``window`` interpolates them over any wall-clock window (a query's steady
micro-batches: Spark's progress gives each one's start and duration). A process that
exits within a window takes its CPU with it unless a live ancestor reaped it (its
``cutime`` then counts): PySpark's workers are long-lived, so this loses little.

``bound`` names what limited a case: its CPU ceiling (its rows over the core-seconds
it and the server spent, spread over the cores) and, with latency injected, its
latency ceiling (its rows per micro-batch over the round trips a micro-batch can
have waited for in sequence, each ``delay_s``: the longest chain of its requests that
ran one after another, ``s3_proxy.sequential_round_trips``, over all its tasks and the
driver together, so at least its critical path's and the ceiling a floor).
"""

from __future__ import annotations

import bisect
import os
import statistics
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            after = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        kids.setdefault(int(after[1]), []).append(int(entry.name))
    return kids


def _own_cpu_s(pid: int) -> float:
    """user + system of ``pid`` and of the children it reaped."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / _TICK


def tree_cpu_s(root: int, exclude: Iterable[int] = ()) -> tuple[float, float]:
    """(CPU seconds of ``root``'s process tree without the subtrees of ``exclude``,
    CPU seconds of those subtrees)."""
    kids = _children()
    excluded = set(exclude)

    def walk(pid: int) -> float:
        return _own_cpu_s(pid) + sum(walk(k) for k in kids.get(pid, ()))

    inside = outside = 0.0
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in excluded:
            outside += walk(pid)
            continue
        inside += _own_cpu_s(pid)
        stack.extend(kids.get(pid, ()))
    return inside, outside


def machine_busy_s() -> float:
    """Busy CPU seconds of every core since boot (``/proc/stat``: all but idle and
    iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICK


@dataclass(frozen=True)
class Sample:
    at: float
    client: float
    server: float
    machine: float


@dataclass(frozen=True)
class Window:
    """CPU seconds spent in a wall-clock window, by whom."""

    wall_s: float
    client_s: float
    server_s: float
    others_s: float

    def __add__(self, o: Window) -> Window:
        return Window(
            self.wall_s + o.wall_s,
            self.client_s + o.client_s,
            self.server_s + o.server_s,
            self.others_s + o.others_s,
        )


class CpuSampler:
    """Samples the client's, the server's and the machine's CPU seconds in a thread."""

    def __init__(self, server_pid: int, period_s: float = 0.05) -> None:
        self._server_pid = server_pid
        self._period_s = period_s
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        client, server = tree_cpu_s(os.getpid(), (self._server_pid,))
        s = Sample(time.time(), client, server, machine_busy_s())
        with self._lock:
            self._samples.append(s)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self._sample()

    def _at(self, t: float) -> Sample:
        with self._lock:
            samples = list(self._samples)
        times = [s.at for s in samples]
        i = bisect.bisect_left(times, t)
        if i == 0:
            return samples[0]
        if i == len(samples):
            return samples[-1]
        a, b = samples[i - 1], samples[i]
        w = (t - a.at) / (b.at - a.at) if b.at > a.at else 0.0

        def mix(x: float, y: float) -> float:
            return x + (y - x) * w

        return Sample(
            t, mix(a.client, b.client), mix(a.server, b.server), mix(a.machine, b.machine)
        )

    def window(self, start: float, end: float) -> Window:
        """What was spent between the wall-clock times ``start`` and ``end``."""
        self._sample()  # the window may end after the last periodic sample
        a, b = self._at(start), self._at(end)
        client, server = b.client - a.client, b.server - a.server
        return Window(
            end - start, client, server, max(0.0, (b.machine - a.machine) - client - server)
        )


def progress_window(p: Mapping[str, object]) -> tuple[float, float]:
    """A micro-batch's (start, end) in wall-clock seconds, from its progress."""
    from datetime import datetime

    start = datetime.fromisoformat(str(p["timestamp"]).replace("Z", "+00:00")).timestamp()
    durations = p["durationMs"]
    assert isinstance(durations, Mapping)
    return start, start + int(durations["triggerExecution"]) / 1000


PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def phase_means(progress: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """Mean ms of each micro-batch phase."""
    out: dict[str, float] = {}
    for phase in PHASES:
        values = [
            int(d.get(phase, 0)) for p in progress if isinstance(d := p["durationMs"], Mapping)
        ]
        out[phase] = statistics.fmean(values) if values else 0.0
    return out


def bound(
    rows: int, w: Window, cores: int, *, batches: int, round_trips: float | None, delay_s: float
) -> str:
    """What limited a query: its rate, its CPU ceiling, and its latency ceiling when
    latency was injected, as one phrase."""
    rate = rows / w.wall_s
    cpu = w.client_s + w.server_s
    cpu_ceiling = rows / (cpu / cores) if cpu else float("inf")
    used = (cpu + w.others_s) / (w.wall_s * cores)
    parts = [
        f"{rate:,.0f} rows/s",
        f"CPU ceiling {cpu_ceiling:,.0f} "
        f"(client {w.client_s:.1f} + server {w.server_s:.1f} core-s; "
        f"others {w.others_s:.1f}; cores {used:.0%} busy)",
    ]
    if round_trips is not None and delay_s > 0 and batches:
        per_batch = round_trips / batches
        parts.append(
            f"latency ceiling >= {rows / batches / (per_batch * delay_s):,.0f} "
            f"(at most {per_batch:.1f} round trips in sequence a micro-batch)"
        )
    elif delay_s <= 0:
        parts.append("no latency injected")
    if used >= 0.9:
        limit = "the cores (others' work included)" if w.others_s > 0.1 * cpu else "CPU"
    elif round_trips is not None and delay_s > 0:
        limit = "latency and waits"
    else:
        limit = "neither CPU nor injected latency: waits (I/O, scheduling)"
    return ", ".join(parts) + f"; bound: {limit}"
