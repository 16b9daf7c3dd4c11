"""Pages the local API serves beside the API's routes, about the stack itself.

``GET /local/stack`` is what the running stack wrote to its ``stack.json`` (where it listens,
its state directory, its processes): how ``make demo`` finds the stack that
``STREAMLEASE_API_URL`` names, whatever its state directory. A 503 while the stack is still
starting.
"""

from __future__ import annotations

from local.gateway_events import HttpRequest, HttpResponse, Page, json_response
from local.stack_files import StackPaths, read_stack_file
from streamlease.cli.client import LOCAL_STACK_PATH
from streamlease.settings import Settings


def stack_pages(settings: Settings) -> dict[str, Page]:
    """The local pages of the stack whose state directory ``settings`` name."""
    paths = StackPaths.for_settings(settings)

    def stack(request: HttpRequest) -> HttpResponse:
        info = read_stack_file(paths)
        if info is None:
            return json_response({"message": "the local stack is still starting"}, 503)
        return json_response(info)

    return {LOCAL_STACK_PATH: stack}
