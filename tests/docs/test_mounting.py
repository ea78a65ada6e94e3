"""docs/embedding.md's mounting samples, each run in its own process: Flask (werkzeug's
DispatcherMiddleware), Django (easyjob.web.mount around the project's application) and
FastAPI (a2wsgi's WSGIMiddleware, through the ASGI interface). Each serves the dashboard
under /easyjob and its node's endpoints under /node beside the application's own route."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"

#: Asks the mounted application; prints one JSON object of what it answered.
ASK = """
import json, sys, time
sys.path.insert(0, ".")
framework = sys.argv[1]
REQUESTS = [("GET", "/"), ("GET", "/easyjob/"), ("GET", "/easyjob/tasks"),
            ("GET", "/easyjob/static/style.css"), ("HEAD", "/easyjob/tasks"),
            ("GET", "/node/metrics"), ("HEAD", "/node/metrics"), ("GET", "/easyjob/nope")]

def answers(call):
    found = {}
    for method, path in REQUESTS:
        status, body = call(method, path)
        found[f"{method} {path}"] = [status, body]
    deadline = time.monotonic() + 20
    while True:  # the node's first heartbeat makes it healthy
        status, body = call("GET", "/node/healthz")
        if status == 200 or time.monotonic() > deadline:
            found["GET /node/healthz"] = [status, body]
            return found

if framework == "fastapi":
    from fastapi.testclient import TestClient
    import fastapi_app
    with TestClient(fastapi_app.app) as client:
        def call(method, path):
            r = client.request(method, path)
            return r.status_code, r.text
        print(json.dumps(answers(call)))
else:
    from werkzeug.test import Client
    module = __import__("flask_app" if framework == "flask" else "wsgi")
    client = Client(module.app if framework == "flask" else module.application)
    def call(method, path):
        r = client.open(path, method=method)
        return r.status_code, r.get_data(as_text=True)
    print(json.dumps(answers(call)))
"""

SAMPLES = {"flask": "flask_app.py", "django": "wsgi.py", "fastapi": "fastapi_app.py"}


def sample(filename: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    (found,) = [b for b in blocks if b.startswith(f'"""{filename}:')]
    return str(found)


@pytest.mark.parametrize("framework", list(SAMPLES))
def test_a_mounting_sample_serves_the_dashboard_and_the_node(
    framework: str, tmp_path: Path
) -> None:
    pytest.importorskip(framework)
    (tmp_path / SAMPLES[framework]).write_text(sample(SAMPLES[framework]))
    (tmp_path / "ask.py").write_text(textwrap.dedent(ASK))
    env = {"EASYJOB_DB": f"sqlite:///{tmp_path}/easyjob.db", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "ask.py", framework],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    module = SAMPLES[framework].removesuffix(".py")
    assert got["GET /"][0] == 200 and "my site" in got["GET /"][1]
    status, overview = got["GET /easyjob/"]
    assert status == 200 and 'href="/easyjob/tasks"' in overview  # links follow the mount
    status, tasks = got["GET /easyjob/tasks"]
    assert status == 200 and f"{module}.tick" in tasks
    assert got["GET /easyjob/static/style.css"][0] == 200
    assert got["HEAD /easyjob/tasks"] == [200, ""]
    status, metrics = got["GET /node/metrics"]
    assert status == 200 and 'easyjob_db_errors_total{kind="deadlock"} 0.0' in metrics
    assert got["HEAD /node/metrics"] == [200, ""]
    assert got["GET /easyjob/nope"][0] == 404
    status, health = got["GET /node/healthz"]
    assert status == 200 and json.loads(health)["status"] == "ok"
