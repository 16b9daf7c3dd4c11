"""Which workers belong to a stopped ECS task (the worker id prefix rule)."""

from __future__ import annotations

import pytest

from lambdas.reaper import DETAIL_TYPE, is_planned_stop, stopped_task_event
from streamlease.schema import belongs_to_task, task_id_of

TASK = "8f1c2bde0a9e4d55b7c3e1f2a4b6c8d0"


@pytest.mark.parametrize(
    ("arn", "task_id"),
    [
        (f"arn:aws:ecs:us-east-1:123456789012:task/streamlease/{TASK}", TASK),
        (f"arn:aws:ecs:us-east-1:123456789012:task/{TASK}", TASK),
        ("arn:aws:ecs:local:000000000000:task/local/w1-0a1b2c3d", "w1-0a1b2c3d"),
        (TASK, TASK),
        ("", ""),
    ],
)
def test_task_id_of(arn: str, task_id: str) -> None:
    """The task id is the last path segment of the ARN (old and new ARN formats)."""
    assert task_id_of(arn) == task_id


@pytest.mark.parametrize(
    ("worker_id", "task_id", "belongs"),
    [
        (f"{TASK}/7-ab12", TASK, True),
        (TASK, TASK, True),
        (f"{TASK}-7-ab12", TASK, True),
        (f"{TASK}0/7-ab12", TASK, False),
        ("w1-0a1b2c3d", "w1-0a1b2c3d", True),
        ("w10-0a1b2c3d", "w1", False),
        ("other/7-ab12", TASK, False),
        (f"{TASK}/7-ab12", "", False),
        ("", TASK, False),
    ],
)
def test_belongs_to_task(worker_id: str, task_id: str, belongs: bool) -> None:
    """A worker belongs to a task when its id is the task id or continues it after a separator."""
    assert belongs_to_task(worker_id, task_id) is belongs


def test_synthetic_event_has_the_ecs_shape() -> None:
    """The local supervisor's event looks like EventBridge's for a stopped task."""
    event = stopped_task_event("arn:aws:ecs:local:0:task/local/w1")
    assert event["detail-type"] == DETAIL_TYPE
    assert event["detail"]["lastStatus"] == "STOPPED"
    assert event["detail"]["taskArn"].endswith("/w1")


@pytest.mark.parametrize(
    ("stop_code", "reason", "planned"),
    [
        ("ServiceSchedulerInitiated", "Scaling activity initiated by (deployment ecs-svc/1)", True),
        ("UserInitiated", "Task stopped by user", True),
        ("SpotInterruption", "Your Spot Task was interrupted.", True),
        ("TerminationNotice", "Task stopped due to a maintenance event", True),
        ("EssentialContainerExited", "Essential container in task exited", False),
        ("TaskFailedToStart", "CannotPullContainerError: pull image manifest", False),
        ("ServiceSchedulerInitiated", "Task failed container health checks", False),
        ("ServiceSchedulerInitiated", "Task failed ELB health checks in (target-group x)", False),
        ("unknown", "", False),
    ],
)
def test_a_stop_is_planned_only_for_a_deployment_scale_in_or_notice(
    stop_code: str, reason: str, planned: bool
) -> None:
    """Crashes, failed starts and failed health checks are unplanned (a crash loop repeats
    them); deployments, scale-in, StopTask and Spot/maintenance notices are not."""
    assert is_planned_stop(stop_code, reason) is planned
