"""The fleet's router (deploy/kubernetes/router/nginx.conf) run locally by Debian's nginx.

    router = Router(tmp_path, http_ports=[8000 of each replica], grpc_ports=[8001 of each])
    router.ports[8000], router.ports[8001]   # where clients connect (HTTP, gRPC)
    router.stop()

`render` swaps only the cluster-only parts of the config (the DNS-resolved upstream server, the
resolver, the listen ports) for local ones: everything else, the hash on the sequence header
included, is the deployed file. `hashed_header()` is the header that hash reads.
tests/test_deploy.py routes through it to stand-in replicas, tests/test_fleet.py to real servers.
"""

from __future__ import annotations

import atexit
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from environment import REPO_ROOT

NGINX_CONF = REPO_ROOT / "deploy" / "kubernetes" / "router" / "nginx.conf"
SETUP_HINT = "run scripts/setup.sh"

_LIVE: set["Router"] = set()


def nginx_binary() -> str:
    found = shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").exists():  # not on a non-root user's PATH
        found = "/usr/sbin/nginx"
    if found is None:
        pytest.fail(f"nginx not found: {SETUP_HINT} (Debian package nginx)", pytrace=False)
    return found


def nginx_command(nginx: str, prefix: Path, conf: Path) -> list[str]:
    out = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr
    version = tuple(int(x) for x in re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", out).groups())
    # -e (1.19.5 on): the error log before the config is read, or nginx tries /var/log/nginx
    # (not writable by a non-root user).
    early_log = ["-e", "stderr"] if version >= (1, 19, 5) else []
    return [nginx, *early_log, "-p", f"{prefix}/", "-c", str(conf)]


def sub_once(pattern: str, replacement: str, text: str) -> str:
    new, count = re.subn(pattern, replacement, text, flags=re.M)
    assert count == 1, f"nginx.conf: expected one match of {pattern!r}, found {count}"
    return new


def render(conf: str, http_ports, grpc_ports, listen: dict[int, int]) -> str:
    """The router's nginx.conf with local upstreams and listen ports, and no cluster DNS."""
    for port, backends in ((8000, http_ports), (8001, grpc_ports)):
        servers = "".join(f"server 127.0.0.1:{p};\n" for p in backends)
        conf = sub_once(rf"^\s*server \S+:{port} resolve;\n", servers, conf)
    conf = sub_once(r"^\s*resolver .*;$", "resolver 127.0.0.1;", conf)
    for port, local in listen.items():
        conf = sub_once(rf"^(\s*listen) {port}\b", rf"\1 127.0.0.1:{local}", conf)
    return conf


def hashed_header(conf: str | None = None) -> str:
    """The request header both upstreams hash on (`hash $http_x_sequence_id` -> x-sequence-id:
    lowercase, as gRPC metadata must be; HTTP headers match in any case)."""
    found = set(re.findall(r"^\s*hash \$http_(\w+) consistent;", conf or NGINX_CONF.read_text(),
                           re.M))
    assert len(found) == 1, f"nginx.conf: expected one hashed header, found {found}"
    return found.pop().replace("_", "-")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    """nginx running the rendered router config in the foreground."""

    def __init__(self, tmp: Path, http_ports, grpc_ports):
        self.ports = {p: free_port() for p in (8000, 8001, 8080)}
        conf = tmp / "nginx.conf"
        conf.write_text(render(NGINX_CONF.read_text(), http_ports, grpc_ports, self.ports))
        self.log = tmp / "nginx.log"
        with open(self.log, "wb") as log:
            # The access log goes to stdout: kept with the errors, for tests to read.
            self.process = subprocess.Popen(nginx_command(nginx_binary(), tmp, conf),
                                            stdout=log, stderr=log)
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, timeout: float = 20) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, f"nginx exited: {self.log.read_text()}"
            try:
                with opener.open(f"http://127.0.0.1:{self.ports[8080]}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"nginx not up: {self.log.read_text()}"
            time.sleep(0.1)

    def stop(self):
        _LIVE.discard(self)
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@atexit.register
def _kill_leftovers() -> None:
    """Last resort (e.g. pytest interrupted before fixture teardown): never leak an nginx."""
    for router in list(_LIVE):
        router.process.kill()
