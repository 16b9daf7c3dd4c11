"""``python -m local`` (``make run``): the whole system on this machine until Ctrl-C.

Exit status: 0 after Ctrl-C (or SIGTERM) and a clean teardown, 1 when the stack could not start
or a part of it died, 2 for a setting that does not parse. A second Ctrl-C hurries the teardown.
"""

from __future__ import annotations

import shlex
import signal
import sys
from types import FrameType
from typing import Final

from local.dashboard import PAGE_PATH
from local.events import Console
from local.stack import LocalStack, StackError
from streamlease.errors import ConfigError
from streamlease.settings import Settings, env_name

EXIT_FAILED: Final = 1
EXIT_CONFIG: Final = 2


def banner(stack: LocalStack) -> list[str]:
    """What is running where, and what to type next."""
    s = stack.settings
    paths = stack.paths
    example = "demo-1"
    default_api = Settings().local_api_port == s.local_api_port and s.local_host == "127.0.0.1"
    lines = [
        "",
        "streamlease is running locally (Ctrl-C stops everything)",
        f"  API        {stack.api_url}   (lambdas/api.py behind an API Gateway proxy adapter)",
        f"  dashboard  {stack.api_url}{PAGE_PATH}   (the CloudWatch dashboard's graphs)",
        f"  upstream   {stack.upstream_url}/<stream id>?rate=<msgs/s>   (simulator)",
        f"  moto       {s.aws_endpoint_url}   table {s.table_name}",
        f"  workers    {s.local_workers}, replaced {s.local_respawn_seconds:g} s after one dies",
        (
            f"  files      sink {paths.sink_dir}/<stream id>.jsonl, logs {paths.logs_dir}/"
            if s.sink == "file"
            else f"  sink       Kinesis stream {s.kinesis_stream_name} on moto"
            f" (streamlease consume reads it), logs {paths.logs_dir}/"
        ),
        "",
        "Next, in a second terminal:",
        "  source .venv/bin/activate",
    ]
    if not default_api:
        lines.append(f"  export {env_name('api_url')}={stack.api_url}")
    example_url = shlex.quote(f"{stack.upstream_url}/{example}?rate=5")  # `?` globs in zsh
    lines += [
        f"  streamlease start {example} {example_url}",
        "  streamlease watch          # live view; Ctrl-C leaves it",
        f"  streamlease get {example}",
        f"  streamlease stop {example}",
        "  make demo                  # 20 streams, a worker killed, another rolled, a report",
        "",
    ]
    return lines


def main() -> int:
    """Run the stack in the foreground; returns the exit status."""
    console = Console(sys.stdout)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"local stack: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    stack = LocalStack(settings, console)
    starting = True

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stack.stop_requested.is_set():
            stack.hurry.set()
            return
        stack.stop_requested.set()
        if starting:
            raise KeyboardInterrupt  # leave the start-up wait; teardown follows in finally

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    status = 0
    try:
        stack.claim_state_dir()
        console.line("info", "starting moto, upstream simulator, API and workers")
        stack.start()
        starting = False
        for line in banner(stack):
            console.text(line)
        stack.run()
    except KeyboardInterrupt:
        pass
    except StackError as exc:
        console.line("failed", str(exc))
        status = EXIT_FAILED
    finally:
        starting = False
        if stack.holds_state_dir:  # else it refused to start and touched nothing
            console.line("info", "stopping: workers drain and hand off, then API, upstream, moto")
            stack.stop()
            console.line(
                "info",
                f"stopped; sink files and logs stay in {stack.paths.state_dir}/ "
                "(the next run moves them to previous/)",
            )
    return status


if __name__ == "__main__":
    sys.exit(main())
