"""`learner` console script: a thin argparse dispatcher over subcommands."""

from __future__ import annotations

import argparse
import logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="learner")
    sub = parser.add_subparsers(dest="command", required=True)

    from learner import bench

    bench.build_parser(sub.add_parser("bench", help="training MFU / decode throughput benchmark"))

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "bench":
        result = bench.run(args)
        print(bench._table(result), flush=True)
        return 1 if result["errors"] else 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
