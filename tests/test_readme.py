"""README's "Use it" as a newcomer pastes it: its two YAML files saved where it says, then
its shell block run in bash, in a directory that holds what "Try it" leaves behind (the
``.venv`` with ecron, ``examples/job_service.py``). Only the two ports are changed, to
free ones, so that the test runs beside anything else on the machine."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The ports the README uses: the daemon's and the example service's.
DAEMON_PORT, SERVICE_PORT = "8080", "8081"

pytestmark = pytest.mark.slow


def use_it() -> str:
    """The text of README's "Use it" section, up to the next heading of its level or above."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Use it\n")
    end = re.compile(r"\n###? ").search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def blocks(section: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``section``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def script(lines: list[str]) -> str:
    """The lines as typed, each followed by a check that stops the script at the first that
    fails, naming it (``ecron plan`` exits 2 to say that the files would change something,
    which is what it is run for; the wait loop fails until the daemon is up)."""
    checked = []
    for number, line in enumerate(lines):
        checked.append(line)
        if line.strip() and not line.startswith(("ecron plan", "until ")):
            checked.append(
                f'status=$?; [ "$status" -eq 0 ] || {{ echo "FAILED ($status): line {number}"; '
                "kill $(jobs -p) 2>/dev/null; exit 1; }"
            )
    return "\n".join([*checked, "wait", ""])


def test_the_use_it_section_runs_as_pasted(tmp_path: Path) -> None:
    """Each YAML block names its file in its first line; the shell block starts the example
    service and the daemon, runs the task twice (once waiting with a progress bar, once
    watched by its id), shows it by a prefix of the id, checks the service and stops both:
    no command is missing, no line fails, and both runs end SUCCESS."""
    section = use_it()
    daemon_port, service_port = free_port(), free_port()

    def local(text: str) -> str:
        return (
            text.replace(f":{DAEMON_PORT}", f":{daemon_port}")
            .replace(f"--port {SERVICE_PORT}", f"--port {service_port}")
            .replace(f":{SERVICE_PORT}", f":{service_port}")
        )

    files = blocks(section, "yaml")
    assert len(files) == 2, "README's Use it shows config/ecron.yaml and a task file"
    for body in files:
        name = re.match(r"# (\S+)\n", body)
        assert name is not None, f"a YAML block of Use it does not name its file: {body[:60]}"
        path = tmp_path / name.group(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(local(body), encoding="utf-8")
    (shell,) = blocks(section, "sh")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "job_service.py").symlink_to(ROOT / "examples" / "job_service.py")
    lines = local(shell).splitlines()
    (tmp_path / "use-it.sh").write_text(script(lines), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ECRON_", "VIRTUAL_ENV"))}
    # the commands' default daemon, http://127.0.0.1:8080, moved to the free port too
    env["ECRON_API_URL"] = f"http://127.0.0.1:{daemon_port}"
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if not part.startswith(sys.prefix)
    )
    with subprocess.Popen(
        ["bash", "use-it.sh"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the service and the daemon it starts go with it
    ) as bash:
        try:
            output, _ = bash.communicate(timeout=110)
        except subprocess.TimeoutExpired:
            os.killpg(bash.pid, signal.SIGKILL)
            output, _ = bash.communicate()
            raise AssertionError(f"Use it did not end within 110 s:\n{output}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bash.pid, signal.SIGKILL)
    failed = re.search(r"FAILED \((\d+)\): line (\d+)", output)
    assert failed is None, f"{lines[int(failed.group(2))]!r} exited {failed.group(1)}:\n{output}"
    assert bash.returncode == 0, output
    assert "command not found" not in output and "Traceback" not in output, output
    assert output.count("SUCCESS") >= 2, output
    assert "8 passed: the service follows the protocol" in output, output
