"""What every benchmark section shares: progress line, markdown tables, percentiles, the machine.

A section is a function ``run(ctx) -> list[Table]``; :mod:`bench.__main__` runs them in order,
prints each table as it comes and writes them all to ``bench/results/latest.md``.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

RESULTS_DIR = Path(__file__).resolve().parent / "results"


class Progress:
    """One status line: rewritten in place on a terminal, a throttled log line otherwise."""

    def __init__(self, sections: int, stream: TextIO | None = None, every_seconds: float = 5.0):
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._sections = sections
        self._index = 0
        self._name = ""
        self._started = time.monotonic()
        self._every = every_seconds
        self._last_line = 0.0
        self._width = 0

    def section(self, name: str) -> None:
        """A new section begins."""
        self._index += 1
        self._name = name
        self.update("starting", force=True)

    def update(self, message: str, *, force: bool = False) -> None:
        """Show ``message`` for the current section (throttled when not a terminal)."""
        elapsed = time.monotonic() - self._started
        line = (
            f"[{self._index}/{self._sections} {self._name}] {message}"
            f"  ({int(elapsed) // 60}:{int(elapsed) % 60:02d} elapsed)"
        )
        if self._tty:
            pad = max(0, self._width - len(line))
            self._stream.write("\r" + line + " " * pad)
            self._width = len(line)
        elif force or time.monotonic() - self._last_line >= self._every:
            self._stream.write(line + "\n")
            self._last_line = time.monotonic()
        self._stream.flush()

    def clear(self) -> None:
        """End the in-place line so normal output can follow."""
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0

    @property
    def elapsed_seconds(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self._started


@dataclass
class Table:
    """A titled markdown table with optional notes under it."""

    title: str
    headers: Sequence[str]
    rows: list[Sequence[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: Any) -> None:
        """Append a row (cells are formatted with :func:`cell`)."""
        self.rows.append(cells)

    def to_markdown(self) -> str:
        """The table as GitHub markdown: a ``###`` title, the table, notes as a list."""
        head = "| " + " | ".join(self.headers) + " |"
        rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.headers))) + "|"
        body = ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        notes = [f"- {n}" for n in self.notes]
        return "\n".join(
            [f"### {self.title}", "", head, rule, *body, *(["", *notes] if notes else [])]
        )


def cell(value: Any) -> str:
    """A table cell: floats with 3 significant digits (at least), ``None`` as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        magnitude = abs(value)
        if magnitude >= 100:
            return f"{value:,.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def timers_label(scale: float) -> str:
    """How a table title states the timers it was measured at: ``timers × 0.1``, or
    ``production timers`` at scale 1."""
    return "production timers" if scale == 1 else f"timers × {scale:g}"


def wait_until(
    condition: Callable[[], bool],
    timeout_seconds: float,
    *,
    every_seconds: float = 0.05,
    what: str = "condition",
) -> float:
    """Poll ``condition`` until true; returns the seconds waited. Raises ``TimeoutError``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_seconds:
            raise TimeoutError(f"{what} not met within {timeout_seconds:.1f} s")
        time.sleep(every_seconds)
    return time.monotonic() - start


def _read(path: str) -> str:
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        return f.read()
    return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> float:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024 / 1024
    return math.nan


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def machine_description() -> list[str]:
    """Lines describing where the numbers were measured (CPU, cores, memory, OS, versions)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    packages = ", ".join(
        f"{p} {_version(p)}" for p in ("websockets", "boto3", "moto", "uvloop", "orjson")
    )
    return [
        f"CPU: {_cpu_model()}, {usable} usable of {os.cpu_count()} vCPUs; "
        f"memory {_memory_gib():.1f} GiB; load average at start {load[0]:.2f}",
        f"OS: {platform.system()} {platform.release()} ({platform.machine()}); "
        f"Python {platform.python_version()} ({platform.python_implementation()})",
        f"Packages: {packages}",
        f"Open-file limit: {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}",
    ]


def write_results(path: Path, header: Sequence[str], tables: Sequence[Table]) -> None:
    """Write the header lines and every table as one markdown document (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(header) + "\n\n" + "\n\n".join(t.to_markdown() for t in tables) + "\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@contextlib.contextmanager
def section_timer(progress: Progress, name: str) -> Iterator[None]:
    """Announce a section on the progress line and report how long it took."""
    progress.section(name)
    start = time.monotonic()
    yield
    progress.update(f"done in {time.monotonic() - start:.0f} s", force=True)
    progress.clear()
