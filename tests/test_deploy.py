"""The fleet recipe, deploy/kubernetes, checked without a cluster and without network:

- every manifest (the resources and the ConfigMaps kustomization.yaml generates) is valid against
  the Kubernetes JSON schemas that the PyPI package kubernetes-validate ships in its wheel
  (strict: unknown fields are errors), with every socket call of the process blocked meanwhile;
  a deliberately broken copy is rejected;
- kustomization.yaml lists every file of the folder, and only existing ones;
- the wiring agrees: probes on Triton's health endpoints, FACE_GALLERY_DSN from the Secret, the
  models' gallery parameters, the router's upstreams and the headless Service, the header name
  docs/gallery.md tells clients to set;
- the router's nginx.conf passes `nginx -t` (Debian's nginx) once its cluster-only parts (DNS
  names, ports) are replaced by local ones, and the rendered router really keeps a sequence on
  one replica over HTTP and gRPC (tritonclient, as docs/gallery.md shows it) against stand-in
  backends.

Everything it needs comes from scripts/setup.sh; a missing piece fails with how to get it.
"""

from __future__ import annotations

import copy
import http.server
import json
import re
import socket
import subprocess
import threading
import urllib.request
from concurrent import futures
from pathlib import Path

import pytest

from environment import REPO_ROOT
# The router's config and how it is run locally: shared with test_fleet.py (real servers).
from router import (
    NGINX_CONF, Router, free_port, hashed_header, nginx_binary, nginx_command, render,
)

try:
    import kubernetes_validate.utils as kv
    import yaml
except ImportError as missing:  # reported by the `validator` fixture, as a failure
    kv = yaml = None
    IMPORT_ERROR = missing

DEPLOY = REPO_ROOT / "deploy" / "kubernetes"
# The fleet section, "## Scale-out (fleet)", with the clients' header example.
FLEET_DOC = REPO_ROOT / "docs" / "gallery.md"
DSN_ENV = "FACE_GALLERY_DSN"
KEYS_FILE = "/run/secrets/face/gallery.keys"
# The oldest Kubernetes release the recipe is checked against; the newest bundled one too.
OLDEST_K8S = "1.30"
SETUP_HINT = "run scripts/setup.sh"


# ---------------------------------------------------------------------------------------------
# The manifests


@pytest.fixture(scope="module")
def validator():
    if kv is None:
        pytest.fail(f"{IMPORT_ERROR}: {SETUP_HINT} (kubernetes-validate and PyYAML in "
                    "scripts/requirements.txt)", pytrace=False)
    return kv


def kustomization() -> dict:
    return yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


def generated_configmaps(kust: dict) -> list[dict]:
    """The ConfigMaps of configMapGenerator, as kustomize makes them (without the hash suffix)."""
    maps = []
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for entry in gen["files"]:
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (DEPLOY / path).read_text()
        maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": gen["name"]}, "data": data})
    return maps


def manifests() -> list[dict]:
    kust = kustomization()
    docs = []
    for resource in kust["resources"]:
        docs += [d for d in yaml.safe_load_all((DEPLOY / resource).read_text()) if d]
    return docs + generated_configmaps(kust)


def find(kind: str, name: str) -> dict:
    hits = [d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind} {name}, found {len(hits)}"
    return hits[0]


def container(workload: dict, name: str) -> dict:
    hits = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(hits) == 1, f"{workload['metadata']['name']}: no single container {name}"
    return hits[0]


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection or resolve a name fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")
    for name in ("getaddrinfo", "create_connection", "gethostbyname"):
        monkeypatch.setattr(socket, name, refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_the_network_guard_blocks(no_network):
    with pytest.raises(AssertionError, match="network access attempted"):
        socket.create_connection(("pypi.org", 443), timeout=1)
    with pytest.raises(AssertionError, match="network access attempted"):
        urllib.request.urlopen("http://127.0.0.1:9/", timeout=1)


def validate(doc: dict, version: str) -> str:
    """Strict validation; raises on an invalid document and on a kind it has no schema for."""
    if version == "latest":
        version = kv.latest_version()
    return kv.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", [OLDEST_K8S, "latest"])
def test_every_manifest_is_valid_offline(validator, no_network, version):
    docs = manifests()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["ConfigMap", "Deployment", "Namespace", "Secret", "Service", "StatefulSet"]
    for doc in docs:
        try:
            validate(doc, version)
        except kv.ValidationError as e:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']} (Kubernetes {version}): "
                        f"{'.'.join(map(str, e.path))}: {e.message}", pytrace=False)


