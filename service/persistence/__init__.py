"""Plan storage with SQLModel: the table, the engine and the repository functions.

Owns: everything that talks to the database. Must not: solve or validate plans.
"""

from service.persistence.db import check_database, init_db, make_engine
from service.persistence.repo import (
    PlanPage,
    find_plan_by_hash,
    get_plan,
    list_plans,
    save_plan,
)
from service.persistence.tables import PlanRecord

__all__ = [
    "PlanPage",
    "PlanRecord",
    "check_database",
    "find_plan_by_hash",
    "get_plan",
    "init_db",
    "list_plans",
    "make_engine",
    "save_plan",
]
