"""Our moto launcher (local.moto_server): atomic where stock moto is not, never stalled by a long
poll, a DynamoDB fault switch, and a clean process life cycle."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from local.moto_process import (
    MotoProcess,
    MotoStartError,
    dynamodb_fault,
    held_writes,
    hold_dynamodb_writes,
    set_dynamodb_down,
    set_dynamodb_fault,
    set_dynamodb_slow,
)
from local.moto_server import EXIT_PORT_IN_USE, FAULTS_PATH
from local.worker_process import REPO_ROOT
from streamlease import aws
from streamlease.errors import StoreError
from streamlease.schema import PK

pytestmark = pytest.mark.slow


def key(value: str) -> dict[str, Any]:
    return {PK: {"S": value}}


def one_shot_client(service: str, settings: Any, timeout_seconds: float = 5.0) -> Any:
    """A client that does not retry, so a fault shows on the first call."""
    return boto3.client(
        service,
        region_name=settings.aws_region,
        endpoint_url=settings.aws_endpoint_url,
        config=Config(
            connect_timeout=timeout_seconds,
            read_timeout=timeout_seconds,
            retries={"mode": "standard", "total_max_attempts": 1},
        ),
    )


class LongPoll(threading.Thread):
    """A ReceiveMessage that waits ``seconds`` on an empty queue, in the background."""

    def __init__(self, settings: Any, seconds: int) -> None:
        super().__init__(daemon=True)
        self._sqs = aws.client("sqs", settings, read_timeout_seconds=seconds + 10)
        self._queue = settings.queue_url
        self._seconds = seconds
        self.waited_seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        self._sqs.receive_message(QueueUrl=self._queue, WaitTimeSeconds=self._seconds)
        self.waited_seconds = time.monotonic() - started


# --- no stalls -------------------------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.alone  # answered within a second: the evidence is a time
def test_dynamodb_answers_while_an_sqs_long_poll_waits(aws_settings, dynamodb):
    """A get_item during a 3 s long poll answers at once, not when the poll ends."""
    dynamodb.put_item(TableName=aws_settings.table_name, Item=key("k"))
    poll = LongPoll(aws_settings, seconds=3)
    poll.start()
    time.sleep(0.5)  # the poll is now waiting on the server

    started = time.monotonic()
    item = dynamodb.get_item(TableName=aws_settings.table_name, Key=key("k"))
    answered_in = time.monotonic() - started

    assert item["Item"] == key("k")
    assert answered_in < 1.0
    assert poll.is_alive(), "the long poll should still be waiting"
    poll.join()
    assert poll.waited_seconds >= 2.5


@pytest.mark.serial
@pytest.mark.alone  # answered within a second: the evidence is a time
def test_other_sqs_calls_answer_while_a_long_poll_waits(aws_settings):
    """The SQS backend lock is not held during the wait: another queue's send answers at once."""
    sqs = aws.client("sqs", aws_settings)
    other = sqs.create_queue(QueueName=aws_settings.table_name + "-other")["QueueUrl"]
    poll = LongPoll(aws_settings, seconds=3)
    poll.start()
    time.sleep(0.5)

    started = time.monotonic()
    sqs.send_message(QueueUrl=other, MessageBody="hello")
    answered_in = time.monotonic() - started

    assert answered_in < 1.0
    assert poll.is_alive()


@pytest.mark.serial
@pytest.mark.alone  # answered within a second: the evidence is a time
def test_a_long_poll_returns_as_soon_as_a_message_arrives(aws_settings):
    """Waiting outside the lock still wakes on a send to the polled queue."""
    poll = LongPoll(aws_settings, seconds=5)
    poll.start()
    time.sleep(0.5)

    aws.client("sqs", aws_settings).send_message(QueueUrl=aws_settings.queue_url, MessageBody="x")
    poll.join()

    assert poll.waited_seconds < 3.0


# --- atomicity -------------------------------------------------------------------------------


