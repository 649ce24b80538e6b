"""Read a config directory (``ecron.yaml`` and ``tasks/*.yaml``) into a validated ``Config``.

Every problem in every file is collected before anything is raised, so one
``ConfigError`` lists them all. Each message names the file, the task (by
name, or ``tasks[N]`` counting from 1) and the field (a dotted path such as
``trigger_retry.backoff`` or ``steps[2].url``; list positions count from 1,
like step numbers). ``docs/configuration.md`` is the user-facing account of
these rules.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ecron.config.model import Config, DaemonSettings, StepSpec, TaskSpec
from ecron.errors import ConfigError

DAEMON_FILE = "ecron.yaml"
TASKS_DIR = "tasks"
ENV_PREFIX = "ECRON_"
#: Extra environment names of a daemon key, in precedence order, before ``ECRON_<KEY>``.
ENV_ALIASES: dict[tuple[str, ...], tuple[str, ...]] = {("database",): ("ECRON_DATABASE_URL",)}

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_SQLITE = "sqlite+aiosqlite:///"
#: Fields whose values are secrets: a problem with one never quotes the value.
_SECRET_PATH = re.compile(r"(^|\.)(secret|api_token)$|(^|\.)headers(\.|\[|$)|webhooks\[\d+\]\.url$")
#: How a secret value is shown in a problem.
HIDDEN = "***"
_Problems = list[tuple[str, str]]  # (field path, what is wrong)


def load_config(directory: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate the config directory ``directory``.

    ``environ`` (default ``os.environ``) feeds ``${VAR}`` interpolation and the
    ``ECRON_<KEY>`` overrides of daemon settings. Raises ``ConfigError``
    listing every problem found, in file order.
    """
    root = Path(directory)
    env = os.environ if environ is None else environ
    if not root.is_dir():
        raise ConfigError([f"{directory}: is not a directory (expected ecron.yaml and tasks/)."])
    problems: list[str] = []
    daemon = _load_daemon(root, env, problems)
    tasks = _load_tasks(root, env, problems)
    if problems or daemon is None:
        raise ConfigError(problems)
    return Config(directory=str(root.resolve()), daemon=daemon, tasks=tasks)


def environment_overrides(environ: Mapping[str, str]) -> dict[tuple[str, ...], tuple[str, str]]:
    """Daemon keys set in ``environ``: key path (``("log", "level")``) to (variable, value).

    Every ``DaemonSettings`` key is read from ``ECRON_<KEY>``, nested keys from
    ``ECRON_<KEY>_<SUBKEY>``; ``database`` also from ``ECRON_DATABASE_URL``,
    which wins. Empty variables are ignored.
    """
    found: dict[tuple[str, ...], tuple[str, str]] = {}
    for key in _daemon_keys():
        names = (*ENV_ALIASES.get(key, ()), ENV_PREFIX + "_".join(key).upper())
        for name in names:
            if environ.get(name):
                found[key] = (name, environ[name])
                break
    return found


#: Daemon keys that only ecron.yaml sets (lists of structures have no sensible variable).
FILE_ONLY_KEYS = frozenset({"notify"})


def _daemon_keys() -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    for name, field in DaemonSettings.model_fields.items():
        if name in FILE_ONLY_KEYS:
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            keys.extend((name, inner) for inner in sub.model_fields)
        else:
            keys.append((name,))
    return keys


# --- ecron.yaml -------------------------------------------------------------------------------


def _load_daemon(root: Path, env: Mapping[str, str], problems: list[str]) -> DaemonSettings | None:
    raw: Any = None  # a missing or empty file: every default
    if (root / DAEMON_FILE).exists():
        ok, raw = _read_yaml(root / DAEMON_FILE, DAEMON_FILE, problems)
        if ok and raw is not None and not isinstance(raw, dict):
            problems.append(f"{DAEMON_FILE}: must be a mapping of settings, not {_kind(raw)}.")
    raw = raw if isinstance(raw, dict) else {}
    overrides = environment_overrides(env)
    for key in overrides:
        _pop(raw, key)
    bad: _Problems = []
    data = _interpolate(raw, env, "", bad)
    problems.extend(f"{DAEMON_FILE}: field '{path}': {text}" for path, text in bad)
    for key, (_, value) in overrides.items():
        _put(data, key, value)
    _empty_means_unset(data, DaemonSettings)
    try:
        daemon = DaemonSettings.model_validate(data)
    except ValidationError as exc:
        sources = {".".join(key): name for key, (name, _) in overrides.items()}
        for path, text in _explain(exc, DaemonSettings, skip=[path for path, _ in bad]):
            where = f"environment variable {sources[path]}" if path in sources else DAEMON_FILE
            problems.append(f"{where}: field '{path}': {text}")
        return None
    database = _absolute_sqlite(daemon.database, root.resolve())
    return daemon.model_copy(update={"database": database}) if not bad else None


