"""The table layout and command format (streamlease.schema): keys, commands, CreateTable."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease.commands import Command, CommandType
from streamlease.indexes import (
    BY_OWNER,
    BY_SHARD_EXPIRY,
    BY_STATE,
    BY_STATE_EXPIRY,
    FLEET,
    INDEX_SHARDS,
    INDEXES,
    KEY_ATTRIBUTE_TYPES,
    LEGACY_BY_OWNER,
    MIGRATION_STAGES,
    create_table_kwargs,
    expiry_shard,
    expiry_shards,
)
from streamlease.schema import (
    PK,
    TOMBSTONE_KEEPS,
    Liveness,
    StreamAttr,
    WorkerAttr,
    stream_attributes,
    stream_id_of,
    stream_key,
    worker_id_of,
    worker_key,
)

ids = st.text(min_size=1, max_size=64)


# --- keys ------------------------------------------------------------------------------------


@given(stream_id=ids)
def test_stream_keys_round_trip(stream_id):
    """Any id survives key and back, including ids containing the prefix character."""
    assert stream_id_of(stream_key(stream_id)) == stream_id


@given(worker_id=ids)
def test_worker_keys_round_trip(worker_id):
    """Any worker id survives key and back."""
    assert worker_id_of(worker_key(worker_id)) == worker_id


def test_keys_carry_the_seed_prefixes():
    """The seed's key format is kept: CONN#<id> and WORKER#<id>."""
    assert stream_key("abc") == "CONN#abc"
    assert worker_key("w-1") == "WORKER#w-1"


@pytest.mark.parametrize("pk", ["WORKER#w-1", "conn#abc", "abc", ""])
def test_a_non_stream_key_is_not_parsed_as_a_stream(pk):
    """stream_id_of refuses keys of other item kinds."""
    with pytest.raises(ValueError, match="not a stream key"):
        stream_id_of(pk)


@pytest.mark.parametrize("pk", ["CONN#abc", "worker#w", ""])
def test_a_non_worker_key_is_not_parsed_as_a_worker(pk):
    """worker_id_of refuses keys of other item kinds."""
    with pytest.raises(ValueError, match="not a worker key"):
        worker_id_of(pk)


# --- commands --------------------------------------------------------------------------------


@given(
    kind=st.sampled_from(CommandType),
    stream_id=ids,
    generation=st.integers(0, 2**53),
    rebalance=st.booleans(),
)
def test_commands_round_trip_through_json(kind, stream_id, generation, rebalance):
    """from_json(to_json(c)) == c for every command type, id, generation and rebalance mark."""
    command = Command(type=kind, stream_id=stream_id, generation=generation, rebalance=rebalance)
    assert Command.from_json(command.to_json()) == command


def test_a_rebalance_handoff_is_marked_and_an_ordinary_one_is_not():
    """Only a shed carries the mark, so a command from an older worker reads as ordinary."""
    plain = json.loads(Command(CommandType.HANDOFF, "s1", 3).to_json())
    marked = json.loads(Command(CommandType.HANDOFF, "s1", 3, rebalance=True).to_json())
    assert "rebalance" not in plain
    assert marked["rebalance"] is True


def test_command_body_is_compact_versioned_json():
    """The wire format: one compact JSON object with a version field."""
    body = Command(CommandType.HANDOFF, "s1", 3).to_json()
    assert json.loads(body) == {"v": 1, "type": "HANDOFF", "stream_id": "s1", "generation": 3}
    assert " " not in body


VALID = {"v": 1, "type": "START", "stream_id": "s1", "generation": 2}
_MISSING = object()


