"""docs/architecture.md is the newcomer's map: every module it leaves out is a room nobody finds.

Fails when a `.py` module under tkf_infra/, components/, providers/ or policy/ is added (or renamed)
without the map naming it, so the map stays true as the code moves.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("tkf_infra", "components", "providers", "policy")


def modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                  if ".venv" not in p.parts and p.name != "__init__.py")


def anchor(module: Path) -> str:
    """The package a table row of the map is about: `tkf_infra/<sub>/`, else the top folder."""
    parts = module.parts
    return f"`{parts[0]}/{parts[1]}/" if parts[0] == "tkf_infra" and len(parts) > 2 else f"`{parts[0]}/"


def mentioned(module: Path, lines: list[str]) -> bool:
    """Named by its path anywhere, or by its file name (or `stem`) in the row of its package."""
    if any(module.as_posix() in line for line in lines):
        return True
    names = (module.name, f"`{module.stem}`", f"`{module.stem}`/")
    return any(anchor(module) in line and any(n in line for n in names) for line in lines)


def test_every_module_is_on_the_architecture_map() -> None:
    lines = DOC.read_text().splitlines()
    missing = [m.as_posix() for m in modules() if not mentioned(m, lines)]
    assert not missing, ("docs/architecture.md does not name these modules; add each to its package's row of the "
                         f"'Packages' table (what it owns, what it may import): {', '.join(missing)}")


def test_every_top_level_folder_is_on_the_architecture_map() -> None:
    text = DOC.read_text()
    folders = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                     and p.name not in ("rendered", "node_modules"))
    missing = [f for f in folders if f"`{f}/" not in text]
    assert not missing, f"docs/architecture.md names no row for these folders: {', '.join(missing)}"


def test_every_module_path_the_map_names_exists() -> None:
    """The other half of "true": a renamed or deleted module leaves no path behind in the map."""
    import re

    text = DOC.read_text()
    paths = set(re.findall(r"`((?:tkf_infra|components|providers|policy|bench|scripts|tests|examples)/[\w/]+\.py)",
                           text))
    gone = sorted(p for p in paths if not (ROOT / p).exists())
    assert paths and not gone, f"docs/architecture.md names modules that do not exist: {', '.join(gone)}"