def test_concurrent_consumers_never_receive_a_message_twice_within_its_visibility(aws_settings):
    """8 long-polling consumers woken by 100 undeleted messages: each delivered exactly once."""
    sqs = aws.client("sqs", aws_settings)
    received: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    sending_done = threading.Event()

    def consume() -> None:
        client = aws.client("sqs", aws_settings, read_timeout_seconds=10)
        while True:
            messages = client.receive_message(
                QueueUrl=aws_settings.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
            with lock:
                received.update(m["Body"] for m in messages)
            if not messages and sending_done.is_set():
                return

    consumers = [threading.Thread(target=consume) for _ in range(8)]
    for consumer in consumers:
        consumer.start()
    time.sleep(0.5)  # every consumer is waiting in a long poll: each send wakes all of them
    sent = set()
    for batch in range(20):
        entries = [{"Id": str(i), "MessageBody": f"m-{batch}-{i}"} for i in range(5)]
        sqs.send_message_batch(QueueUrl=aws_settings.queue_url, Entries=entries)
        sent.update(e["MessageBody"] for e in entries)
    sending_done.set()
    for consumer in consumers:
        consumer.join()

    assert set(received) == sent
    assert [body for body, count in received.items() if count > 1] == []


def test_a_failed_transaction_does_not_erase_concurrent_writes(aws_settings, dynamodb):
    """moto restores a table copy when a transaction fails; no acknowledged put may be lost."""
    table = aws_settings.table_name
    dynamodb.put_item(TableName=table, Item=key("guard"))
    stop = threading.Event()

    def fail_transactions() -> None:
        while not stop.is_set():
            with pytest.raises(ClientError):
                dynamodb.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": table,
                                "Item": key("guard"),
                                "ConditionExpression": f"attribute_not_exists({PK})",
                            }
                        }
                    ]
                )

    failing = threading.Thread(target=fail_transactions)
    failing.start()
    try:
        for i in range(100):
            dynamodb.put_item(TableName=table, Item=key(f"put-{i}"))
    finally:
        stop.set()
        failing.join()

    missing = [
        i
        for i in range(100)
        if "Item"
        not in dynamodb.get_item(TableName=table, Key=key(f"put-{i}"), ConsistentRead=True)
    ]
    assert missing == []


# --- the fault switch ------------------------------------------------------------------------


def test_dynamodb_down_fails_calls_without_applying_them_and_recovers(aws_settings, store):
    """While down, DynamoDB answers 503 and applies nothing; once up, it works again."""
    endpoint = aws_settings.aws_endpoint_url
    client = one_shot_client("dynamodb", aws_settings)
    table = aws_settings.table_name

    set_dynamodb_down(endpoint)
    try:
        assert dynamodb_fault(endpoint) == "down"
        with pytest.raises(ClientError) as refused:
            client.put_item(TableName=table, Item=key("during"))
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        with pytest.raises(StoreError):
            store.read("anything")
    finally:
        set_dynamodb_down(endpoint, False)

    assert dynamodb_fault(endpoint) == "up"
    assert "Item" not in client.get_item(TableName=table, Key=key("during"), ConsistentRead=True)
    client.put_item(TableName=table, Item=key("after"))
    assert client.get_item(TableName=table, Key=key("after"))["Item"] == key("after")


def test_sqs_keeps_working_while_dynamodb_is_down(aws_settings):
    """The fault is DynamoDB's only: commands still flow."""
    sqs = aws.client("sqs", aws_settings)
    set_dynamodb_down(aws_settings.aws_endpoint_url)
    try:
        sqs.send_message(QueueUrl=aws_settings.queue_url, MessageBody="still here")
        messages = sqs.receive_message(QueueUrl=aws_settings.queue_url).get("Messages", [])
    finally:
        set_dynamodb_down(aws_settings.aws_endpoint_url, False)

    assert [m["Body"] for m in messages] == ["still here"]


def test_drop_closes_dynamodb_connections_without_an_answer(aws_settings):
    """ "drop": the client sees its connection closed, as in a network failure."""
    client = one_shot_client("dynamodb", aws_settings)
    set_dynamodb_fault(aws_settings.aws_endpoint_url, "drop")
    try:
        with pytest.raises(ConnectionClosedError):
            client.list_tables()
    finally:
        set_dynamodb_fault(aws_settings.aws_endpoint_url, "up")
    # Answered again once lifted (a table lookup: list_tables pages, and other tests add tables).
    table = client.describe_table(TableName=aws_settings.table_name)["Table"]
    assert table["TableName"] == aws_settings.table_name


def test_blackhole_leaves_dynamodb_calls_unanswered_until_lifted(aws_settings):
    """ "blackhole": calls time out on the client side, as when DynamoDB is unreachable."""
    client = one_shot_client("dynamodb", aws_settings, timeout_seconds=0.5)
    table = aws_settings.table_name
    set_dynamodb_fault(aws_settings.aws_endpoint_url, "blackhole")
    try:
        with pytest.raises(ReadTimeoutError):
            client.put_item(TableName=table, Item=key("lost"))
    finally:
        set_dynamodb_fault(aws_settings.aws_endpoint_url, "up")
    assert "Item" not in client.get_item(TableName=table, Key=key("lost"), ConsistentRead=True)


@pytest.mark.serial
@pytest.mark.alone  # answered within a second: the evidence is a time
def test_a_brownout_slows_every_dynamodb_call_and_still_applies_it(aws_settings):
    """ "slow": each call waits the delay (calls in parallel wait side by side), then applies;
    a client whose timeout is shorter gives up while the write lands anyway."""
    table = aws_settings.table_name
    patient = one_shot_client("dynamodb", aws_settings, timeout_seconds=5.0)
    hasty = one_shot_client("dynamodb", aws_settings, timeout_seconds=0.2)
    set_dynamodb_slow(aws_settings.aws_endpoint_url, 0.6)
    try:
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda n: patient.put_item(TableName=table, Item=key(f"k{n}")), range(4)))
        took = time.monotonic() - started
        with pytest.raises(ReadTimeoutError):
            hasty.put_item(TableName=table, Item=key("late"))
    finally:
        set_dynamodb_fault(aws_settings.aws_endpoint_url, "up")
    assert 0.6 <= took < 2.0, "four calls waited side by side, not one after another"
    wait_for(lambda: "Item" in patient.get_item(TableName=table, Key=key("late"))), "landed"


