"""Parse benchmark: reading ``messages.jsonl`` back into messages, the cost every log
replay, reflection slice and ``agentctl messages`` pays. Prints figures; asserts nothing.

    python tests/bench/parse_bench.py [--lines 100000] [--against <git rev>]

The log is the 2026-11 fixture (one of every kind) cycled to ``--lines`` lines. With
``--against`` the same log is also read by that revision's ``shared/`` (exported to a
temporary directory), interleaved run by run, and the ratio printed: telling message kinds
apart must not make reading a long log materially slower.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "store" / "fixtures" / "messages-2026-11.jsonl"
RUNS = 5


def write_log(path: Path, lines: int) -> None:
    kinds = FIXTURE.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as log:
        for n in range(lines):
            line = kinds[n % len(kinds)]
            log.write(line.replace(b"msg-01HFIXTURE", b"msg-%013d" % n, 1))


def read_once(path: Path) -> float:
    """Seconds to read every message of ``path`` with the ``shared`` on ``sys.path``."""
    from shared.store.jsonl import MessageLog

    start = time.perf_counter()
    count = sum(1 for _ in MessageLog(path))
    elapsed = time.perf_counter() - start
    if count == 0:
        raise SystemExit(f"{path}: no message was readable")
    return elapsed


def timed_by(source: Path, path: Path) -> float:
    """One read of ``path`` by the ``shared/`` under ``source``, in a fresh interpreter."""
    code = (
        "import sys; from pathlib import Path; from tests.bench.parse_bench import read_once; "
        "print(read_once(Path(sys.argv[1])))"
    )
    env_path = f"{source}:{ROOT}"
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        cwd=source,
    )
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--against", help="a git revision to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "messages.jsonl"
        write_log(log, args.lines)
        sources = {"this tree": ROOT}
        if args.against:
            other = Path(tmp) / "against"
            other.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.against, "shared"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(other)], input=archive, check=True)
            sources[args.against] = other
        best = dict.fromkeys(sources, float("inf"))
        for _ in range(RUNS):
            for name, source in sources.items():
                best[name] = min(best[name], timed_by(source, log))
    for name, seconds in best.items():
        per_line = seconds / args.lines * 1e6
        print(f"{name}: {args.lines} lines in {seconds * 1000:.0f} ms ({per_line:.2f} µs a line)")
    if args.against:
        print(f"ratio this tree / {args.against}: {best['this tree'] / best[args.against]:.2f}")


if __name__ == "__main__":
    main()
