"""The consumer Lambda (``streamlease:consumer``): the sink's messages, fenced by lease epoch.

The default ``handler`` logs each message's place (stream id, epoch, seq; never its payload)
and counts it, which shows the consumer works end to end. To run your own code, write a module
beside this one that makes its own handler, and point the function at it::

    # lambdas/my_consumer.py
    from streamlease.consumer import ConsumedMessage
    from streamlease.consumer.lambda_handler import make_handler

    def deliver(message: ConsumedMessage) -> None:
        ...  # message.stream_id, .epoch, .seq, .payload (bytes), .payload_encoding

    handler = make_handler(deliver)

then set ``HANDLER`` in ``cdk/components/stream_consumer.py`` to ``lambdas.my_consumer.handler``
(the asset ships every module of ``lambdas/``). Raising from ``deliver`` reports the message's
record: it and the rest of its shard's batch are retried, and nothing after it is handed on
first (streamlease.consumer.lambda_handler).
"""

from __future__ import annotations

from aws_lambda_powertools import Logger

from streamlease.consumer import ConsumedMessage
from streamlease.consumer.lambda_handler import make_handler
from streamlease.telemetry import CONSUMER_SERVICE

logger = Logger(service=CONSUMER_SERVICE)


def log_message(message: ConsumedMessage) -> None:
    """Log where ``message`` is in its stream; nothing of its payload but its size."""
    logger.info(
        "message",
        extra={
            "stream_id": message.stream_id,
            "epoch": message.epoch,
            "seq": message.seq,
            "payload_bytes": len(message.payload),
        },
    )


handler = make_handler(log_message)
