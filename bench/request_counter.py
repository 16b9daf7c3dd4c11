"""Count the DynamoDB requests a process actually sends, with their write and read units.

:meth:`RequestCounter.install` hooks every botocore client created afterwards in this process
(``before-parameter-build`` keeps the request's parameters, ``before-send`` counts HTTP attempts
including retries, ``after-call`` sees the outcome). ``python -m bench.request_counter
--counts-file F -- [worker args]`` runs the worker (``python -m worker``) with the counter
installed and rewrites ``F`` (JSON) every half second, so even a killed worker leaves its counts.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import botocore.session

from bench.write_units import (
    READ_OPERATIONS,
    WRITE_OPERATIONS,
    IndexMembership,
    changed_attributes,
    read_units,
    write_cost,
)
from streamlease.indexes import INDEXES, IndexSpec
from streamlease.schema import PK, STREAM_PREFIX, WORKER_PREFIX, StreamAttr

_PARAMS_KEY = "bench_request_params"


class RequestCounter:
    """Thread-safe counts of DynamoDB requests by operation and outcome, with units."""

    def __init__(self, indexes: Iterable[IndexSpec] = INDEXES) -> None:
        """``indexes``: the table's indexes the write units are counted against."""
        self._lock = threading.Lock()
        self._membership = IndexMembership(indexes)
        self.requests: Counter[str] = Counter()
        """Logical calls by ``"<Operation> ok|failed"`` (failed: an error answer)."""
        self.by_target: Counter[str] = Counter()
        """Logical calls by ``"<Operation> <target>"``: target ``stream``/``worker`` item or
        the index queried (``table`` for a query of the table itself)."""
        self.write_units_by_target: Counter[str] = Counter()
        """Write units (table + indexes) by ``stream``/``worker`` item."""
        self.write_units_by_request: Counter[str] = Counter()
        """Write units (table + indexes) by ``"<Operation> <target>"``, as :attr:`by_target`."""
        self.index_units_by_request: Counter[str] = Counter()
        """The index part of :attr:`write_units_by_request`."""
        self.expiry_writes_by_request: Counter[str] = Counter()
        """Successful updates that set a lease's expiry (a renewal; other writes to the item,
        like its progress counters or connection state, do not)."""
        self.read_units_by_request: defaultdict[str, float] = defaultdict(float)
        """Read units by ``"<Operation> <target>"``."""
        self.read_bytes_by_request: Counter[str] = Counter()
        """Bytes of the answers to reads by ``"<Operation> <target>"`` (what units follow)."""
        self.attempts: Counter[str] = Counter()
        """HTTP attempts by operation (retries included)."""
        self.write_units: Counter[str] = Counter()
        """Write units by ``"table"`` and index name."""
        self.read_units = 0.0

    # --- hooks -----------------------------------------------------------------------------

    def attach(self, client: Any) -> None:
        """Count the DynamoDB requests of one botocore client (others are ignored)."""
        if client.meta.service_model.service_name != "dynamodb":
            return
        events = client.meta.events
        events.register("before-parameter-build.dynamodb", self._keep_params)
        events.register("before-send.dynamodb", self._count_attempt)
        events.register("after-call.dynamodb", self._count_call)

    def install(self) -> None:
        """Attach to every client any botocore session creates from now on in this process."""
        original = botocore.session.Session.create_client
        counter = self

        def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
            client = original(self, *args, **kwargs)
            counter.attach(client)
            return client

        setattr(botocore.session.Session, "create_client", create_client)  # noqa: B010

    def _keep_params(self, params: Any, context: Any, **_: Any) -> None:
        context[_PARAMS_KEY] = dict(params)

    def _count_attempt(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        with self._lock:
            self.attempts[target.rsplit(".", 1)[-1] or "unknown"] += 1

    def _count_call(
        self, http_response: Any, parsed: Any, model: Any, context: Any, **_: Any
    ) -> None:
        operation = model.name
        params = context.get(_PARAMS_KEY, {})
        ok = http_response is not None and http_response.status_code < 300
        code = (parsed or {}).get("Error", {}).get("Code", "") if not ok else ""
        target = _target(params)
        request = f"{operation} {target}"
        with self._lock:
            self.requests[f"{operation} {'ok' if ok else 'failed'}"] += 1
            self.by_target[request] += 1
            if operation in WRITE_OPERATIONS and (ok or code == "ConditionalCheckFailedException"):
                cost = write_cost(operation, params, ok, self._membership)
                self.write_units["table"] += cost.base
                for name, units in cost.index.items():
                    self.write_units[name] += units
                self.write_units_by_target[target] += cost.total
                self.write_units_by_request[request] += cost.total
                self.index_units_by_request[request] += cost.total - cost.base
                if ok and _sets_expiry(params):
                    self.expiry_writes_by_request[request] += 1
            elif operation in READ_OPERATIONS and ok:
                size = len(http_response.content or b"")
                read = read_units(operation, params, size)
                self.read_units += read
                self.read_units_by_request[request] += read
                self.read_bytes_by_request[request] += size

    # --- results ---------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The counts so far as plain JSON-able data, with ``mono``: when they were taken
        (``time.monotonic()``, one clock for every process of a Linux machine)."""
        with self._lock:
            return {
                "mono": time.monotonic(),
                "requests": dict(self.requests),
                "by_target": dict(self.by_target),
                "write_units_by_target": dict(self.write_units_by_target),
                "write_units_by_request": dict(self.write_units_by_request),
                "index_units_by_request": dict(self.index_units_by_request),
                "expiry_writes_by_request": dict(self.expiry_writes_by_request),
                "read_units_by_request": dict(self.read_units_by_request),
                "read_bytes_by_request": dict(self.read_bytes_by_request),
                "attempts": dict(self.attempts),
                "write_units": dict(self.write_units),
                "read_units": self.read_units,
            }

    def dump(self, path: Path) -> None:
        """Write :meth:`snapshot` to ``path`` atomically."""
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.snapshot()), encoding="utf-8")
        tmp.replace(path)

    def dump_every(self, path: Path, seconds: float) -> threading.Event:
        """Rewrite ``path`` every ``seconds`` on a daemon thread; set the returned event to stop."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(seconds):
                self.dump(path)
            self.dump(path)

        threading.Thread(target=loop, name="request-counter", daemon=True).start()
        return stop


def write_requests(snapshot: dict[str, Any]) -> int:
    """Write requests (any outcome) in a :meth:`RequestCounter.snapshot`."""
    return sum(
        n for key, n in snapshot.get("requests", {}).items() if key.split()[0] in WRITE_OPERATIONS
    )


COUNTED_FIELDS = (
    "requests",
    "by_target",
    "write_units_by_target",
    "write_units_by_request",
    "index_units_by_request",
    "expiry_writes_by_request",
    "read_units_by_request",
    "read_bytes_by_request",
    "attempts",
    "write_units",
)
"""The per-key counts of a :meth:`RequestCounter.snapshot` (``read_units`` is one number)."""


def diff(later: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``later − earlier`` of two snapshots (counts taken in a steady window), with
    ``seconds`` between them when both say when they were taken."""
    out: dict[str, Any] = {}
    for field in COUNTED_FIELDS:
        a, b = later.get(field, {}), earlier.get(field, {})
        out[field] = {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}
    out["read_units"] = later.get("read_units", 0.0) - earlier.get("read_units", 0.0)
    if "mono" in later and "mono" in earlier:
        out["seconds"] = later["mono"] - earlier["mono"]
    return out


def _sets_expiry(params: Any) -> bool:
    """Whether an update sets ``lease_expires_at_ms``."""
    expression = str(params.get("UpdateExpression", ""))
    set_attrs, _ = changed_attributes(expression, params.get("ExpressionAttributeNames"))
    return StreamAttr.LEASE_EXPIRES_AT_MS in set_attrs


def _target(params: Any) -> str:
    """What a request is about: a ``stream`` or ``worker`` item, or the index it queries."""
    if "IndexName" in params:
        return str(params["IndexName"])
    key = params.get("Key") or params.get("Item") or {}
    value = key.get(PK, "")
    if isinstance(value, dict):
        value = next(iter(value.values()), "")
    if str(value).startswith(STREAM_PREFIX):
        return "stream"
    if str(value).startswith(WORKER_PREFIX):
        return "worker"
    return "table"


def main(argv: list[str] | None = None) -> None:
    """Run ``python -m worker`` with a request counter dumping to ``--counts-file``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts-file", required=True, type=Path)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between dumps")
    parser.add_argument("worker_args", nargs="*")
    args = parser.parse_args(argv)
    counter = RequestCounter()
    counter.install()
    stop = counter.dump_every(args.counts_file, args.every)
    sys.argv = ["worker", *args.worker_args]
    try:
        runpy.run_module("worker", run_name="__main__", alter_sys=True)
    finally:
        stop.set()
        counter.dump(args.counts_file)


if __name__ == "__main__":
    main()
