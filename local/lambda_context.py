"""The Lambda context given to the real handlers when they run outside Lambda.

The local stack (the API adapter, the reaper and auditor it hosts), the test bed and the tests
call ``lambdas.*.handler`` in-process; Powertools' ``inject_lambda_context`` reads the function's
name, ARN, memory and request id from the context into every log line, so they need one. The
Lambda code itself never makes one up: on AWS the runtime passes the real context.
"""

from __future__ import annotations

import time
from typing import Final

from aws_lambda_powertools.utilities.typing import LambdaContext as PowertoolsLambdaContext

ACCOUNT_ID: Final = "000000000000"
"""The account of the local stack's fake ARNs."""
REGION: Final = "us-east-1"
FUNCTION_NAME: Final = "streamlease-local"


class LambdaContext(PowertoolsLambdaContext):
    """A Lambda context (the attributes Powertools and the handlers read) with a deadline."""

    def __init__(
        self,
        function_name: str = FUNCTION_NAME,
        *,
        aws_request_id: str = "local",
        timeout_seconds: float = 900.0,
        memory_limit_in_mb: int = 128,
    ) -> None:
        """``timeout_seconds``: the function's timeout, counted from now (Lambda's longest by
        default: nothing outside Lambda enforces one)."""
        self._function_name = function_name
        self._function_version = "$LATEST"
        self._invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{function_name}"
        )
        self._log_group_name = f"/aws/lambda/{function_name}"
        self._log_stream_name = "local"
        self._aws_request_id = aws_request_id
        self._memory_limit_in_mb = memory_limit_in_mb
        self._deadline = time.monotonic() + timeout_seconds

    # Powertools' stand-in declares this a static method; the runtime's context binds it.
    def get_remaining_time_in_millis(self) -> int:  # type: ignore[override]
        """Milliseconds left before the timeout given at creation (0 once it has passed)."""
        return max(int((self._deadline - time.monotonic()) * 1000), 0)
