"""FastAPI dependencies: the service context, a database session per request, settings.

Owns: `ServiceContext` (what the lifespan builds: settings, engine, store gate, solver pool,
planner) and the `Annotated` dependency aliases routes declare. Must not: build anything itself; the
app factory's lifespan does.
"""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine

from service.persistence.gate import StoreGate
from service.planning import Planner
from service.pool import SolverPool
from service.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceContext:
    """Everything a request needs beyond its body, built once at start-up."""

    settings: Settings
    engine: Engine
    store: StoreGate
    pool: SolverPool
    planner: Planner


def get_context(request: Request) -> ServiceContext:
    """The context the lifespan stored on the app."""
    context: ServiceContext = request.app.state.context
    return context


ContextDep = Annotated[ServiceContext, Depends(get_context)]


def get_settings_dep(context: ContextDep) -> Settings:
    """The settings of the running app (not re-read from the environment)."""
    return context.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]

__all__ = [
    "ContextDep",
    "ServiceContext",
    "SettingsDep",
    "get_context",
    "get_settings_dep",
]
