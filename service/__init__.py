"""The FastAPI service, persistence, CLI and HTTP client: the only layer with I/O.

Owns: the package's public names, imported on first use (`service.create_app`, ...), so
that importing a submodule (the CLI, a server worker process) does not import the web
framework, the database layer and the solver before they are needed. Must not: import
anything heavy at import time.
"""

from typing import TYPE_CHECKING, Any

from solver.lazy_names import lazy_name

if TYPE_CHECKING:
    from service.app import create_app
    from service.client import ApiProblemError, AtlasClient
    from service.settings import Settings, get_settings

_LAZY = {
    "create_app": "service.app",
    "ApiProblemError": "service.client",
    "AtlasClient": "service.client",
    "Settings": "service.settings",
    "get_settings": "service.settings",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access."""
    return lazy_name(__name__, _LAZY, name)


__all__ = ["ApiProblemError", "AtlasClient", "Settings", "create_app", "get_settings"]
