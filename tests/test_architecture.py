"""The house rules of ``ecron/``, read from its source: no import circle, no import that
DESIGN.md's "may touch" column forbids, wiring that goes down, and rooms of a size a
reader can hold.

The import rules are import-linter contracts (``[tool.importlinter]`` in pyproject.toml:
layers, forbidden imports, no circles between siblings at any depth), checked here by
running it. What import-linter cannot see is checked here with ``ast``: no part sets a
hook on another after it is built (STYLE.md rule 14), and sizes.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ecron"

#: The longest a module and a function may be, in lines.
MODULE_LINES = 500
FUNCTION_LINES = 60
#: Generated schema migrations: one long function per revision is their shape.
SIZE_EXEMPT = ("store/migrations/versions/",)


def module_name(path: Path, root: Path) -> str:
    """``ecron/store/sql.py`` → ``ecron.store.sql``; a package's ``__init__`` is the package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module under ``root``, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


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


@pytest.fixture(autouse=True)
def loggers_left_on() -> Iterator[None]:
    """import-linter configures logging as a program of its own, which turns off every
    logger that already exists (``aiohttp.client`` among them): a later test of this
    worker that reads what a library logged found nothing. They are turned on again."""
    on = [
        logger
        for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and not logger.disabled
    ]
    yield
    for logger in on:
        logger.disabled = False


# --- the rules, on ecron ------------------------------------------------------------------


def test_the_import_linter_contracts_are_kept() -> None:
    """Every contract in pyproject.toml (the engine's layers, the API through commands, a
    pure core, the store below the rules, no circle at any depth) holds."""
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(ROOT.parent / "pyproject.toml"), no_cache=True) == 0


def test_the_import_linter_contracts_can_fail(tmp_path: Path) -> None:
    """The same contracts on a copy of ``ecron/`` where ``core`` imports the store, and the
    executor imports the scheduler: broken."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "ecron"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "core" / "bad.py").write_text("from ecron.store.base import Store\n")
    (copy / "executor" / "bad.py").write_text("from ecron.scheduler import Scheduler\n")
    shutil.copy(ROOT.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "core is pure" in done.stdout and "BROKEN" in done.stdout
    assert "ecron.core.bad -> ecron.store.base" in done.stdout
    assert "ecron.executor.bad -> ecron.scheduler" in done.stdout


def hooks_set_after_construction(root: Path) -> list[str]:
    """The places where one object sets a hook on another after it was built (STYLE.md
    rule 14): an attribute of something other than ``self`` assigned a lambda, a function
    defined inside the enclosing function, or a method of some object (``x.on_done =
    y.handle``; an attribute copied under its own name, ``self.a = other.a``, is not one)."""
    found: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            local = {
                node.name
                for node in ast.walk(function)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node is not function
            }
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and any(
                    _is_hook(target, node.value, local) for target in node.targets
                ):
                    found.append((path.relative_to(root.parent).as_posix(), node.lineno))
    return [f"{path}:{line}" for path, line in sorted(set(found))]


def _is_hook(target: ast.expr, value: ast.expr, local: set[str]) -> bool:
    if not isinstance(target, ast.Attribute):
        return False
    if isinstance(target.value, ast.Name) and target.value.id == "self":
        return False
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Name):
        return value.id in local
    if isinstance(value, ast.Attribute):
        own = isinstance(value.value, ast.Name) and value.value.id == "self"
        return own or value.attr != target.attr
    return False


def test_no_part_sets_a_hook_on_another_after_it_is_built() -> None:
    """Wiring goes down, in constructors: nowhere in ``ecron/`` is a bound method, a lambda
    or a local function assigned to another object's attribute, so the call graph is the
    import graph and a reader following a call never climbs back up."""
    assert hooks_set_after_construction(ROOT) == []


def test_a_hook_set_after_construction_is_found(tmp_path: Path) -> None:
    """Each way of setting a hook on another object is found; keeping one's own state, or
    copying another's attribute under its own name, is not."""
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "wiring.py": (
                "def wire(a, b):\n"
                "    def local():\n        pass\n"
                "    a.on_done = b.handle\n"
                "    a.starter = lambda: None\n"
                "    b.callback = local\n"
                "    a.store = b.store\n"
                "class Part:\n"
                "    def __init__(self, other):\n"
                "        self.run = other.run\n"
                "        other.wake = self.wake\n"
            ),
        },
    )
    assert hooks_set_after_construction(root) == [
        "ecron/wiring.py:4",
        "ecron/wiring.py:5",
        "ecron/wiring.py:6",
        "ecron/wiring.py:11",
    ]


