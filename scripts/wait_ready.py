#!/usr/bin/env python3
"""Wait until a tritonserver answers /v2/health/ready; fail early, with its
log, if the server process exits first."""
import argparse
import os
import sys

import local_server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url", help="host:port of the HTTP endpoint")
    ap.add_argument("--pid", type=int, help="server process to watch")
    ap.add_argument("--log", help="server log, printed on failure")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    alive = (lambda: os.path.exists(f"/proc/{args.pid}")) if args.pid else (lambda: True)
    if local_server.wait_ready(args.url, alive, args.timeout):
        return
    if args.log and os.path.exists(args.log):
        sys.stderr.write(open(args.log, errors="replace").read()[-6000:])
    sys.exit(f"tritonserver at {args.url} did not become ready")


if __name__ == "__main__":
    main()
