"""Rules of the test suite itself: what tests share lives in ``tests/support/``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_a_conftest() -> None:
    """pytest loads each ``conftest.py`` as a plugin: a test that imports one as a module
    too runs it a second time under another name. Helpers that tests import are in
    ``tests/support/`` (task specs and the daemon factory's type in
    ``tests/support/daemon.py``); a conftest holds fixtures only."""
    importing = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if any(name.split(".")[-1] == "conftest" for name in names):
                importing.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert importing == []
