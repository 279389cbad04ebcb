"""CRC32C (Castagnoli), the checksum of every stored batch, index file and journal record.

One import site for the ``crc32c`` package's C function. Importing the package runs
``importlib.metadata.version("crc32c")`` (its ``__version__``), which imports
``importlib.metadata`` and walks every ``sys.path`` entry, opening each zip file on it: 15-20 ms
of a node's start, and more in a Spark Python worker, whose path holds Spark's zips and which
a query's planning starts afresh. The checksum lives in the package's extension module,
``crc32c._crc32c``; it is loaded here by the standard extension loader straight from the
package's directory, without running the package's ``__init__``. If that fails (another layout
of the package), the package is imported the usual way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

_NAME = "crc32c._crc32c"


def _load_extension() -> ModuleType | None:
    """The extension module, loaded from the package directory without importing the package."""
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    pkg = importlib.util.find_spec("crc32c")  # locates; does not execute the package
    if pkg is None or not pkg.submodule_search_locations:
        return None
    for where in pkg.submodule_search_locations:
        finder = importlib.machinery.FileFinder(
            where, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
        )
        spec = finder.find_spec(_NAME)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # The package's own ``from ._crc32c import ...`` finds it here if it is imported later.
        sys.modules[_NAME] = module
        return module
    return None


def _resolve() -> Callable[..., int]:
    try:
        ext = _load_extension()
    except (ImportError, OSError):
        ext = None
    fn: Any = getattr(ext, "crc32c", None)
    if fn is None:
        from crc32c import crc32c as fn
    return fn


crc32c: Callable[..., int] = _resolve()
"""``crc32c(data, value=0)``: the CRC32C of ``data`` (any buffer), continuing from ``value``."""
