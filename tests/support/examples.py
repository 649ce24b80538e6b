"""The example user services (examples/ is not a package): loaded from their files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def load_example(filename: str) -> ModuleType:
    """Import ``examples/<filename>`` as a module."""
    spec = importlib.util.spec_from_file_location(
        f"ecron_example_{Path(filename).stem}", EXAMPLES / filename
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
