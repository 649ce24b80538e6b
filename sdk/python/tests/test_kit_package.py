"""The distribution: the standard library only at run time (checked in a virtualenv that has
no aiohttp), released with ecron's version, and its arguments checked naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from datetime import timedelta
from pathlib import Path

import pytest

import ecron_service
from ecron_service import Service

KIT = Path(__file__).resolve().parent.parent
ROOT = KIT.parent.parent

#: Run in the bare virtualenv: import the kit, serve one job through the WSGI adapter
#: (wsgiref) and one through the ASGI adapter (driven by hand), and say what was imported.
BARE_SCRIPT = r"""
import asyncio, importlib.util, json, sys, threading, urllib.request
from wsgiref.simple_server import make_server
import ecron_service
from ecron_service import Run, Service

service = Service()

@service.job("hello")
def hello(run: Run) -> dict:
    run.progress(50, "half-way")
    return {"hello": run.body["name"]}

server = make_server("127.0.0.1", 0, service.wsgi())
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/jobs/hello"
headers = {"X-Ecron-Execution-Id": "e1", "Content-Type": "application/json"}
request = urllib.request.Request(url, data=b'{"name": "bare"}', headers=headers, method="POST")
first = json.load(urllib.request.urlopen(request))
while True:
    report = json.load(urllib.request.urlopen(urllib.request.Request(url + "/e1", headers=headers)))
    if report["status"] != "RUNNING":
        break
server.shutdown()

sent = []
async def asgi() -> None:
    app = service.asgi()
    scope = {"type": "http", "method": "GET", "path": "/jobs/hello/e1", "query_string": b"",
             "raw_path": b"/jobs/hello/e1", "headers": [(b"x-ecron-execution-id", b"e1")]}
    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message: dict) -> None:
        sent.append(message)
    await app(scope, receive, send)
asyncio.run(asgi())
try:
    service.aiohttp_app()
    needs = None
except ImportError as exc:
    needs = str(exc)
service.shutdown()
print(json.dumps({
    "first": first, "report": report, "asgi": json.loads(sent[1]["body"]), "needs": needs,
    "aiohttp_installed": importlib.util.find_spec("aiohttp") is not None,
    "aiohttp_imported": "aiohttp" in sys.modules,
    "from": ecron_service.__file__,
}))
"""


@pytest.mark.slow
def test_the_kit_runs_in_a_virtualenv_without_aiohttp(tmp_path: Path) -> None:
    """In a fresh virtualenv with nothing installed but the kit's source on its path, the
    kit imports, serves a job through WSGI (wsgiref) and ASGI to SUCCESS, imports no
    aiohttp, and ``service.aiohttp_app()`` says which extra it needs."""
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    python = tmp_path / "bare" / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "ecron_service.pth").write_text(str(KIT / "src") + "\n")
    done = subprocess.run(
        [python, "-I", "-c", BARE_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = __import__("json").loads(done.stdout)
    assert seen["first"] == {"status": "RUNNING", "progress": 0}
    assert seen["report"] == {
        "status": "SUCCESS",
        "progress": 100,
        "message": "half-way",
        "result": {"hello": "bare"},
    }
    assert seen["asgi"] == seen["report"]
    assert seen["aiohttp_installed"] is False and seen["aiohttp_imported"] is False
    assert "pip install 'ecron-service[aiohttp]'" in seen["needs"]
    assert seen["from"].startswith(str(KIT / "src"))


def test_the_kit_is_released_with_ecrons_version_and_depends_on_nothing() -> None:
    """sdk/python/pyproject.toml: the distribution ``ecron-service``, ecron's version (also
    ``ecron_service.__version__``), no dependency: aiohttp only as the ``aiohttp`` extra
    (and the tests' tools as ``test``)."""
    kit = tomllib.loads((KIT / "pyproject.toml").read_text())["project"]
    ecron = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert kit["name"] == "ecron-service"
    assert kit["version"] == ecron["version"] == ecron_service.__version__
    assert kit["dependencies"] == []
    assert set(kit["optional-dependencies"]) == {"aiohttp", "test"}
    assert all(d.startswith("aiohttp") for d in kit["optional-dependencies"]["aiohttp"])
    assert sys.version_info >= (3, 11)


def test_wrong_arguments_and_job_names_are_refused_naming_what_is_wrong() -> None:
    """Each argument of ``Service`` and each job name is checked when it is given, and the
    error names the argument and the value."""
    cases = [
        ({"max_running": 0}, "max_running must be at least 1, not 0"),
        ({"keep_ended": -1}, "keep_ended must be 0 seconds or more, not -1"),
        ({"retry_after": 0.5}, "retry_after must be whole seconds, 1 or more, not 0.5"),
        ({"heartbeat": 0}, "heartbeat must be more than 0 seconds, not 0"),
    ]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            Service(**arguments)  # type: ignore[arg-type]
    service = Service(keep_ended=timedelta(minutes=5))
    with pytest.raises(ValueError, match="the name 'a/b' must be 1 to 200 of"):
        service.job("a/b")
    service.job("ok")(lambda run: None)
    with pytest.raises(ValueError, match="there is already a job named 'ok'"):
        service.job("ok")
    assert service.jobs == ["ok"]
