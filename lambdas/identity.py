"""Who is calling: the IAM identity API Gateway puts in the request context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

ANONYMOUS: Final = "anonymous"
MAX_IDENTITY_CHARS: Final = 512


def caller_identity(event: Mapping[str, Any]) -> str:
    """The caller's IAM ARN (``requestContext.identity.userArn``), else its ``caller`` id.

    ``anonymous`` when the request carries neither (an API without IAM auth). Recorded as
    ``created_by`` / ``updated_by``; capped at 512 characters.
    """
    context = event.get("requestContext")
    identity = context.get("identity") if isinstance(context, Mapping) else None
    if isinstance(identity, Mapping):
        for key in ("userArn", "caller"):
            value = identity.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()[:MAX_IDENTITY_CHARS]
    return ANONYMOUS
