"""Profiles of the daemon with py-spy, and their summary: top frames by own and total time.

A benchmark given ``--profile FILE`` records the daemon with ``py-spy record --format raw``
(collapsed stacks, sampled without pausing it) during its measured window and prints the
summary. ``python -m bench.profile FILE [--top N]`` summarises a raw file recorded earlier.

Own time is the share of samples in which a function is the innermost frame; total time is
the share in which it is anywhere on the stack. Idle threads (the event loop waiting in
``epoll``) are not sampled, so the shares are of the time the process was busy.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: Files whose frames sit under everything (the loop, the CLI): left out of "total".
PLUMBING = (
    "asyncio/base_events.py",
    "asyncio/runners.py",
    "asyncio/events.py",
    "runpy.py",
    "threading.py",
    "click/",
    "ecron/cli/",
    "ecron/__main__.py",
    # The daemon as installed: the venv's ``ecron`` script, and the loop it runs on.
    "bin/ecron)",
    "ecron/loop.py",
    "uvloop/__init__.py",
)
#: The bottom frame of the main thread (the event loop's): ``python -m ecron`` or the script.
MAIN_THREAD = ("_run_module_as_main", "<module> (")
#: The repository root: frames of its files are shown relative to it.
ROOT = str(Path(__file__).resolve().parent.parent)
#: The files of ``ecron/executor`` (a namespace package, which py-spy's short names lose).
EXECUTOR_FILES = {"http.py", "outcomes.py", "runner.py", "stopping.py", "trigger.py"}
#: ``function (path/to/file.py)``: py-spy's frame with ``--nolineno``.
FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]*)\)$")


class Recorder:
    """``py-spy record`` attached to one process until ``stop()``."""

    def __init__(self, pid: int, output: Path, rate: int = 100) -> None:
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.output = output
        command = [binary, "record", "--pid", str(pid), "--format", "raw", "--nolineno"]
        command += ["--full-filenames"]  # ecron/executor has no __init__: py-spy would cut it
        command += ["--nonblocking", "--rate", str(rate), "--output", str(output)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    async def stop(self) -> dict[str, Any]:
        """Stop recording (py-spy writes its file on SIGINT); the summary."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(self.process.wait, 30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return summarise(self.output) if self.output.exists() else {"samples": 0}


def short(frame: str) -> str:
    """``function (file)`` with the file cut to its package-relative part."""
    match = FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/lib/python3.", f"{ROOT}/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            path = path.split("/", 1)[1] if marker == "/lib/python3." else path
    if path in EXECUTOR_FILES:  # recorded without --full-filenames
        path = f"ecron/executor/{path}"
    return f"{match['function']} ({path})"


def summarise(path: Path, top: int = 15) -> dict[str, Any]:
    """Own and total shares (percent of samples) of the ``top`` frames of a raw profile."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    ecron: Counter[str] = Counter()
    samples = loop = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [short(f) for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        loop += n if frames[0].startswith(MAIN_THREAD) else 0
        for frame in set(frames):
            if not any(part in frame for part in PLUMBING):
                total[frame] += n
            if "(ecron/" in frame and not any(part in frame for part in PLUMBING):
                ecron[frame] += n

    def shares(counter: Counter[str]) -> list[list[Any]]:
        return [[frame, round(100 * n / samples, 1)] for frame, n in counter.most_common(top)]

    if not samples:
        return {}
    return {
        "samples": samples,
        #: Samples on the main thread (the event loop); the rest are the driver's threads.
        "event_loop_thread": round(100 * loop / samples, 1),
        "own": shares(own),
        "total": shares(total),
        "ecron_total": shares(ecron),
    }


def show(summary: dict[str, Any]) -> None:
    """Print a summary as two short tables."""
    print(f"\nprofile: {summary.get('samples', 0)} samples of the busy process")
    print(f"  on the event loop's thread: {summary.get('event_loop_thread')}%")
    for kind in ("own", "total", "ecron_total"):
        print(f"  top by {kind} time:")
        for frame, share in summary.get(kind, []):
            print(f"    {share:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    show(summarise(args.file, args.top))


if __name__ == "__main__":
    main()
