"""What the side-by-side benchmark drivers share (scripts/bench_batched.sh,
scripts/lib/bench_moe.py): the raw JSON-lines log of a run, and running one tool with its
JSON lines parsed and a failure logged rather than fatal."""
import json
import subprocess
import sys


class RawLog:
    """Appends one JSON object per line to `path`; `who` names the driver in messages."""

    def __init__(self, path: str, who: str):
        self.raw = open(path, "a")
        self.who = who

    def record(self, obj) -> None:
        self.raw.write(json.dumps(obj) + "\n")
        self.raw.flush()

    def run(self, cmd: list) -> list:
        """The JSON lines `cmd` prints (stdout, then stderr); on a non-zero exit, none, its
        last stderr line printed and recorded."""
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{self.who}: {cmd[0]} failed (exit {p.returncode}): {tail}", file=sys.stderr)
            self.record({"cmd": cmd, "error": tail})
            return []
        return [json.loads(line) for line in (p.stdout + "\n" + p.stderr).splitlines() if line.startswith("{")]