def _pop(data: dict[str, Any], key: tuple[str, ...]) -> None:
    *parents, last = key
    for part in parents:
        inner = data.get(part)
        if not isinstance(inner, dict):
            return
        data = inner
    data.pop(last, None)


def _put(data: dict[str, Any], key: tuple[str, ...], value: str) -> None:
    *parents, last = key
    for part in parents:
        data = data.setdefault(part, {})
        if not isinstance(data, dict):
            return  # the file's value is not a mapping: validation reports it
    data[last] = value


def _absolute_sqlite(url: str, root: Path) -> str:
    """A relative SQLite file in ``url`` made absolute under ``root``; other URLs unchanged."""
    if not url.startswith(_SQLITE):
        return url
    path, sep, query = url.removeprefix(_SQLITE).partition("?")
    if not path or path.startswith(("/", ":memory:", "file:")):
        return url
    return f"{_SQLITE}{(root / path).resolve()}{sep}{query}"


# --- tasks/*.yaml -----------------------------------------------------------------------------


def _load_tasks(root: Path, env: Mapping[str, str], problems: list[str]) -> dict[str, TaskSpec]:
    folder = root / TASKS_DIR
    if not folder.exists():
        return {}
    if not folder.is_dir():
        problems.append(f"{TASKS_DIR}: must be a directory of *.yaml task files.")
        return {}
    tasks: dict[str, TaskSpec] = {}
    seen: dict[str, str] = {}  # task name -> file that declared it first
    for path in sorted(folder.iterdir()):
        rel = f"{TASKS_DIR}/{path.name}"
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix == ".yml":
            problems.append(f"{rel}: is not read: task files must end in .yaml; rename it.")
        if path.suffix != ".yaml":
            continue
        for index, item in enumerate(_task_items(path, rel, problems), start=1):
            spec = _load_task(item, f"{rel}: tasks[{index}]", rel, env, problems, seen)
            if spec is not None:
                tasks[spec.name] = spec
    return tasks


def _task_items(path: Path, rel: str, problems: list[str]) -> list[Any]:
    ok, raw = _read_yaml(path, rel, problems)
    if not ok:
        return []
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks"), list):
        if not isinstance(raw, dict):
            what = f"it is {_kind(raw)}"
        else:
            what = (
                f"'tasks' is {_kind(raw['tasks'])}" if "tasks" in raw else "it has no 'tasks' key"
            )
        problems.append(f"{rel}: must be a mapping with a list of tasks under 'tasks', but {what}.")
        return []
    for key in raw:
        if key != "tasks" and not str(key).startswith("x-"):
            problems.append(
                f"{rel}: top-level key {key!r} is not known: a tasks file holds 'tasks' "
                "(and keys starting with 'x-', for YAML anchors)."
            )
    items: list[Any] = raw["tasks"]
    return items


def _load_task(
    item: Any,
    where: str,
    rel: str,
    env: Mapping[str, str],
    problems: list[str],
    seen: dict[str, str],
) -> TaskSpec | None:
    """Validate one task (``where`` names it by position until its name is known)."""
    if not isinstance(item, dict):
        problems.append(f"{where}: must be a mapping of task keys, not {_kind(item)}.")
        return None
    bad: _Problems = []
    data = _interpolate(item, env, "", bad)
    name = data.get("name")
    if isinstance(name, str) and name:
        where = f"{rel}: task {name!r}"
        if name in seen:
            text = f"the name {name!r} is already used by a task in {seen[name]}"
            bad.append(("name", f"{text}; task names must be unique across all files."))
        seen.setdefault(name, rel)
    problems.extend(f"{where}: field '{path}': {text}" for path, text in bad)
    _empty_means_unset(data, TaskSpec)
    steps = data.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict):
            _empty_means_unset(step, StepSpec)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        for path, text in _explain(exc, TaskSpec, skip=[path for path, _ in bad]):
            problems.append(f"{where}: field '{path}': {text}" if path else f"{where}: {text}")
        return None
    return None if bad else spec


# --- YAML, interpolation, messages ------------------------------------------------------------


#: libyaml's parser where PyYAML has it (its wheels do): ten times faster on a file of
#: thousands of tasks. The construction, where the checks below live, is the same.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a key written twice in one mapping (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        keys: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in keys:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice in one mapping", key_node.start_mark
                )
            keys.add(key)
        mapping: dict[Hashable, Any] = super().construct_mapping(node, deep)
        return mapping