def _typo(doc):
    c = doc["spec"]["template"]["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")


def _replicas_text(doc):
    doc["spec"]["replicas"] = "two"


def _no_selector(doc):
    del doc["spec"]["selector"]


def _probe_port_object(doc):
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = {}


@pytest.mark.parametrize("breakage", [_typo, _replicas_text, _no_selector, _probe_port_object])
def test_validator_rejects_a_broken_deployment(validator, no_network, breakage):
    broken = copy.deepcopy(find("Deployment", "tritonserver"))
    validate(broken, "latest")  # the unbroken copy passes
    breakage(broken)
    with pytest.raises(kv.ValidationError):
        validate(broken, "latest")


def test_validator_rejects_an_unknown_api_version(validator, no_network):
    broken = copy.deepcopy(find("Deployment", "tritonserver"))
    broken["apiVersion"] = "apps/v1beta9"
    with pytest.raises(kv.SchemaNotFoundError):
        validate(broken, "latest")


def test_kustomization_lists_every_file(validator):
    kust = kustomization()
    listed = set(kust["resources"])
    for gen in kust.get("configMapGenerator", []) + kust.get("secretGenerator", []):
        listed |= {entry.rpartition("=")[2] for entry in gen.get("files", [])}
    present = {p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.is_file()}
    present.discard("kustomization.yaml")
    assert sorted(listed - present) == [], "listed in kustomization.yaml but missing"
    assert sorted(present - listed) == [], "in deploy/kubernetes but not in kustomization.yaml"
    # The namespace the manifests go to is the one they create.
    assert find("Namespace", kust["namespace"])


# ---------------------------------------------------------------------------------------------
# The wiring


def test_tritonserver_probes_use_the_health_endpoints(validator):
    deployment = find("Deployment", "tritonserver")
    server = container(deployment, "tritonserver")
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    # Triton's defaults, which the probes and the router rely on: no port flags.
    assert not [a for a in server["args"] if re.match(r"--(http|grpc|metrics)-port", a)]
    expected = {"readinessProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live",
                "startupProbe": "/v2/health/live"}
    for probe, path in expected.items():
        get = server[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports.get(get["port"], get["port"]) == 8000, probe
    # The same endpoint the test suite waits on.
    assert "/v2/health/ready" in (REPO_ROOT / "tests" / "triton_server.py").read_text()
    assert server["image"] == "triton-face"
    limits = server["resources"]["limits"]
    assert limits.get("nvidia.com/gpu") == 1 and "memory" in limits


def test_every_container_has_requests_and_a_memory_limit(validator):
    for doc in manifests():
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            res = c.get("resources", {})
            assert {"cpu", "memory"} <= set(res.get("requests", {})), c["name"]
            assert "memory" in res.get("limits", {}), c["name"]


def pbtxt_parameters(text: str) -> dict[str, str]:
    return dict(re.findall(
        r'parameters\s*\{\s*key:\s*"([^"]+)"\s*value:\s*\{\s*string_value:\s*"([^"]*)"', text))


def test_gallery_dsn_comes_from_the_secret(validator):
    server = container(find("Deployment", "tritonserver"), "tritonserver")
    env = {e["name"]: e for e in server["env"]}
    ref = env[DSN_ENV]["valueFrom"]["secretKeyRef"]
    secret = find("Secret", ref["name"])["stringData"]
    dsn = secret[ref["key"]]
    # The database the StatefulSet creates is the one the DSN names.
    pg = container(find("StatefulSet", "postgres"), "postgres")
    pg_env = {e["name"]: secret[e["valueFrom"]["secretKeyRef"]["key"]]
              for e in pg["env"] if "valueFrom" in e}
    assert all(e["valueFrom"]["secretKeyRef"]["name"] == ref["name"]
               for e in pg["env"] if "valueFrom" in e)
    m = re.fullmatch(r"postgresql://([^:@]+):([^@]+)@([^:/]+):(\d+)/(\w+)", dsn)
    assert m, f"unexpected DSN form {dsn!r}"
    user, password, host, port, db = m.groups()
    assert (user, password, db) == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"],
                                    pg_env["POSTGRES_DB"])
    service = find("Service", host)
    assert find("StatefulSet", "postgres")["spec"]["serviceName"] == host
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]
    # Each model reads the DSN from that variable; no config holds a DSN or a password.
    mounted = {m["subPath"] for m in server["volumeMounts"] if m["name"] == "models"}
    for key, text in find("ConfigMap", "models")["data"].items():
        assert key in mounted, f"{key} is not mounted into the server"
        params = pbtxt_parameters(text)
        assert params["gallery_store"] == "postgres", key
        assert params.get("gallery_dsn_env", DSN_ENV) == DSN_ENV, key
        assert "postgresql://" not in text and password not in text, key


