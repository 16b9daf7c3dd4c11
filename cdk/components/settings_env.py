"""Environment variables of streamlease settings, named by :func:`streamlease.settings.env_name`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from streamlease.settings import env_name

SettingValue = str | int | float | bool | Sequence[str]


def settings_environment(values: Mapping[str, SettingValue]) -> dict[str, str]:
    """Map ``Settings`` field names to the environment a process reads them from.

    Values are rendered the way ``Settings.from_env`` parses them (booleans as ``true``/``false``,
    sequences comma-joined); CDK tokens pass through as strings. Raises ``KeyError`` for a name
    that is not a field of ``Settings``.
    """
    env: dict[str, str] = {}
    for field, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = value
        elif isinstance(value, int | float):
            text = str(value)
        else:
            text = ",".join(value)
        env[env_name(field)] = text
    return env
