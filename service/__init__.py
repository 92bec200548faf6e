"""The FastAPI service, persistence, CLI and HTTP client: the only layer with I/O."""

from service.app import create_app
from service.client import ApiProblemError, AtlasClient
from service.settings import Settings, get_settings

__all__ = ["ApiProblemError", "AtlasClient", "Settings", "create_app", "get_settings"]