def engine_methods(root: Path) -> set[str]:
    """The public methods (and properties) of ``Engine`` in ``root/engine.py``."""
    tree = ast.parse((root / "engine.py").read_text())
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    return {
        node.name
        for node in engine.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
    }


def reads_into_the_engine(root: Path, *callers: Path) -> list[str]:
    """The places outside ``root/engine.py`` (in ``root`` and in ``callers``: the tests, the
    benchmarks) that read an attribute of an ``Engine`` that is not one of its public
    methods (``engine.held``, ``self.engine.executor.backlog``): reaching through the engine
    into its parts. An ``Engine`` is whatever is reached as ``X.engine`` (``self.engine``,
    ``parts.engine``, ``daemon.engine``), or as a bare ``engine`` in a module that imports
    ``ecron.engine`` (elsewhere, ``engine`` is SQLAlchemy's)."""
    allowed = engine_methods(root)
    found: list[tuple[str, int, str]] = []
    paths = [path for folder in (root, *callers) for path in sorted(folder.rglob("*.py"))]
    for path in paths:
        if path == root / "engine.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        imports_engine = any(
            isinstance(node, ast.ImportFrom) and node.module == f"{root.name}.engine"
            for node in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr in allowed:
                continue
            seen = node.value
            if (isinstance(seen, ast.Attribute) and seen.attr == "engine") or (
                imports_engine and isinstance(seen, ast.Name) and seen.id == "engine"
            ):
                found.append((path.relative_to(root.parent).as_posix(), node.lineno, node.attr))
    return [f"{where}:{line}: engine.{name}" for where, line, name in sorted(found)]


def test_nothing_reaches_through_the_engine_into_its_parts() -> None:
    """Outside ``engine.py``, an ``Engine`` is used through its public methods alone (the
    scheduler, the commands, the patrol, the daemon, the API and the tests ask it; none
    reads its held executions, its executor, its recorder or its metrics), so its parts
    stay its own."""
    here = ROOT.parent
    assert reads_into_the_engine(ROOT, here / "tests", here / "bench") == []


def test_a_read_through_the_engine_is_found(tmp_path: Path) -> None:
    """A read of an engine's part, through ``self.engine``, ``parts.engine`` or an
    ``engine`` argument, is found, in the package and in a test; a call of its public
    methods, and SQLAlchemy's ``engine`` in a module that does not import
    ``ecron.engine``, are not."""
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "engine.py": (
                "class Engine:\n"
                "    def hold(self, x):\n        self._held = x\n"
                "    def _plan(self):\n        pass\n"
            ),
            "scheduler.py": (
                "from ecron.engine import Engine\n"
                "class Scheduler:\n"
                "    def __init__(self, engine: Engine):\n"
                "        self.engine = engine\n"
                "        engine.hold(1)\n"
                "        self.engine.hold(2)\n"
                "        self.engine.executor.backlog.room()\n"
                "        engine.metrics.inc()\n"
                "def f(parts):\n"
                "    return parts.engine.held, parts.engine._plan()\n"
            ),
            "store.py": "def g(engine):\n    return engine.sync_engine\n",
        },
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "def test_x(daemon, engine):\n"
        "    daemon.engine.hold([])\n"
        "    return engine.pool, len(daemon.engine.held)\n"
    )
    assert reads_into_the_engine(root, tests) == [
        "ecron/scheduler.py:7: engine.executor",
        "ecron/scheduler.py:8: engine.metrics",
        "ecron/scheduler.py:10: engine._plan",
        "ecron/scheduler.py:10: engine.held",
        "tests/test_x.py:3: engine.held",
    ]


def test_modules_and_functions_stay_short() -> None:
    """Modules of at most 500 lines, functions of at most 60 (migrations excepted)."""
    assert oversized(ROOT) == []


# --- the checks themselves can fail -------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "ecron"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_long_function_is_found(tmp_path: Path) -> None:
    """A 61-line function is too long."""
    body = "".join(f"    x{n} = {n}\n" for n in range(60))
    root = _package(
        tmp_path,
        {"__init__.py": "", "store/__init__.py": "", "store/base.py": f"def long():\n{body}"},
    )
    assert oversized(root) == ["ecron.store.base.long: 61 lines"]


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
