"""`python -m evalfarm.server ...` == `evalfarm serve ...`."""

from __future__ import annotations

import argparse
import sys

from evalfarm.server.cli import add_serve_arguments, run_serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalfarm serve", description="Run the evaluation-farm daemon.")
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
