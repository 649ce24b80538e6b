"""Configuration: YAML and environment into validated, typed daemon and task settings."""

from __future__ import annotations

from ecron.config.loader import environment_overrides, load_config
from ecron.config.model import (
    CallSettings,
    Config,
    DaemonSettings,
    LogSettings,
    Misfire,
    ResumePolicy,
    RetryPolicy,
    StepSpec,
    TaskSpec,
    TriggerRetry,
)
from ecron.config.summary import task_lines, validation_report

__all__ = [
    "CallSettings",
    "Config",
    "DaemonSettings",
    "LogSettings",
    "Misfire",
    "ResumePolicy",
    "RetryPolicy",
    "StepSpec",
    "TaskSpec",
    "TriggerRetry",
    "environment_overrides",
    "load_config",
    "task_lines",
    "validation_report",
]
