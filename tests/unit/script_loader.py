"""Import an extensionless script of the collection (scripts/*, a role's files/*) as a module."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path, *, reuse: bool = False) -> ModuleType:
    """Execute ``path`` as module ``name``, registered in sys.modules (dataclasses look their
    module up there). ``reuse``: return the module already loaded under that name."""
    if reuse and name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
