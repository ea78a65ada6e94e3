"""The package as pip installs it: built without a setuptools warning, MIT with its LICENSE,
the extras docs name, and everything ``easyjob`` needs at run time inside the wheel (the
migrations, the dashboard's templates)."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel pip builds from the repository, and pip's output."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = out.glob("easyjob-*.whl")
    return path, built.stdout + built.stderr


def test_the_build_prints_no_setuptools_warning(wheel: tuple[Path, str]) -> None:
    _, output = wheel
    warnings = [line for line in output.splitlines() if "Warning" in line or "!!" in line]
    assert warnings == []


def test_the_wheel_holds_what_runs_and_the_license(wheel: tuple[Path, str]) -> None:
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for needed in (
        "easyjob/store/migrations/env.py",
        "easyjob/store/migrations/versions/schema_1.py",
        "easyjob/store/migrations/versions/schema_4.py",
        "easyjob/store/migrations/versions/schema_5.py",
        "easyjob/store/migrations/versions/schema_6.py",
        "easyjob/web/templates/overview.html",
        "easyjob/web/static/style.css",
        "easyjob/py.typed",
    ):
        assert needed in names, needed
    (license_file,) = [n for n in names if n.endswith("licenses/LICENSE")]
    assert zipfile.ZipFile(path).read(license_file).startswith(b"MIT License")


def test_metadata_says_mit_and_offers_the_driver_extras(wheel: tuple[Path, str]) -> None:
    path, _ = wheel
    with zipfile.ZipFile(path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    assert metadata["License"] == "MIT"
    assert {"postgres", "mysql"} <= set(metadata.get_all("Provides-Extra") or [])
    requires = metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("alembic") for r in requires)
    assert any(r.startswith("PyMySQL") and 'extra == "mysql"' in r for r in requires)


def test_the_docs_name_only_extras_that_exist() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    extras = set(config["options.extras_require"])
    text = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    text += (ROOT / "README.md").read_text()
    named = {part.split("]")[0] for part in text.split("easyjob[")[1:]}
    assert named and named <= extras, named - extras