def body_with(**changes: object) -> str:
    """A valid command body with fields changed, or removed when set to ``_MISSING``."""
    data = {**VALID, **changes}
    return json.dumps({k: v for k, v in data.items() if v is not _MISSING})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "not JSON"),
        ("{not json", "not JSON"),
        ("\x00", "not JSON"),
        ("[]", "not a JSON object"),
        ('"START"', "not a JSON object"),
        ("42", "not a JSON object"),
        ("null", "not a JSON object"),
        (body_with(v=_MISSING), "version"),
        (body_with(v=2), "version"),
        (body_with(v="1"), "version"),
        (body_with(v=True), "version"),
        (body_with(v=1.0), "version"),
        (body_with(stream_id=_MISSING), "stream_id"),
        (body_with(stream_id=""), "stream_id"),
        (body_with(stream_id=7), "stream_id"),
        (body_with(stream_id=None), "stream_id"),
        (body_with(generation=_MISSING), "generation"),
        (body_with(generation=-1), "generation"),
        (body_with(generation=1.5), "generation"),
        (body_with(generation="2"), "generation"),
        (body_with(generation=True), "generation"),
        (body_with(type=_MISSING), "type"),
        (body_with(type="start"), "type"),
        (body_with(type="STOP"), "type"),
        (body_with(type=None), "type"),
        (body_with(rebalance="yes"), "rebalance"),
        (body_with(rebalance=1), "rebalance"),
    ],
)
def test_malformed_commands_are_rejected(body, message):
    """Every malformed body is a ValueError (a poison message for the DLQ), saying what is wrong."""
    with pytest.raises(ValueError, match=message):
        Command.from_json(body)


def test_unknown_extra_fields_are_ignored():
    """A newer sender may add fields; the command still parses."""
    body = json.dumps({**VALID, "sent_by": "api", "trace": "x"})
    assert Command.from_json(body) == Command(CommandType.START, "s1", 2)


# --- table definition ------------------------------------------------------------------------


def test_table_is_keyed_by_pk_on_demand():
    """One partition key, no sort key, on-demand billing."""
    kwargs = create_table_kwargs("t")
    assert kwargs["TableName"] == "t"
    assert kwargs["KeySchema"] == [{"AttributeName": PK, "KeyType": "HASH"}]
    assert kwargs["BillingMode"] == "PAY_PER_REQUEST"


def test_attribute_definitions_are_exactly_the_key_attributes():
    """DynamoDB rejects definitions no key uses, and needs every key attribute defined."""
    kwargs = create_table_kwargs("t")
    used = {PK}
    for gsi in kwargs["GlobalSecondaryIndexes"]:
        used |= {key["AttributeName"] for key in gsi["KeySchema"]}
    defined = {d["AttributeName"]: d["AttributeType"] for d in kwargs["AttributeDefinitions"]}
    assert set(defined) == used
    assert defined == KEY_ATTRIBUTE_TYPES


