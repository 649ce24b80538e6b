"""The house rules of ``ecron/``, read from its source: no import circle, no import that
DESIGN.md's "may touch" column forbids, and rooms of a size a reader can hold.

The import graph is read with ``ast`` (every import, inside functions and
``TYPE_CHECKING`` blocks too: each is a dependency of the design, whenever it runs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ecron"

#: The longest a module and a function may be, in lines.
MODULE_LINES = 500
FUNCTION_LINES = 60
#: Generated schema migrations: one long function per revision is their shape.
SIZE_EXEMPT = ("store/migrations/versions/",)

#: The loops, and what wires them: no part below them may import these.
LOOPS = {
    "scheduler",
    "executor",
    "patrol",
    "leases",
    "bookkeeping",
    "chains",
    "overdue",
    "parts",
    "daemon",
    "queue",
}

#: Per part, the parts it may import (besides itself); None: any.
ALLOWED: dict[str, set[str] | None] = {
    # Pure: no I/O, no clock, nothing else of ecron but the root of its errors.
    "core": {"errors"},
    # Config validates schedule expressions while loading, so that a bad cron names its
    # file, task and field; ``schedules`` (with ``cron``) imports no other part (below), and
    # ``calendars`` (a schedule's fire times less its calendar and blackouts) only them.
    "config": {"calendars", "durations", "errors", "schedules"},
    "calendars": {"cron", "durations", "errors", "schedules"},
    "schedules": {"cron", "durations", "errors"},
    # Cron's half of the fire-time math (APScheduler asked in UTC, then the zone's rules).
    "cron": {"errors"},
    "durations": {"errors"},
    "errors": set(),
    # Every backoff, built from tenacity alone.
    "backoff": set(),
    "clock": set(),
    "ids": set(),
}

#: Per part, the parts it must not import.
FORBIDDEN: dict[str, set[str]] = {
    # The store keeps rows; fire times and pause rules are decided above it (planning).
    "store": LOOPS | {"api", "commands", "cli", "schedules", "cron", "planning"},
    "api": LOOPS | {"cli"},
    "executor": {"scheduler", "patrol", "parts", "daemon", "api", "commands", "cli"},
    "commands": {"scheduler", "patrol", "parts", "daemon", "api", "cli"},
    # A pushed report's checks, shared by the callback endpoint and the queue consumer.
    "pushed": LOOPS | {"api", "cli"},
}


def module_name(path: Path, root: Path) -> str:
    """``ecron/store/sql.py`` → ``ecron.store.sql``; a package's ``__init__`` is the package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module under ``root``, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imports(path: Path, known: Iterable[str], package: str) -> set[str]:
    """The modules of ``known`` that the module at ``path`` imports (``from p import m``
    names module ``p.m`` when there is one)."""
    known = set(known)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in known and name.split(".")[0] == package}


def graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package that it imports."""
    found = modules(root)
    return {name: imports(path, found, root.name) - {name} for name, path in found.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges``: strongly connected sets of more than one module
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, following = work[-1]
            step = next(following, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def part(module: str) -> str:
    """The part a module belongs to: ``ecron.store.sql`` → ``store``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else pieces[0]


def broken_rules(edges: dict[str, set[str]]) -> list[str]:
    """Every import that ``ALLOWED`` or ``FORBIDDEN`` rules out, as ``a -> b``."""
    broken = []
    for module, targets in sorted(edges.items()):
        source = part(module)
        allowed = ALLOWED.get(source)
        forbidden = FORBIDDEN.get(source, set())
        for target in sorted(targets):
            other = part(target)
            if other == source or other == "ecron":
                continue
            if (allowed is not None and other not in allowed) or other in forbidden:
                broken.append(f"{module} -> {target}")
    return broken


def oversized(root: Path) -> list[str]:
    """Modules over ``MODULE_LINES`` and functions over ``FUNCTION_LINES`` lines."""
    found = []
    for name, path in modules(root).items():
        if any(exempt in path.as_posix() for exempt in SIZE_EXEMPT):
            continue
        text = path.read_text()
        if (lines := len(text.splitlines())) > MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    found.append(f"{name}.{node.name}: {length} lines")
    return found


# --- the rules, on ecron ------------------------------------------------------------------


def test_ecron_has_no_import_circle() -> None:
    """No module of ecron imports, directly or through others, a module that imports it."""
    assert circles(graph(ROOT)) == []


def test_every_import_is_one_the_parts_table_allows() -> None:
    """``core`` imports no other part (but ``errors``), ``config`` only durations, errors,
    schedules and calendars, the store no loop, the API no loop (it acts through
    ``commands``)."""
    assert broken_rules(graph(ROOT)) == []


def test_modules_and_functions_stay_short() -> None:
    """Modules of at most 500 lines, functions of at most 60 (migrations excepted)."""
    assert oversized(ROOT) == []


def test_the_api_reaches_the_engine_through_commands_only() -> None:
    """The handlers' context holds the store and the commands, and no loop."""
    edges = graph(ROOT)
    api = {t for m, targets in edges.items() if part(m) == "api" for t in targets}
    assert "ecron.commands" in api
    assert {part(t) for t in api} & LOOPS == set()


# --- the checks themselves can fail -------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "ecron"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_through_three_modules_is_found(tmp_path: Path) -> None:
    """a → b → c → a is one circle; d, importing a, is not in it."""
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from ecron import b\n",
            "b.py": "import ecron.c\n",
            "c.py": "def f():\n    from ecron.a import x\n",
            "d.py": "from ecron.a import y\n",
        },
    )
    assert circles(graph(root)) == [["ecron.a", "ecron.b", "ecron.c"]]


def test_a_forbidden_import_and_a_long_function_are_found(tmp_path: Path) -> None:
    """``core`` importing the store breaks a rule; a 61-line function is too long."""
    body = "".join(f"    x{n} = {n}\n" for n in range(60))
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "from ecron.store.base import Store\n",
            "store/__init__.py": "",
            "store/base.py": f"class Store: ...\ndef long():\n{body}",
        },
    )
    assert broken_rules(graph(root)) == ["ecron.core -> ecron.store.base"]
    assert oversized(root) == ["ecron.store.base.long: 61 lines"]


@pytest.mark.parametrize(
    ("module", "expected"),
    [("ecron.store.sql", "store"), ("ecron.commands", "commands"), ("ecron", "ecron")],
)
def test_a_module_belongs_to_its_part(module: str, expected: str) -> None:
    """The part is the first name under ``ecron``."""
    assert part(module) == expected


def test_every_error_ecron_defines_is_an_ecron_error() -> None:
    """Each exception class defined in ``ecron/`` derives from ``EcronError``, so that a
    caller can catch all of ecron's own errors with one ``except``."""
    import importlib
    import inspect

    from ecron.errors import EcronError

    strays, checked = [], 0
    for name in modules(ROOT):
        if ".migrations." in name:
            continue
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ != name or not issubclass(value, BaseException):
                continue
            checked += 1
            if not issubclass(value, EcronError):
                strays.append(f"{name}.{value.__qualname__}")
    assert strays == []
    assert checked >= 10  # the walk found ecron's errors (InvalidReport, StoreError, ...)
