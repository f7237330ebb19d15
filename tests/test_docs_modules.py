"""docs/ARCHITECTURE.md's table of modules names every module of the package: a module
added without its line (`link_checks.py`, `ref_owners.py`) left readers without a map."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_has_its_line_in_the_architecture() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    modules = sorted(p.name for p in (ROOT / "gitmem").glob("*.py")
                     if p.name not in ("__init__.py", "__main__.py"))  # cli/: one line
    unnamed = [m for m in modules if m not in doc]
    assert unnamed == []
