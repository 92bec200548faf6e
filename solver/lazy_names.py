"""Public names of a package imported with their module on first access (PEP 562).

Owns: the lookup behind the `__getattr__` of the packages' `__init__` modules (`solver`,
`solver.placement`, `service`), which keep their `__init__` light: a public name's module
is imported only when the name is first used. Must not: import anything at import time.
"""

import importlib
from collections.abc import Mapping
from typing import Any


def lazy_name(package: str, modules: Mapping[str, str], name: str) -> Any:
    """`name` of `package`, imported from its module in `modules` (public name -> module).

    Raises:
        AttributeError: `modules` does not list `name`, as for any missing attribute.
    """
    module_name = modules.get(name)
    if module_name is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