def test_a_held_write_lands_after_its_client_gave_up(aws_settings):
    """ "hold": the next matching request waits, then applies; others pass meanwhile."""
    table = aws_settings.table_name
    client = one_shot_client("dynamodb", aws_settings, timeout_seconds=0.3)
    # The server (and its count) is shared with earlier tests: count from here.
    applied_before = held_writes(aws_settings.aws_endpoint_url)["applied"]
    hold_dynamodb_writes(aws_settings.aws_endpoint_url, ["PutItem", "held-key"], 1.0)
    with pytest.raises(ReadTimeoutError):
        client.put_item(TableName=table, Item=key("held-key"))
    client.put_item(TableName=table, Item=key("other"))  # not held
    assert "Item" not in client.get_item(TableName=table, Key=key("held-key"), ConsistentRead=True)
    wait_for(lambda: held_writes(aws_settings.aws_endpoint_url)["applied"] > applied_before)
    assert "Item" in client.get_item(TableName=table, Key=key("held-key"), ConsistentRead=True)


def wait_for(condition: Any, timeout_seconds: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_an_unknown_fault_mode_is_refused(moto_server):
    """The switch accepts only its modes, on the client side and on the server side."""
    with pytest.raises(ValueError, match="unknown fault mode"):
        set_dynamodb_fault(moto_server.endpoint_url, "sideways")
    request = urllib.request.Request(
        moto_server.endpoint_url + FAULTS_PATH, data=b'{"dynamodb": "sideways"}', method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert dynamodb_fault(moto_server.endpoint_url) == "up"


# --- process life cycle ----------------------------------------------------------------------


def test_a_port_in_use_is_a_one_line_error_and_exit_status_2(moto_server):
    """Starting on a taken port fails fast and says why."""
    result = subprocess.run(
        [sys.executable, "-m", "local.moto_server", "--port", str(moto_server.port)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == EXIT_PORT_IN_USE
    assert result.stderr.strip().splitlines() == [
        f"moto server: cannot listen on 127.0.0.1:{moto_server.port}: port in use"
    ]
    assert result.stdout == ""


def test_start_reports_a_port_in_use(moto_server):
    """MotoProcess.start raises with the server's own explanation."""
    with pytest.raises(MotoStartError, match="port in use"):
        MotoProcess.start(port=moto_server.port)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_server_stops_cleanly_on_a_signal(signum):
    """SIGTERM or SIGINT (Ctrl-C) ends the server with status 0."""
    server = MotoProcess.start()
    try:
        os.kill(server.pid, signum)
        deadline = time.monotonic() + 10
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.returncode == 0
    finally:
        server.stop()


def test_the_server_exits_when_the_process_that_started_it_dies():
    """A MotoProcess child does not outlive a parent killed with SIGKILL."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from local.moto_process import MotoProcess; "
            "print(MotoProcess.start().pid, flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()

    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_split_shard_keeps_its_records_and_new_ones_go_to_its_children(aws_settings):
    """As Kinesis does: after SplitShard the parent is closed with what it held, and a record
    written then lands on the open child whose range holds its key (stock moto kept writing to
    the closed parent and moved its records)."""
    kinesis = aws.client("kinesis", aws_settings)
    name = f"{aws_settings.kinesis_stream_name}-split"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=name)
    (parent,) = kinesis.list_shards(StreamName=name)["Shards"]
    before = kinesis.put_record(StreamName=name, Data=b"before", PartitionKey="k")
    middle = (int(parent["HashKeyRange"]["EndingHashKey"]) + 1) // 2
    kinesis.split_shard(
        StreamName=name, ShardToSplit=parent["ShardId"], NewStartingHashKey=str(middle)
    )
    after = kinesis.put_record(StreamName=name, Data=b"after", PartitionKey="k")
    shards = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=name)["Shards"]}
    assert before["ShardId"] == parent["ShardId"]
    assert after["ShardId"] != parent["ShardId"]
    assert shards[after["ShardId"]].get("ParentShardId") == parent["ShardId"]
    assert "EndingSequenceNumber" in shards[parent["ShardId"]]["SequenceNumberRange"]

    def data(shard_id: str) -> list[bytes]:
        iterator = kinesis.get_shard_iterator(
            StreamName=name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        return [r["Data"] for r in kinesis.get_records(ShardIterator=iterator)["Records"]]

    assert data(parent["ShardId"]) == [b"before"]
    assert data(after["ShardId"]) == [b"after"]
    iterator = kinesis.get_shard_iterator(
        StreamName=name, ShardId=parent["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    assert kinesis.get_records(ShardIterator=iterator).get("NextShardIterator") is None
