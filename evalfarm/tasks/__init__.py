"""Tasks (reference modules) and candidates in the KernelBench format."""

from evalfarm.tasks.format import (
    Candidate,
    Task,
    TaskFormatError,
    instantiate_task,
    load_candidate_file,
    load_task_file,
    parse_candidate,
    parse_task,
)
from evalfarm.tasks.suite import (
    TaskSuite,
    UnknownTaskError,
    Variant,
    builtin_suite,
    kernelbench_suite,
    resolve_task,
)

__all__ = [
    "Candidate",
    "Task",
    "TaskFormatError",
    "TaskSuite",
    "UnknownTaskError",
    "Variant",
    "builtin_suite",
    "instantiate_task",
    "kernelbench_suite",
    "load_candidate_file",
    "load_task_file",
    "parse_candidate",
    "parse_task",
    "resolve_task",
]