def _read_yaml(path: Path, rel: str, problems: list[str]) -> tuple[bool, Any]:
    """(True, the parsed document), or (False, None) after recording why it cannot be read."""
    try:
        loader = _Loader(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{rel}: cannot be read ({exc}).")
        return False, None
    try:
        return True, loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problems.append(f"{rel}: {at}the YAML cannot be read: {exc.problem or exc.context}.")
    except yaml.YAMLError as exc:
        problems.append(f"{rel}: the YAML cannot be read: {exc}.")
    finally:
        loader.dispose()
    return False, None


def _interpolate(value: Any, env: Mapping[str, str], path: str, bad: _Problems) -> Any:
    """``value`` with ``${VAR}`` expanded in every string inside it; problems go to ``bad``."""
    if isinstance(value, str):
        return _expand(value, env, path, bad)
    if isinstance(value, dict):
        return {key: _interpolate(v, env, _join(path, str(key)), bad) for key, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, _join(path, i), bad) for i, v in enumerate(value)]
    return value


def _expand(text: str, env: Mapping[str, str], path: str, bad: _Problems) -> str:
    def replace(match: re.Match[str]) -> str:
        whole, body = match.group(0), match.group(1)
        if whole == "$${":
            return "${"
        reference = None if body is None else _VARIABLE.fullmatch(body)
        if reference is None:
            wrong = "a '${' without a closing '}'" if body is None else f"a malformed {whole!r}"
            hint = "write ${NAME} or ${NAME:-default}, and $${ for a literal ${"
            shown = HIDDEN if _SECRET_PATH.search(path) else repr(text)
            bad.append((path, f"{shown} has {wrong}: {hint}."))
            return whole
        name, default = reference.group(1), reference.group(2)
        value = env.get(name)
        if default is not None and not value:
            return default
        if value is None:
            hint = f"write ${{{name}:-default}} to give it a default"
            bad.append((path, f"environment variable {name!r} is not set ({hint})."))
            return whole
        return value

    return _REFERENCE.sub(replace, text)


def _empty_means_unset(data: dict[str, Any], model: type[BaseModel]) -> None:
    """Drop keys that may be null (``secret``, ``api_token``, ...) whose value is empty.

    Dropped, not set to None: a step that sets a key to None overrides its task.
    """
    for key, value in list(data.items()):
        field = model.model_fields.get(key)
        if value == "" and field is not None and type(None) in typing.get_args(field.annotation):
            del data[key]


def _explain(exc: ValidationError, model: type[BaseModel], skip: list[str]) -> _Problems:
    """(field path, sentence) for each error, leaving out fields under a path in ``skip``."""
    found: _Problems = []
    for error in exc.errors():
        path, owner = _walk(model, error["loc"])
        value = error.get("input")
        text = error["msg"].removeprefix("Value error, ")
        prefixed = re.match(r"([\w./]+): (.*)", text, re.DOTALL)
        if error["type"] == "value_error" and prefixed:
            inner = prefixed.group(1)
            if not path or (isinstance(value, dict) and inner in value):
                path, text = _join(path, inner), prefixed.group(2)
        if _SECRET_PATH.search(path):  # never quoted, not even in a validator's own words
            text = text.replace(repr(value), HIDDEN) if isinstance(value, str) else text
            shown = HIDDEN
        else:
            shown = _show(value)
        text = _sentence(error["type"], text, shown, owner, path)
        if not any(_under(path, prefix) for prefix in skip) and (path, text) not in found:
            found.append((path, text))
    return found


def _sentence(kind: str, text: str, shown: str, owner: type[BaseModel] | None, path: str) -> str:
    """The problem in words; ``shown``: the value as a problem may quote it."""
    if kind == "missing":
        return "is required but not set."
    if kind == "extra_forbidden":
        key = path.rpartition(".")[2]
        close = difflib.get_close_matches(key, list(owner.model_fields) if owner else [], n=1)
        return "is not a known key" + (f"; did you mean {close[0]!r}?" if close else ".")
    if kind == "literal_error":
        return f"{shown} is not allowed: use {text.removeprefix('Input should be ')}."
    if kind != "value_error":
        text = f"{shown} is not valid: {text[:1].lower()}{text[1:]}"
    elif text.startswith("must "):
        text = f"{shown} {text}"
    return text if text.endswith((".", "?")) else text + "."


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, type[BaseModel] | None]:
    """The dotted path of a pydantic location (union tags left out) and the model of its key."""
    path, current, owner = "", typing.cast(Any, model), None
    for item in loc:
        args = [arg for arg in typing.get_args(current) if arg is not type(None)]
        if typing.get_origin(current) in (typing.Union, types.UnionType):
            if len(args) > 1:  # ``item`` names the union member that failed
                current = None
                continue
            current = args[0]
            args = list(typing.get_args(current))
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(item))
            owner, current = current, (field.annotation if field else None)
        else:
            owner = None
            is_container = typing.get_origin(current) in (list, dict)
            current = args[-1] if is_container and args else None
        path = _join(path, item)
    return path, owner


def _join(path: str, item: int | str) -> str:
    if isinstance(item, int):
        return f"{path}[{item + 1}]"
    return f"{path}.{item}" if path else item


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    names = {list: "a list", dict: "a mapping", str: "a string", bool: "a boolean"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else "a scalar")
