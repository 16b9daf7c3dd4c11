"""``python -m local.upstream_sim``: the simulator in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal

from local.upstream_sim.knobs import DEFAULT_RATE
from local.upstream_sim.server import UpstreamSimulator
from streamlease.settings import Settings


async def _serve_forever(host: str, port: int, rate: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with UpstreamSimulator(host, port, default_rate=rate) as sim:
        print(f"upstream simulator ready on ws://{sim.host}:{sim.port}/<stream id>", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    """Serve in the foreground until SIGINT or SIGTERM; defaults follow the local stack's."""
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(prog="python -m local.upstream_sim", description=__doc__)
    parser.add_argument("--host", default=settings.local_host)
    parser.add_argument("--port", type=int, default=settings.local_upstream_port)
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="default msg/s")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve_forever(args.host, args.port, args.rate))
    else:
        uvloop.run(_serve_forever(args.host, args.port, args.rate))


if __name__ == "__main__":
    main()
