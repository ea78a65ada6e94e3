"""examples/Dockerfile, examples/compose.yaml and examples/kubernetes.yaml, checked as far as
a machine without Docker allows: the files parse with the services and probes the docs
promise, every command they run is a command easyjob has, the files they copy exist, and the
nodes' and dashboard's commands and health checks work when run here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from easyjob import __version__
from easyjob.bench.server_cpu import listening_ports
from easyjob.cli.options import build_parser
from tests.cluster.harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EASYJOB_SERVICES = ("node-1", "node-2", "dashboard")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / "compose.yaml").read_text())
    return loaded


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments left out."""
    text = (EXAMPLES / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def _parses(argv: list[str]) -> None:
    build_parser(__version__).parse_args(argv)  # SystemExit on an unknown command or option


def test_compose_has_a_database_two_nodes_and_the_dashboard() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", *EASYJOB_SERVICES}
    for name in EASYJOB_SERVICES:
        service = services[name]
        assert service["build"]["dockerfile"] == "examples/Dockerfile"
        assert (EXAMPLES / service["build"]["context"] / "examples/Dockerfile").is_file()
        assert service["environment"]["EASYJOB_DB"].startswith("postgresql://easyjob:")
        assert "@db:5432/" in service["environment"]["EASYJOB_DB"]
        _parses(service["command"])
        assert "depends_on" not in service  # they wait for the database themselves


def _probe_port(service: dict[str, Any]) -> int:
    command = service["command"]
    return int(command[command.index("--http") + 1].rsplit(":", 1)[1])


def test_compose_health_checks_ask_healthz_on_the_served_port() -> None:
    services = _compose()["services"]
    for name in EASYJOB_SERVICES:
        check = services[name]["healthcheck"]["test"]
        assert check[:3] == ["CMD", "python", "-c"]
        assert f"http://127.0.0.1:{_probe_port(services[name])}/healthz" in check[3]


def test_kubernetes_probes_are_healthz_and_readyz_on_the_served_port() -> None:
    documents = list(yaml.safe_load_all((EXAMPLES / "kubernetes.yaml").read_text()))
    containers = [c for d in documents for c in d["spec"]["template"]["spec"]["containers"]]
    assert {c["args"][0] for c in containers} == {"run", "dashboard"}
    for container in containers:
        _parses(container["args"])
        port = int(container["args"][container["args"].index("--http") + 1].rsplit(":", 1)[1])
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}


def test_the_dockerfile_copies_what_exists_and_runs_easyjob_commands() -> None:
    steps = _dockerfile()
    kinds = [kind for kind, _ in steps]
    assert kinds[0] == "FROM" and steps[0][1].startswith("python:3.11")
    run = " ".join(args for kind, args in steps if kind == "RUN")
    assert "pip install --no-cache-dir '/src[postgres,mysql]'" in run
    assert "cp /src/examples/jobs.py /srv/jobs.py" in run
    assert (ROOT / "examples/jobs.py").is_file()
    (entry,) = [args for kind, args in steps if kind == "ENTRYPOINT"]
    (cmd,) = [args for kind, args in steps if kind == "CMD"]
    assert yaml.safe_load(entry) == ["easyjob"]
    _parses(yaml.safe_load(cmd))
    assert ("USER", "easyjob") in steps


def _run_service(name: str, db_url: str, tmp_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """The service's command as the image runs it (easyjob + command, in the image's working
    directory with jobs.py), on port 0 and *db_url*."""
    command = list(_compose()["services"][name]["command"])
    command[command.index("--http") + 1] = "127.0.0.1:0"
    env = {**os.environ, "EASYJOB_DB": db_url, "EASYJOB_LOG_FORMAT": "json"}
    with (tmp_path / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "easyjob", *command],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc


def _passes(check: str, proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether the health check *check* (Python code naming *port*) passes on a port the
    process listens on now (a node binds port 0 once while it waits, once when it runs)."""
    assert proc.poll() is None, f"exited with {proc.returncode}"
    for bound in listening_ports(proc.pid):
        code = check.replace(f":{port}/", f":{bound}/")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
        if done.returncode == 0:
            return True
    return False


@pytest.mark.parametrize("name", EASYJOB_SERVICES)
def test_each_service_starts_before_the_tables_and_passes_its_health_check(
    name: str, db_url: str, tmp_path: Path
) -> None:
    image_dir = tmp_path / "srv"
    image_dir.mkdir()
    (image_dir / "jobs.py").write_text((EXAMPLES / "jobs.py").read_text())
    service = _compose()["services"][name]
    check, port = service["healthcheck"]["test"][3], _probe_port(service)
    proc = _run_service(name, db_url, tmp_path, image_dir)
    try:
        wait_until("the health check to pass", lambda: _passes(check, proc, port), 60)
        if name == "dashboard":  # it waits for a node to create the tables: /readyz says so
            ready = check.replace("/healthz", "/readyz")
            assert not _passes(ready, proc, port)
            node = _run_service("node-1", db_url, tmp_path, image_dir)
            try:
                wait_until("the dashboard to be ready", lambda: _passes(ready, proc, port), 60)
                wait_until("the node to be ready", lambda: _passes(ready, node, port), 60)
            finally:
                node.send_signal(signal.SIGTERM)
                assert node.wait(60) == 0
        else:  # the health check also passes while a node waits; stop it once it runs
            ready = check.replace("/healthz", "/readyz")
            wait_until("the node to be ready", lambda: _passes(ready, proc, port), 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait(10)