def test_both_models_need_the_keys_of_one_secret(validator):
    """The key file is the Secret gallery-keys, mounted 0400 where both models' gallery_key_file
    points (they share the gallery "face", so the load would refuse two files); its placeholder
    is too short to load; Triton forwards the `gallery_key` header."""
    server = container(find("Deployment", "tritonserver"), "tritonserver")
    volumes = {v["name"]: v for v in find("Deployment", "tritonserver")["spec"]["template"]
               ["spec"]["volumes"]}
    [mount] = [m for m in server["volumeMounts"] if m["mountPath"] == str(Path(KEYS_FILE).parent)]
    secret_volume = volumes[mount["name"]]["secret"]
    assert mount["readOnly"] and secret_volume["defaultMode"] == 0o400, secret_volume
    secret = find("Secret", secret_volume["secretName"])["stringData"]
    placeholder = secret[Path(KEYS_FILE).name]
    label, key = placeholder.strip().split(":")
    assert label == "ops" and len(key) < 16, "the shipped key must fail the load until replaced"
    for name, text in find("ConfigMap", "models")["data"].items():
        assert pbtxt_parameters(text)["gallery_key_file"] == KEYS_FILE, name
    for flag in ("--http-header-forward-pattern=gallery_key",
                 "--grpc-header-forward-pattern=gallery_key"):
        assert flag in server["args"], server["args"]


def normalized(text: str) -> str:
    """A config.pbtxt without comments, parameters and blank space."""
    text = re.sub(r"#.*", "", text)
    text = re.sub(r"parameters\s*\{[^\n]*\}\s*\}", "", text)
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("model", ["face", "face_sequence"])
def test_fleet_configs_follow_the_sample_models(model):
    """deploy/kubernetes/models/<model> is the sample config with the image's edits (KIND_GPU,
    one instance, CNN detector and so no HOG `smallest_face`; Dockerfile.build) and the
    PostgreSQL gallery: nothing else."""
    sample = (REPO_ROOT / "model_repository" / model / "config.pbtxt").read_text()
    fleet = (DEPLOY / "models" / model / "config.pbtxt").read_text()
    gpu = sample.replace("kind: KIND_CPU", "kind: KIND_GPU").replace("count: 2", "count: 1")
    assert normalized(fleet) == normalized(gpu)
    own = {k: v for k, v in pbtxt_parameters(sample).items() if k != "smallest_face"}
    expected = own | {"detector": "cnn", "gallery_store": "postgres",
                                           "gallery_dsn_env": DSN_ENV,
                                           "gallery_key_file": KEYS_FILE,
                                           "key_rate": "100", "key_burst": "200"}
    got = pbtxt_parameters(fleet)
    assert {k: v for k, v in got.items() if k != "gallery_name"} == expected


def readme_header() -> str:
    section = FLEET_DOC.read_text().split("## Scale-out (fleet)", 1)
    assert len(section) == 2, "docs/gallery.md has no '## Scale-out (fleet)' section"
    headers = set(re.findall(r'headers=\{"([A-Za-z-]+)"', section[1].split("\n## ", 1)[0]))
    names = {h.lower() for h in headers}
    assert len(names) == 1, f"the fleet section should show one header in headers=: {headers}"
    name = names.pop()
    # gRPC metadata keys must be lowercase (grpc refuses 'Illegal header key' otherwise).
    assert name in headers, f"docs/gallery.md's gRPC example should spell the header {name!r}"
    return name


