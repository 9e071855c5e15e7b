"""How long a standby judge takes to start up on one device, alone (no evaluation running):
its interpreter and imports, then its workers and device contexts, by the host's clock.

    python benchmarks/probes/standby_startup_probe.py --device cuda --repeats 3
"""

from __future__ import annotations

import argparse
import time

from evalfarm.judge import framing
from evalfarm.judge.standby import JudgeProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for i in range(args.repeats):
        judge = JudgeProcess(args.device, request_timeout_s=120)
        try:
            deadline = time.monotonic() + 90
            while not judge.ready and time.monotonic() < deadline:
                if judge.conn.poll(0.05):
                    judge.note_message(framing.recv_json(judge.conn, 0))
            t = time.monotonic()
            judge.close()
            print(f"start {i + 1}: {judge.startup or 'not ready in 90 s'}; killed in {time.monotonic() - t:.2f} s")
        finally:
            judge.close()


if __name__ == "__main__":
    main()
