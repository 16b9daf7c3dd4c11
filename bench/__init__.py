"""Benchmarks: ``python -m bench [--quick]`` (``make bench``) prints markdown tables and writes
them, with a description of the machine, to ``bench/results/latest.md``.

Sections (each runs its presets side by side in one run, see :mod:`bench.context`):

- ``failover``: unowned time after kill -9 / kill -9 + reaper / SIGTERM, stop and start
  latency, duplicates per takeover (sessions, per-stream, reference);
- ``throughput``: one worker against a bare websockets client on the same simulator;
- ``write_cost``: DynamoDB requests, write and read units per stream-hour at 25 / 50 / 100
  streams per worker, in dollars (sessions, per-stream);
- ``scale``: streams one worker holds with every renewal on time, worker CPU per held idle
  stream, streams per vCPU (sessions, per-stream).

Nothing here asserts anything about speed; the tests only prove the harness runs.
"""
