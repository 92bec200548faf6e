"""The dependency direction api_schemas <- models <- solver <- service, kept by a test.

Walks every module's imports (AST) and fails on an edge that points the wrong way, and on
any import of `research` or `tests` from a package.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED: dict[str, set[str]] = {
    "api_schemas": {"api_schemas"},
    "models": {"api_schemas", "models"},
    "solver": {"api_schemas", "models", "solver"},
    "service": {"api_schemas", "models", "solver", "service"},
    "calibration": {"api_schemas", "calibration"},
}
OURS = set(ALLOWED) | {"research", "tests", "benchmarks"}


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_point_one_way(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_top_levels(path) - ALLOWED[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "forbidden imports:\n" + "\n".join(offenders)


def _imports_ortools(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.startswith("ortools") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ortools"):
            return True
    return False


def test_only_solver_cpsat_imports_ortools() -> None:
    """or-tools is confined to solver/cpsat.py, so an API change touches one file."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in ALLOWED
        for path in sorted((ROOT / package).rglob("*.py"))
        if _imports_ortools(path) and path.relative_to(ROOT) != Path("solver/cpsat.py")
    ]
    assert not offenders, f"ortools imported outside solver/cpsat.py: {offenders}"


# The rooms of models/: the catalog <- the core <- the evidence; the labs build on the core.
# `models.errors` is shared by every room. ARCHITECTURE.md draws the same picture.
ROOMS_ALLOWED: dict[str, set[str]] = {
    "catalog": {"errors", "catalog"},
    "core": {"errors", "catalog", "core"},
    "evidence": {"errors", "catalog", "core", "evidence"},
    "labs": {"errors", "catalog", "core", "labs"},
}


def _imported_rooms(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rooms: set[str] = set()
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "models" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


def test_models_has_only_rooms_at_its_top() -> None:
    """Every module of models/ lives in a room; only the shared errors sit at the top."""
    top = sorted(p.name for p in (ROOT / "models").iterdir()
                 if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    assert top == ["__init__.py", "catalog", "core", "errors.py", "evidence", "labs"]


@pytest.mark.parametrize("room", sorted(ROOMS_ALLOWED))
def test_model_rooms_import_one_way(room: str) -> None:
    offenders = []
    for path in sorted((ROOT / "models" / room).rglob("*.py")):
        bad = _imported_rooms(path) - ROOMS_ALLOWED[room]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "imports against the rooms' direction:\n" + "\n".join(offenders)