def test_router_hashes_on_the_header_the_readme_names(validator):
    variable = "$http_" + readme_header().lower().replace("-", "_")
    assert hashed_header() == readme_header()  # what test_fleet.py sends through the router
    conf = NGINX_CONF.read_text()
    upstreams = dict(re.findall(r"upstream (\w+) \{(.*?)\}", conf, re.S))
    assert set(upstreams) == {"triton_http", "triton_grpc"}
    service = find("Service", "tritonserver")
    assert service["spec"]["clusterIP"] == "None", "the router needs the pods' IPs: headless"
    fqdn = f"tritonserver.{kustomization()['namespace']}.svc.cluster.local"
    for name, port in (("triton_http", 8000), ("triton_grpc", 8001)):
        body = upstreams[name]
        assert re.search(rf"^\s*hash {re.escape(variable)} consistent;", body, re.M), name
        # Re-resolved from the cluster DNS: needs a shared zone and nginx 1.27.3 or newer.
        assert re.search(rf"^\s*server {re.escape(fqdn)}:{port} resolve;", body, re.M), name
        assert re.search(r"^\s*zone \w+ \w+;", body, re.M), name
        assert port in [p["port"] for p in service["spec"]["ports"]]
    assert re.search(r"^\s*resolver \S+ ", conf, re.M)
    image = container(find("Deployment", "router"), "nginx")["image"]
    version = tuple(int(x) for x in re.match(r"nginx:(\d+)\.(\d+)", image).groups())
    assert version >= (1, 28), f"{image}: `server ... resolve` needs nginx 1.27.3+"
    mount = [m for m in container(find("Deployment", "router"), "nginx")["volumeMounts"]
             if m["name"] == "config"][0]["mountPath"]
    assert f"{mount}/{NGINX_CONF.name}" in container(find("Deployment", "router"), "nginx")["command"]


# ---------------------------------------------------------------------------------------------
# The router, run locally


