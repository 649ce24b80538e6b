"""Read a config directory (``ecron.yaml`` and ``tasks/*.yaml``) into a validated ``Config``.

Every problem in every file is collected before anything is raised, so one
``ConfigError`` lists them all. Each message names the file, the task (by
name, or ``tasks[N]`` counting from 1) and the field (a dotted path such as
``trigger_retry.backoff`` or ``steps[2].url``; list positions count from 1,
like step numbers). ``docs/configuration.md`` is the user-facing account of
these rules.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Collection, Hashable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from ecron.config.callers_file import read_callers_file
from ecron.config.links import check_chains, check_reach
from ecron.config.messages import DAEMON_FILE, HIDDEN, SECRET_PATH, Problems, explain, join, kind
from ecron.config.model import Config, DaemonSettings, StepSpec, TaskSpec
from ecron.config.named import Calendars, Named, Pools, resolve_calendar, resolve_pool
from ecron.config.rules import CALENDAR_NAME, CalendarSpec, PoolSpec
from ecron.config.secrets import without_passwords
from ecron.config.yaml_problem import yaml_problem
from ecron.errors import ConfigError
from ecron.schedules import on_key

TASKS_DIR = "tasks"
ENV_PREFIX = "ECRON_"
#: Extra environment names of a daemon key, in precedence order, before ``ECRON_<KEY>``.
ENV_ALIASES: dict[tuple[str, ...], tuple[str, ...]] = {("database",): ("ECRON_DATABASE_URL",)}

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_SQLITE = "sqlite+aiosqlite:///"


def load_config(
    directory: str | Path, environ: Mapping[str, str] | None = None, now: datetime | None = None
) -> Config:
    """Read and validate the config directory ``directory``.

    ``environ`` (default ``os.environ``) feeds ``${VAR}`` interpolation and the
    ``ECRON_<KEY>`` overrides of daemon settings. ``now`` (default: the clock's) is when a
    calendar that leaves no fire time from then on is looked for. Raises ``ConfigError``
    listing every problem found, in file order.
    """
    root = Path(directory)
    env = os.environ if environ is None else environ
    if not root.is_dir():
        raise ConfigError([f"{directory}: is not a directory (expected ecron.yaml and tasks/)."])
    problems: list[str] = []
    named = Named()
    daemon = _load_daemon(root, env, problems, named)
    files: dict[str, str] = {}  # task name -> the file that declares it
    tasks = _load_tasks(root, env, problems, named, files)
    problems += check_chains(tasks, files) + check_reach(tasks, files, now or datetime.now(UTC))
    if problems or daemon is None:  # a problem may quote a URL: never with its password
        raise ConfigError([without_passwords(problem) for problem in problems])
    calendars = {name: spec for name, (spec, _) in named.calendars.items() if spec is not None}
    pools = {name: spec for name, (spec, _) in named.pools.items() if spec is not None}
    return Config(
        directory=str(root.resolve()), daemon=daemon, tasks=tasks, calendars=calendars, pools=pools
    )


def environment_overrides(environ: Mapping[str, str]) -> dict[tuple[str, ...], tuple[str, str]]:
    """Daemon keys set in ``environ``: key path (``("log", "level")``) to (variable, value).

    Every ``DaemonSettings`` key is read from ``ECRON_<KEY>``, nested keys from
    ``ECRON_<KEY>_<SUBKEY>``; ``database`` also from ``ECRON_DATABASE_URL``,
    which wins. Empty variables are ignored, except for the keys in ``NEVER_EMPTY``.
    """
    found: dict[tuple[str, ...], tuple[str, str]] = {}
    for key in _daemon_keys():
        names = (*ENV_ALIASES.get(key, ()), ENV_PREFIX + "_".join(key).upper())
        for name in names:
            if environ.get(name) or (key in NEVER_EMPTY and name in environ):
                found[key] = (name, environ[name])
                break
    return found


#: Daemon keys whose empty value is an error (validation says so), not "unset": an empty
#: token is a secret that was not mounted, never "no token".
NEVER_EMPTY = frozenset({("api_token",), ("api_tokens",), ("api_tokens_file",)})
#: Daemon keys that only ecron.yaml sets (lists of structures have no sensible variable).
FILE_ONLY_KEYS = frozenset({"notify"})
#: The top-level key of named calendars, in ecron.yaml and in task files.
CALENDARS = "calendars"
#: The top-level key of named pools, in ecron.yaml and in task files.
POOLS = "pools"


def _daemon_keys() -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    for name, field in DaemonSettings.model_fields.items():
        if name in FILE_ONLY_KEYS:
            continue
        sub = settings_model(field.annotation)
        if sub is not None:  # nested settings (also optional ones, e.g. ``queue``): KEY_SUB
            keys.extend((name, inner) for inner in sub.model_fields)
        else:
            keys.append((name,))
    return keys


def settings_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model of a field typed ``Model`` or ``Model | None``; else None (a
    list of models, such as ``api_tokens``, is one value: its variable holds the list)."""
    if get_origin(annotation) is list:
        return None
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


# --- ecron.yaml -------------------------------------------------------------------------------


def _load_daemon(
    root: Path, env: Mapping[str, str], problems: list[str], named: Named
) -> DaemonSettings | None:
    raw: Any = None  # a missing or empty file: every default
    if (root / DAEMON_FILE).exists():
        ok, raw = _read_yaml(root / DAEMON_FILE, DAEMON_FILE, problems)
        if ok and raw is not None and not isinstance(raw, dict):
            problems.append(f"{DAEMON_FILE}: must be a mapping of settings, not {kind(raw)}.")
    raw = raw if isinstance(raw, dict) else {}
    if CALENDARS in raw:
        _load_calendars(raw.pop(CALENDARS), DAEMON_FILE, env, problems, named.calendars)
    if POOLS in raw:
        _load_pools(raw.pop(POOLS), DAEMON_FILE, env, problems, named.pools)
    overrides = environment_overrides(env)
    for key in overrides:
        _pop(raw, key)
    bad: Problems = []
    data = _interpolate(raw, env, "", bad)
    problems.extend(f"{DAEMON_FILE}: field '{path}': {text}" for path, text in bad)
    for key, (_, value) in overrides.items():
        _put(data, key, value)
    _empty_means_unset(data, DaemonSettings, keep={key for (key, *_) in NEVER_EMPTY})
    read_callers_file(data, root, problems)
    try:
        daemon = DaemonSettings.model_validate(data)
    except ValidationError as exc:
        sources = {".".join(key): name for key, (name, _) in overrides.items()}
        for path, text in explain(exc, DaemonSettings, skip=[path for path, _ in bad]):
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


def _load_tasks(
    root: Path,
    env: Mapping[str, str],
    problems: list[str],
    named: Named,
    seen: dict[str, str],
) -> dict[str, TaskSpec]:
    """Every task of every task file (``seen``: task name -> the file that declared it
    first), after the named calendars and pools of all of them."""
    folder = root / TASKS_DIR
    if not folder.exists():
        return {}
    if not folder.is_dir():
        problems.append(f"{TASKS_DIR}: must be a directory of *.yaml task files.")
        return {}
    documents: list[tuple[str, list[Any]]] = []
    for path in sorted(folder.iterdir()):
        rel = f"{TASKS_DIR}/{path.name}"
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.suffix == ".yml":
            problems.append(f"{rel}: is not read: task files must end in .yaml; rename it.")
        if path.suffix == ".yaml":
            documents.append((rel, _task_items(path, rel, env, problems, named)))
    tasks: dict[str, TaskSpec] = {}
    for rel, items in documents:
        for index, item in enumerate(items, start=1):
            where = f"{rel}: tasks[{index}]"
            spec = _load_task(item, where, rel, env, problems, (seen, named))
            if spec is not None:
                tasks[spec.name] = spec
    return tasks


def _task_items(
    path: Path, rel: str, env: Mapping[str, str], problems: list[str], named: Named
) -> list[Any]:
    """The task items of one file (its calendars and pools go to ``named``)."""
    ok, raw = _read_yaml(path, rel, problems)
    if not ok:
        return []
    if isinstance(raw, dict) and (CALENDARS in raw or POOLS in raw):
        if CALENDARS in raw:
            _load_calendars(raw[CALENDARS], rel, env, problems, named.calendars)
        if POOLS in raw:
            _load_pools(raw[POOLS], rel, env, problems, named.pools)
        if "tasks" not in raw:
            raw = {**raw, "tasks": []}  # a file of calendars or pools only
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks"), list):
        if not isinstance(raw, dict):
            what = f"it is {kind(raw)}"
        else:
            what = f"'tasks' is {kind(raw['tasks'])}" if "tasks" in raw else "it has no 'tasks' key"
        problems.append(f"{rel}: must be a mapping with a list of tasks under 'tasks', but {what}.")
        return []
    for key in raw:
        if key not in ("tasks", CALENDARS, POOLS) and not str(key).startswith("x-"):
            problems.append(
                f"{rel}: top-level key {key!r} is not known: a tasks file holds 'tasks', "
                "'calendars', 'pools' (and keys starting with 'x-', for YAML anchors)."
            )
    items: list[Any] = raw["tasks"]
    return items


def _load_calendars(
    raw: Any, rel: str, env: Mapping[str, str], problems: list[str], calendars: Calendars
) -> None:
    """Validate the named calendars of one file into ``calendars``."""
    _load_named(raw, rel, env, problems, calendars, CalendarSpec, "weekdays and exclude")


def _load_pools(
    raw: Any, rel: str, env: Mapping[str, str], problems: list[str], pools: Pools
) -> None:
    """Validate the named pools of one file into ``pools``."""
    _load_named(raw, rel, env, problems, pools, PoolSpec, "max_running and max_per_second")


def _load_named(
    raw: Any,
    rel: str,
    env: Mapping[str, str],
    problems: list[str],
    found: dict[str, Any],
    model: type[CalendarSpec] | type[PoolSpec],
    keys: str,
) -> None:
    """Validate the definitions of one file under ``calendars`` or ``pools`` (``model``;
    ``keys``: what a definition holds, for the message) into ``found``: name to (the
    definition, or None where it is wrong; its file). Names are unique across files."""
    noun = "calendar" if model is CalendarSpec else "pool"
    if not isinstance(raw, dict):
        problems.append(f"{rel}: field '{noun}s': must be a mapping of names to {noun}s.")
        return
    for name, body in raw.items():
        where = f"{rel}: {noun} {name!r}"
        if not isinstance(name, str) or not CALENDAR_NAME.fullmatch(name):
            problems.append(
                f"{where}: is not a {noun} name: use lower-case letters, digits, '_', '.', "
                "'-', starting with a letter or digit."
            )
            continue
        if name in found:
            problems.append(
                f"{where}: the name {name!r} is already used by a {noun} in "
                f"{found[name][1]}; {noun} names must be unique across all files."
            )
            continue
        found[name] = (None, rel)
        if not isinstance(body, dict) or "name" in body:
            what = "a 'name' key (its name is its key)" if isinstance(body, dict) else kind(body)
            problems.append(f"{where}: must be a mapping of {keys}, not {what}.")
            continue
        bad: Problems = []
        data = _interpolate(body, env, "", bad)
        problems.extend(f"{where}: field '{path}': {text}" for path, text in bad)
        try:
            spec = model.model_validate({**data, "name": name})
        except ValidationError as exc:
            for path, text in explain(exc, model, skip=[path for path, _ in bad]):
                problems.append(f"{where}: field '{path}': {text}")
            continue
        found[name] = (None if bad else spec, rel)


def _load_task(
    item: Any,
    where: str,
    rel: str,
    env: Mapping[str, str],
    problems: list[str],
    known: tuple[dict[str, str], Named],
) -> TaskSpec | None:
    """Validate one task (``where`` names it by position until its name is known; ``known``:
    the tasks seen so far, by the file that declared each, and the named calendars and
    pools)."""
    seen, named = known
    if not isinstance(item, dict):
        problems.append(f"{where}: must be a mapping of task keys, not {kind(item)}.")
        return None
    bad: Problems = []
    data = _interpolate(item, env, "", bad)
    name = data.get("name")
    if isinstance(name, str) and name:
        where = f"{rel}: task {name!r}"
        if name in seen:
            text = f"the name {name!r} is already used by a task in {seen[name]}"
            bad.append(("name", f"{text}; task names must be unique across all files."))
        seen.setdefault(name, rel)
    if isinstance(data.get("schedule"), dict):
        data["schedule"] = on_key(data["schedule"])  # YAML reads a bare ``on`` as true
    resolve_calendar(data, named.calendars, bad)
    resolve_pool(data, named.pools, bad)
    problems.extend(f"{where}: field '{path}': {text}" for path, text in bad)
    _empty_means_unset(data, TaskSpec)
    steps = data.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict):
            _empty_means_unset(step, StepSpec)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        for path, text in explain(exc, TaskSpec, skip=[path for path, _ in bad]):
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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{rel}: cannot be read ({exc}).")
        return False, None
    loader = _Loader(text)
    try:
        return True, loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        problems.append(f"{rel}: {yaml_problem(exc, text)}")
    except yaml.YAMLError as exc:
        problems.append(f"{rel}: the YAML cannot be read: {exc}.")
    finally:
        loader.dispose()
    return False, None


