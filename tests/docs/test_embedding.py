"""docs/embedding.md's Flask sample, served by a real HTTP server in its own process: the node
inside it runs the sample's task, and a SIGINT stops the process and, through ``atexit``,
the node (recorded STOPPED)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

from easyjob.core.states import NodeStatus
from easyjob.store import Store
from tests.cluster.harness import wait_until
from tests.rig.servers import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"

SERVE = """
import faulthandler, signal, sys
from werkzeug.serving import make_server
from easyjob import NodeConfig
from app import create_app

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view of a hang
# Ctrl-C's KeyboardInterrupt, also when the tests run in the background of a shell without
# job control: SIGINT is ignored there, and an ignored signal stays ignored across exec
signal.signal(signal.SIGINT, signal.default_int_handler)
url, port = sys.argv[1], int(sys.argv[2])
app = create_app(url, NodeConfig(node_id="web-1", heartbeat=0.2, poll=0.2))
try:
    make_server("127.0.0.1", port, app).serve_forever()
except KeyboardInterrupt:
    pass
"""


def flask_sample() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    (sample,) = [b for b in blocks if "def create_app" in b]
    return str(sample)


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def _exit_code(proc: subprocess.Popen[bytes], timeout: float, log: Path) -> int:
    """*proc*'s exit code; if it has not exited within *timeout* seconds, fail with its log
    and every thread's stack (``faulthandler`` on SIGUSR1). That is how a hang of this test
    was found (2026-11-28): run alone in a shell's background, the app inherited SIGINT
    ignored and served on (see SERVE)."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        raise AssertionError(f"no exit {timeout:g} s after SIGINT:\n{log.read_text()}") from None


def test_the_flask_sample_runs_a_node_inside_the_app(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(flask_sample())
    (tmp_path / "serve.py").write_text(textwrap.dedent(SERVE))
    db = f"sqlite:///{tmp_path}/easyjob.db"
    port = free_port()
    with (tmp_path / "app.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "serve.py", db, str(port)],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def succeeded() -> Any:
                if proc.poll() is not None:
                    return True
                doc = _get(f"http://127.0.0.1:{port}/jobs")
                runs = doc["runs"] if doc else []
                return [r for r in runs if r["task"] == "app.tick" and r["status"] == "SUCCESS"]

            done = wait_until("a run of app.tick to succeed", succeeded, 30)
            assert proc.poll() is None, (tmp_path / "app.log").read_text()
            assert done[0]["result"] == {"answer": 42}
            proc.send_signal(signal.SIGINT)
            assert _exit_code(proc, 30, tmp_path / "app.log") == 0, (
                tmp_path / "app.log"
            ).read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    store = Store.open(db)
    try:
        (node,) = store.nodes.all()[1]
        assert (node.node_id, node.status) == ("web-1", NodeStatus.STOPPED)
    finally:
        store.close()