def test_nginx_accepts_the_router_config(tmp_path):
    nginx = nginx_binary()
    conf = tmp_path / "nginx.conf"
    conf.write_text(render(NGINX_CONF.read_text(), [free_port()], [free_port()],
                           {p: free_port() for p in (8000, 8001, 8080)}))
    done = subprocess.run([*nginx_command(nginx, tmp_path, conf), "-t"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and "test is successful" in done.stderr, done.stderr
    # ... and the check can fail.
    conf.write_text(conf.read_text().replace("grpc_pass ", "grpc_passs ", 1))
    done = subprocess.run([*nginx_command(nginx, tmp_path, conf), "-t"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode != 0 and "grpc_passs" in done.stderr, done.stderr


class HttpReplica:
    """A stand-in tritonserver HTTP endpoint: answers every inference and records the header."""

    def __init__(self, header: str):
        self.seen: list[str | None] = []
        replica = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                replica.seen.append(self.headers.get(header))
                body = json.dumps({"model_name": "face_sequence", "model_version": "1",
                                   "outputs": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class GrpcReplica:
    """A stand-in tritonserver gRPC endpoint: ModelInfer answers an empty response."""

    def __init__(self, header: str):
        import grpc

        self.seen: list[str | None] = []

        def model_infer(request: bytes, context) -> bytes:
            self.seen.append(dict(context.invocation_metadata()).get(header.lower()))
            return b""  # an empty ModelInferResponse

        handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self):
        self.server.stop(None)


def owners(replicas) -> dict[str, set[int]]:
    """Header value -> indexes of the replicas that saw it."""
    seen: dict[str, set[int]] = {}
    for i, replica in enumerate(replicas):
        for value in replica.seen:
            seen.setdefault(value, set()).add(i)
    return seen


@pytest.fixture
def fleet(tmp_path):
    """Three stand-in replicas (HTTP and gRPC) behind the router; stops them all afterwards."""
    header = readme_header()
    started = []
    try:
        http_replicas = [HttpReplica(header) for _ in range(3)]
        started += http_replicas
        grpc_replicas = [GrpcReplica(header) for _ in range(3)]
        started += grpc_replicas
        router = Router(tmp_path, [r.port for r in http_replicas], [r.port for r in grpc_replicas])
        started.append(router)
        yield header, router, http_replicas, grpc_replicas
    finally:
        for thing in reversed(started):
            thing.stop()


# 29 (prime): with round-robin instead of the hash, frames of one sequence would not keep
# landing on the same replica of three by the rhythm of the loop alone.
SEQUENCES = range(1, 30)


def test_router_keeps_each_sequence_on_one_replica(fleet):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    header, router, http_replicas, grpc_replicas = fleet
    clients = [
        (httpclient.InferenceServerClient(f"127.0.0.1:{router.ports[8000]}"), http_replicas),
        (grpcclient.InferenceServerClient(f"127.0.0.1:{router.ports[8001]}"), grpc_replicas),
    ]
    for client, replicas in clients:
        # Three frames per sequence, interleaved, as docs/gallery.md shows the call.
        for frame in range(3):
            for seq_id in SEQUENCES:
                client.infer("face_sequence", [], sequence_id=seq_id,
                             sequence_start=frame == 0, sequence_end=frame == 2,
                             headers={header: str(seq_id)})
        # Requests without the header: stateless ones, spread over the replicas.
        for _ in range(30):
            client.infer("face", [])
        seen = owners(replicas)
        split = {k: v for k, v in seen.items() if k is not None and len(v) != 1}
        assert not split, f"sequences served by several replicas: {split}"
        assert sorted(int(k) for k in seen if k is not None) == list(SEQUENCES)
        assert len(set().union(*(v for k, v in seen.items() if k is not None))) >= 2, \
            "all sequences went to one replica"
        assert seen[None] == {0, 1, 2}, "requests without the header did not spread"
        client.close()


def test_the_router_passes_the_key_header_and_never_logs_it(tmp_path):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    key = "k-router-4e5f6a7b8c9d0e1f"
    replicas = [HttpReplica("gallery_key"), GrpcReplica("gallery_key")]
    try:
        router = Router(tmp_path, [replicas[0].port], [replicas[1].port])
        replicas.append(router)
        for client in (httpclient.InferenceServerClient(f"127.0.0.1:{router.ports[8000]}"),
                       grpcclient.InferenceServerClient(f"127.0.0.1:{router.ports[8001]}")):
            client.infer("face", [], headers={"gallery_key": key})
            client.close()
    finally:
        for thing in reversed(replicas):
            thing.stop()
    assert replicas[0].seen == [key] and replicas[1].seen == [key]
    log = router.log.read_text()
    assert "/v2/models/face/infer" in log and "ModelInfer" in log, f"no access log: {log}"
    assert key not in log, log


def test_a_replica_leaving_moves_only_its_sequences(tmp_path):
    """`consistent`: with one replica gone, the sequences of the others stay where they were."""
    header = readme_header()
    replicas = [HttpReplica(header) for _ in range(3)]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def route(router) -> dict[str, int]:
        for replica in replicas:
            replica.seen.clear()
        for seq_id in SEQUENCES:
            request = urllib.request.Request(
                f"http://127.0.0.1:{router.ports[8000]}/v2/models/face_sequence/infer",
                data=b"{}", headers={header: str(seq_id)})
            with opener.open(request, timeout=10) as r:
                assert r.status == 200
        return {k: min(v) for k, v in owners(replicas).items()}

    def route_through(name: str, backends) -> dict[str, int]:
        (tmp_path / name).mkdir()
        router = Router(tmp_path / name, [r.port for r in backends], [free_port()])
        try:
            return route(router)
        finally:
            router.stop()

    try:
        before = route_through("three", replicas)
        after = route_through("two", replicas[:2])
    finally:
        for replica in replicas:
            replica.stop()
    assert 2 in before.values(), "no sequence was on the replica that left"
    stayed = {k: v for k, v in before.items() if v != 2}
    assert {k: after[k] for k in stayed} == stayed