def _interpolate(value: Any, env: Mapping[str, str], path: str, bad: Problems) -> Any:
    """``value`` with ``${VAR}`` expanded in every string inside it; problems go to ``bad``."""
    if isinstance(value, str):
        return _expand(value, env, path, bad)
    if isinstance(value, dict):
        return {key: _interpolate(v, env, join(path, str(key)), bad) for key, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, join(path, i), bad) for i, v in enumerate(value)]
    return value


def _expand(text: str, env: Mapping[str, str], path: str, bad: Problems) -> str:
    def replace(match: re.Match[str]) -> str:
        whole, body = match.group(0), match.group(1)
        if whole == "$${":
            return "${"
        reference = None if body is None else _VARIABLE.fullmatch(body)
        if reference is None:
            wrong = "a '${' without a closing '}'" if body is None else f"a malformed {whole!r}"
            hint = "write ${NAME} or ${NAME:-default}, and $${ for a literal ${"
            shown = HIDDEN if SECRET_PATH.search(path) else repr(text)
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


def _empty_means_unset(
    data: dict[str, Any], model: type[BaseModel], keep: Collection[str] = ()
) -> None:
    """Drop keys that may be null (``secret``, ``api_token``, ...) whose value is empty.

    Dropped, not set to None: a step that sets a key to None overrides its task.
    """
    for key, value in list(data.items()):
        field = model.model_fields.get(key)
        nullable = field is not None and type(None) in typing.get_args(field.annotation)
        if value == "" and nullable and key not in keep:
            del data[key]
