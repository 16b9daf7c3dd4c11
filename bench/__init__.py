"""Benchmarks: ``python -m bench [--quick]`` (``make bench``) prints markdown tables and writes
them, with a description of the machine, to ``bench/results/latest.md``.

Sections (each measures our defaults and the reference preset side by side, in one run):

- ``failover``: unowned time after kill -9 / kill -9 + reaper / SIGTERM, stop and start latency;
- ``throughput``: one worker against a bare websockets client on the same simulator;
- ``write_cost``: DynamoDB write requests and write units per stream-hour, in dollars;
- ``scale``: streams one worker holds with every renewal on time, CPU per renewal and message.

Nothing here asserts anything about speed; the tests only prove the harness runs.
"""
