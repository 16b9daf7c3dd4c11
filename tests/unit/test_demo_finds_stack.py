"""``make demo`` finds the running stack as the CLI finds its API: ``STREAMLEASE_API_URL``
first (the local API's ``/local/stack`` page says where that stack keeps its files), then the
state directory; when the URL names no local stack it says what to set and starts nothing."""

from __future__ import annotations

import io
import json
import os
import re
import socket
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from local.api_adapter import ApiAdapter, serving
from local.demo import DemoError, StackHandle
from local.gateway_events import Page, load_resources
from local.stack_pages import stack_pages
from streamlease.settings import Settings


def no_function(event: dict[str, Any], context: Any) -> Mapping[str, Any]:
    return {"statusCode": 200, "headers": {}, "body": "{}"}


def local_api(pages: dict[str, Page]) -> AbstractContextManager[str]:
    return serving(ApiAdapter(no_function, load_resources(), pages=pages))


def write_stack_file(state_dir: Path) -> dict[str, Any]:
    info = {
        "pid": os.getpid(),  # a live process: the file describes a running stack
        "api_url": "http://127.0.0.1:18080",
        "state_dir": str(state_dir),
        "sink_dir": str(state_dir / "sink"),
        "workers": [{"pid": 4242}],
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.json").write_text(json.dumps(info))
    return info


def handle(tmp_path: Path, api_url: str) -> StackHandle:
    """The demo's view, with a state directory of its own that holds no stack."""
    settings = Settings(api_url=api_url, local_state_dir=str(tmp_path / "default"))
    return StackHandle(settings, io.StringIO())


def test_the_stack_the_api_url_names_is_used_whatever_its_state_directory(
    tmp_path: Path,
) -> None:
    """A stack on other ports and another state directory, found through the URL alone."""
    elsewhere = tmp_path / "elsewhere"
    info = write_stack_file(elsewhere)
    with local_api(stack_pages(Settings(local_state_dir=str(elsewhere)))) as url:
        stack = handle(tmp_path, url)
        stack.ensure_running()
        assert stack.info == info
        assert stack.local_pids() == {4242}
    assert not stack.started_here


def test_a_url_nothing_answers_says_what_to_set_and_starts_nothing(tmp_path: Path) -> None:
    """No API at the URL: the error names the variable and its value; no stack is started on
    the default ports behind the user's back."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stack = handle(tmp_path, url)
    with pytest.raises(DemoError, match=re.escape(f"no API answers at STREAMLEASE_API_URL={url}")):
        stack.ensure_running()
    assert not stack.started_here
    assert not (tmp_path / "default").exists()


def test_an_api_that_is_not_a_local_stack_is_refused(tmp_path: Path) -> None:
    """An API without the local page (AWS, or any other server): the demo refuses it."""
    refused = r"is not a local stack .*unset STREAMLEASE_API_URL"
    with local_api({}) as url, pytest.raises(DemoError, match=refused):
        handle(tmp_path, url).ensure_running()


def test_a_stack_still_starting_says_so(tmp_path: Path) -> None:
    """The page answers 503 until the stack has written its description."""
    starting = Settings(local_state_dir=str(tmp_path / "starting"))
    with local_api(stack_pages(starting)) as url, pytest.raises(DemoError, match="starting"):
        handle(tmp_path, url).ensure_running()
