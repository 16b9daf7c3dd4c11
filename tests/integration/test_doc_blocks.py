"""The documentation's tested shell blocks (``<!-- tested -->``, collected by
tests/docs/doc_blocks.py) run in order, as a user types them, against one local stack started
as ``make run`` starts it.

Each block runs in ``bash -e`` with the virtualenv's ``bin`` first on ``PATH`` (what ``source
.venv/bin/activate`` does, as the quickstart says), in a scratch directory that stands for the
checkout (the files a recipe writes land there; ``.venv`` in it is this virtualenv and ``local`` is
found through ``PYTHONPATH``, as both are from the checkout), with the stack's ports in place of
the defaults the docs show (8765, 8080). After each block the test waits, as a user watching
``streamlease watch`` would, until every started stream is held and delivering; a block that fails,
or a stream that never delivers, fails the test and names the block.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_stack_run import REPO, WAIT, StackRun, running_stack, wait_until

sys.path.insert(0, str(REPO / "tests" / "docs"))
from doc_blocks import Block, marked_blocks

pytestmark = pytest.mark.slow

BLOCK_TIMEOUT = 120.0
DOC_PORTS = {"upstream": "127.0.0.1:8765", "api": "127.0.0.1:8080"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRun]:
    with running_stack(tmp_path_factory.mktemp("docs-stack"), workers=2) as run:
        yield run


def as_typed(block: Block, stack: StackRun) -> str:
    """The block's text with the stack's own ports for the defaults the docs show."""
    ports = {
        "upstream": f"127.0.0.1:{stack.env['STREAMLEASE_LOCAL_UPSTREAM_PORT']}",
        "api": f"127.0.0.1:{stack.env['STREAMLEASE_LOCAL_API_PORT']}",
    }
    text = block.text
    for name, shown in DOC_PORTS.items():
        text = text.replace(shown, ports[name])
    return text


def user_env(stack: StackRun) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = dict(stack.env)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    env["PYTHONPATH"] = str(REPO)
    return env


def started(stack: StackRun) -> list[dict[str, Any]]:
    listing = stack.cli_json("ls", "--state", "STARTED")
    return list(listing["streams"])


def not_delivering(stack: StackRun) -> list[str]:
    """Started streams not yet held, connected and past their first message."""
    return [
        f"{s['id']} ({s.get('connection_state')}, last seq {s.get('last_seq')})"
        for s in started(stack)
        if not (
            s.get("owner")
            and s.get("connection_state") == "connected"
            and (s.get("last_seq") or 0) > 0
        )
    ]


def test_every_tested_block_runs_in_order_against_the_local_stack(
    stack: StackRun, tmp_path: Path
) -> None:
    blocks = marked_blocks()
    assert len(blocks) >= 8, [b.where for b in blocks]
    env = user_env(stack)
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    for block in blocks:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", as_typed(block, stack)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, (
            f"{block.where} exited {done.returncode}:\n{block.text}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
        wait_until(
            lambda: not not_delivering(stack),
            WAIT,
            f"every started stream delivering after {block.where}",
            stack,
        )