def test_indexes_are_those_the_lease_protocol_queries():
    """by-shard-expiry (orphans, suspects), by-holder (what X holds, its stops, connection
    states), fleet, by-state (listing)."""
    gsis = {g["IndexName"]: g for g in create_table_kwargs("t")["GlobalSecondaryIndexes"]}
    assert set(gsis) == {index.name for index in INDEXES}

    orphans = gsis[BY_SHARD_EXPIRY.name]
    assert orphans["KeySchema"] == [
        {"AttributeName": StreamAttr.EXPIRY_SHARD, "KeyType": "HASH"},
        {"AttributeName": StreamAttr.LEASE_EXPIRES_AT_MS, "KeyType": "RANGE"},
    ]
    assert orphans["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": [StreamAttr.LEASE_OWNER, StreamAttr.LEASE_EPOCH],
    }

    owner = gsis[BY_OWNER.name]
    assert owner["KeySchema"] == [{"AttributeName": StreamAttr.LEASE_OWNER, "KeyType": "HASH"}]
    assert owner["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": [
            StreamAttr.LEASE_EPOCH,
            StreamAttr.LEASE_SLOT,
            StreamAttr.DESIRED_STATE,
            StreamAttr.GENERATION,
            StreamAttr.CONNECTION_STATE,
        ],
    }

    fleet = gsis[FLEET.name]
    assert fleet["KeySchema"] == [
        {"AttributeName": WorkerAttr.KIND, "KeyType": "HASH"},
        {"AttributeName": WorkerAttr.STARTED_AT_MS, "KeyType": "RANGE"},
    ]
    projected = set(fleet["Projection"]["NonKeyAttributes"])
    assert WorkerAttr.HB in projected and WorkerAttr.STATE in projected
    assert WorkerAttr.CHECKPOINTS not in projected, "peers re-read the fleet every second"

    listing = gsis[BY_STATE.name]
    assert listing["KeySchema"] == [
        {"AttributeName": StreamAttr.DESIRED_STATE, "KeyType": "HASH"},
        {"AttributeName": StreamAttr.STREAM_ID, "KeyType": "RANGE"},
    ]
    assert listing["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_a_migrating_table_changes_one_index_per_stage():
    """From the previous release's indexes to the current ones, one index created or dropped
    per stage (one per CloudFormation update), each stage a table CreateTable accepts."""
    previous = {BY_STATE_EXPIRY.name, LEGACY_BY_OWNER.name, FLEET.name, BY_STATE.name}
    names = [previous, *({i.name for i in stage} for stage in MIGRATION_STAGES)]
    names.append({i.name for i in INDEXES})
    for before, after in itertools.pairwise(names):
        assert len(before ^ after) == 1, (before, after)
    for stage in MIGRATION_STAGES:
        assert len(create_table_kwargs("t", stage)["GlobalSecondaryIndexes"]) == len(stage)


def test_by_holder_is_by_owner_with_the_connection_state():
    """Same key, so DynamoDB fills it from the items; the connection state besides."""
    assert (BY_OWNER.partition_key, BY_OWNER.sort_key) == (
        LEGACY_BY_OWNER.partition_key,
        LEGACY_BY_OWNER.sort_key,
    )
    assert set(BY_OWNER.projected or ()) - set(LEGACY_BY_OWNER.projected or ()) == {
        StreamAttr.CONNECTION_STATE
    }


@pytest.mark.parametrize("liveness", list(Liveness))
def test_expiry_shards_are_stable_and_within_the_mode_s_count(liveness):
    """A stream's shard depends on its id alone (every writer agrees), one of the mode's."""
    shards = {expiry_shard(f"s-{i}", liveness) for i in range(20_000)}
    assert len(shards) == expiry_shards(liveness)
    assert all(s.startswith("STARTED#") for s in shards)
    assert expiry_shard("btc-usd", liveness) == expiry_shard("btc-usd", liveness)


def test_session_fleets_spread_free_streams_over_every_shard_and_per_stream_uses_one():
    """Writes spread over INDEX_SHARDS partition key values; per-stream queries one."""
    assert expiry_shards(Liveness.SESSION) == INDEX_SHARDS > 1
    assert expiry_shards(Liveness.STREAM) == 1


def test_listing_index_keys_are_not_lease_attributes():
    """by-state is keyed on what only the control plane changes, so renewals never write it."""
    lease_written = {
        StreamAttr.LEASE_OWNER,
        StreamAttr.LEASE_EXPIRES_AT_MS,
        StreamAttr.LEASE_EPOCH,
        StreamAttr.LAST_SEQ,
        StreamAttr.LEASE_ACQUIRED_AT_MS,
        StreamAttr.UPDATED_AT,
    }
    assert {BY_STATE.partition_key, BY_STATE.sort_key}.isdisjoint(lease_written)


def test_a_tombstone_keeps_only_the_counters_and_its_time():
    """What delete keeps is in StreamAttr, and no index key is among it."""
    assert set(TOMBSTONE_KEEPS) == {
        StreamAttr.LEASE_EPOCH,
        StreamAttr.GENERATION,
        StreamAttr.DELETED_AT,
    }
    assert set(TOMBSTONE_KEEPS) <= set(stream_attributes())
    index_keys = {i.partition_key for i in INDEXES} | {i.sort_key for i in INDEXES}
    assert index_keys.isdisjoint(TOMBSTONE_KEEPS)


def test_stream_attributes_lists_every_stream_attribute_name():
    """Every StreamAttr constant, each once, the key excepted."""
    names = stream_attributes()
    assert len(names) == len(set(names))
    assert StreamAttr.WS_URL in names and StreamAttr.DELETED_AT in names
    assert PK not in names
