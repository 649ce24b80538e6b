"""README's "Use it" as a newcomer pastes it, in bash: its first shell block in a clone
that holds what "Try it" leaves behind (the ``.venv`` with ecron, ``examples/``, and the
repository's own ``config/``), which makes a directory of its own under ``$HOME`` and goes
there; its two YAML files saved there, where it says; then its second shell block. Only the
two ports are changed, to free ones, and ``$HOME`` is the test's, so that the test runs
beside anything else on the machine."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
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
    fails, naming it (``ecron plan`` must exit 2, which says that the files would change
    something, as the README says; the wait loop fails until the daemon is up)."""
    checked = []
    for number, line in enumerate(lines):
        checked.append(line)
        if line.strip() and not line.startswith("until "):
            wanted = 2 if line.startswith("ecron plan") else 0
            checked.append(
                f'status=$?; [ "$status" -eq {wanted} ] || {{ echo "FAILED ($status): line '
                f'{number}"; kill $(jobs -p) 2>/dev/null; exit 1; }}'
            )
    return "\n".join(checked)


def saved(path: str, body: str) -> str:
    """A shell command that saves ``body`` as ``path`` (relative to where the reader is), as
    a reader saves a file the README shows."""
    return f"cat > {path} <<'ECRON_README_EOF'\n{body}ECRON_README_EOF"


def digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and the SHA-256 of its content."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_the_use_it_section_runs_as_pasted_in_a_directory_of_its_own(tmp_path: Path) -> None:
    """The first shell block goes to a new directory under ``$HOME``; each YAML block names
    its file in its first line and is saved there; the second shell block starts the example
    service and the daemon with their logs in files (none in the reader's terminal), has
    ``ecron plan`` exit 2 (something to add), runs the task twice (once waiting with a
    progress bar, once watched by its id), shows it by a prefix of the id, checks the
    service and stops both: no command is missing, no line fails, both runs end SUCCESS,
    and the clone's ``config/`` (and this repository's) is left as it was.
    It takes 30 to 40 s, over the 30 s of the suite's rule: every command of the section
    runs as a newcomer's would, each a process started from nothing (the service, the
    daemon, plan, two runs of the task to their end, check-service)."""
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
    saves = []
    for body in files:
        name = re.match(r"# (\S+)\n", body)
        assert name is not None, f"a YAML block of Use it does not name its file: {body[:60]}"
        saves.append(saved(name.group(1), local(body)))
    setup, commands = blocks(section, "sh")
    clone, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    (clone / "examples").mkdir(parents=True)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    (clone / "examples" / "job_service.py").symlink_to(ROOT / "examples" / "job_service.py")
    shutil.copytree(ROOT / "config", clone / "config")
    ours, theirs = digest(ROOT / "config"), digest(clone / "config")
    lines = [*local(setup).splitlines(), *saves, *local(commands).splitlines()]
    (tmp_path / "use-it.sh").write_text(script(lines) + "\nwait\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ECRON_", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    # the commands' default daemon, http://127.0.0.1:8080, moved to the free port too
    env["ECRON_API_URL"] = f"http://127.0.0.1:{daemon_port}"
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if not part.startswith(sys.prefix)
    )
    with subprocess.Popen(
        ["bash", str(tmp_path / "use-it.sh")],
        cwd=clone,
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
    assert "+ nightly-report" in output, output  # what plan said it would add
    mine = home / "ecron-first"
    assert (mine / "config" / "tasks" / "reports.yaml").is_file() and (
        mine / "config" / "ecron.db"
    ).is_file()
    logs = (mine / "ecron.log").read_text(), (mine / "service.log").read_text()
    assert "daemon_started" in logs[0] and "daemon_started" not in output, output
    assert logs[1] and not any(line in output for line in logs[1].splitlines()[:3]), logs[1]
    assert digest(clone / "config") == theirs and digest(ROOT / "config") == ours
    assert sorted(path.name for path in clone.iterdir()) == [".venv", "config", "examples"]
