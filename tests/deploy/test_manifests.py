"""The shipped deployments (deploy/compose, deploy/systemd, deploy/k8s, deploy/grafana) are valid
and agree with jetlog itself.

- Every YAML, TOML and JSON file under deploy/ parses; every node TOML loads with jetlog's own
  ``load_config`` (the Kubernetes one from its ConfigMap, once per pod name).
- Kubernetes manifests validate (strict: unknown fields are errors) against the Kubernetes JSON
  schemas bundled by ``kubernetes-validate``; the compose file validates against the Compose
  Specification schema vendored by ``check-jsonschema``. Both run offline (the subprocess gets
  an unreachable proxy, so any network access would fail the test).
- The systemd units parse, carry the hardening settings, and pass ``systemd-analyze verify`` and
  an offline ``systemd-analyze security`` score where systemd-analyze is installed.
- Cross-references hold: peers name the compose services / the headless Service's pod DNS names,
  ports agree, secrets use the environment variables jetlog reads, command lines parse with
  jetlog's own argument parser.
- Every metric the Grafana dashboard queries is exported by a real node (cluster-only ones: by the
  metrics collector with a cluster view, and documented in docs/operations.md); the probes and
  the compose healthcheck answer on a real node.
- End to end (testcontainers): the compose stack comes up, takes acknowledged publishes, loses a
  node, and every acknowledged message stays readable. Skipped, saying why, without a container
  engine.
"""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import nats
import pytest
import yaml
from kubernetes_validate.utils import all_versions
from prometheus_client import CollectorRegistry, generate_latest

from jetlog.cli import build_parser
from jetlog.config import SECRET_ENV, load_config
from jetlog.embedded import NatsServer
from jetlog.errors import ConfigError
from jetlog.observe.metrics import NodeCollector
from tests.integration.conftest import start_node

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
K8S_DIR = DEPLOY / "k8s"
SYSTEMD_DIR = DEPLOY / "systemd"
DASHBOARD = DEPLOY / "grafana" / "jetlog-dashboard.json"
OPERATIONS_MD = REPO / "docs" / "operations.md"

CLUSTER_SECRET = "test-cluster-secret-0123456789abcdef"
SECRET_VARS = {*SECRET_ENV, "JETLOG_CLUSTER_SECRET"}
"""Every environment variable jetlog reads secrets from."""

# Sent through an unreachable proxy: a validator that tried the network would fail, not hang.
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "no_proxy": "",
}

# Metrics a single node never exports (docs/operations.md: "cluster: ...").
CLUSTER_ONLY = {
    "jetlog_raft_leader",
    "jetlog_raft_term",
    "jetlog_stream_isr_size",
    "jetlog_stream_leader",
    "jetlog_replica_lag_messages",
    "jetlog_replica_fetches_total",
    "jetlog_stream_replicas",
    "jetlog_stream_leader_epoch",
    "jetlog_stream_unapplied",
}

# The families the dashboard is meant to show (the brief of deploy/grafana).
DASHBOARD_REQUIRED = {
    "jetlog_stream_messages",
    "jetlog_stream_pubacks_total",
    "jetlog_stream_received_total",
    "jetlog_consumer_num_pending",
    "jetlog_consumer_num_ack_pending",
    "jetlog_fsync_seconds_bucket",
    "jetlog_replica_lag_messages",
    "jetlog_stream_isr_size",
    "jetlog_raft_leader",
    "jetlog_api_errors_by_code_total",
    "jetlog_link_up",
}


# ---- helpers -------------------------------------------------------------------------------------


def deploy_files(*suffixes: str) -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.name.endswith(suffixes))


def rel(p: Path) -> str:
    return str(p.relative_to(REPO))


def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_yaml_docs(path: Path) -> list[Any]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment a deployment provides: the cluster secret set, no ambient credentials."""
    for var in SECRET_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("JETLOG_CLUSTER_SECRET", CLUSTER_SECRET)


def k8s_objects() -> dict[str, dict[str, Any]]:
    """``{kind/name: object}`` of every manifest listed in kustomization.yaml."""
    kust = load_yaml(K8S_DIR / "kustomization.yaml")
    out: dict[str, dict[str, Any]] = {}
    for res in kust["resources"]:
        for doc in load_yaml_docs(K8S_DIR / res):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def k8s_toml(tmp_path: Path) -> Path:
    """The node TOML of the Kubernetes ConfigMap, written to a file."""
    cm = load_yaml(K8S_DIR / "configmap.yaml")
    path = tmp_path / "jetlog.toml"
    path.write_text(cm["data"]["jetlog.toml"], encoding="utf-8")
    return path


def env_names(text: str) -> set[str]:
    """Names of ``${NAME}``/``${NAME:-x}``/``${NAME:?x}`` references (compose interpolation)."""
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))


def dotenv_keys(path: Path) -> tuple[set[str], set[str]]:
    """(keys set, keys only mentioned in a comment) of a KEY=VALUE env file."""
    active: set[str] = set()
    commented: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*(#\s*)?([A-Za-z_][A-Za-z0-9_]*)=", line)
        if m:
            (commented if m.group(1) else active).add(m.group(2))
    return active, commented


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- every file parses ---------------------------------------------------------------------------


def test_every_yaml_parses() -> None:
    files = deploy_files(".yml", ".yaml")
    assert len(files) >= 12, files
    for path in files:
        docs = load_yaml_docs(path)
        assert docs, f"{rel(path)} is empty"
        assert all(isinstance(d, dict) for d in docs), rel(path)


def test_every_json_parses() -> None:
    files = deploy_files(".json")
    assert DASHBOARD in files
    for path in files:
        assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict), rel(path)


@pytest.mark.parametrize("path", deploy_files(".toml"), ids=rel)
def test_every_toml_loads_with_jetlog(path: Path, secret_env: None) -> None:
    cfg = load_config(str(path))
    if cfg.clustered:
        assert cfg.name in cfg.cluster.members()
        assert cfg.cluster.secret() == CLUSTER_SECRET  # from the environment, no secret_file
    assert cfg.upstream.password is None, "credentials belong in the environment, not the file"


def test_compose_node_tomls(secret_env: None) -> None:
    for i in (1, 2, 3):
        cfg = load_config(str(COMPOSE_DIR / f"n{i}.toml"))
        assert cfg.name == f"n{i}"
        assert cfg.data_dir == "/var/lib/jetlog"
        assert cfg.http.listen == "0.0.0.0:8222"
        assert cfg.cluster.members() == {f"n{j}": f"jetlog-n{j}:7401" for j in (1, 2, 3)}
        assert cfg.cluster.raft_bind == "0.0.0.0:7401"
        assert cfg.cluster.default_replicas == 3
        assert cfg.upstream.url == "nats://nats:4222"
        assert cfg.upstream.leafnode_url == "nats-leaf://nats:7422"


def test_k8s_configmap_toml_loads_for_every_pod(tmp_path: Path, secret_env: None) -> None:
    path = k8s_toml(tmp_path)
    sts = k8s_objects()["StatefulSet/jetlog"]
    for i in range(sts["spec"]["replicas"]):
        cfg = load_config(str(path), {"name": f"jetlog-{i}"})  # what --name $(POD_NAME) does
        assert cfg.clustered and cfg.name == f"jetlog-{i}"
    # Without --name the pod refuses to start (jetlog's default name "jetlog-1" is a pod name,
    # so the file names a non-member on purpose).
    with pytest.raises(ConfigError, match="not among the peers"):
        load_config(str(path))


# ---- Kubernetes ----------------------------------------------------------------------------------


def k8s_versions() -> list[str]:
    """The oldest bundled Kubernetes version >= 1.29 and the newest."""
    versions = [v for v in all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 29)]
    return sorted({versions[0], versions[-1]})


@pytest.mark.parametrize("version", k8s_versions())
def test_k8s_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    files = sorted(K8S_DIR.glob("*.yaml"))
    checked = 0
    for path in files:
        for doc in load_yaml_docs(path):
            if doc.get("apiVersion", "").startswith("kustomize.config.k8s.io/"):
                continue  # not a Kubernetes API object (checked below)
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = ".".join(str(p) for p in e.path)
                pytest.fail(f"{rel(path)} {doc['kind']}: {where}: {e.message}", pytrace=False)
            checked += 1
    assert checked >= 7


def test_k8s_schema_validation_catches_mistakes() -> None:
    """The validator is live: a misspelt field and a wrongly typed value are refused."""
    version = k8s_versions()[-1]
    sts = load_yaml(K8S_DIR / "statefulset.yaml")
    sts["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, version, strict=True)
    sts = load_yaml(K8S_DIR / "statefulset.yaml")
    sts["spec"]["replicas"] = "3"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, version, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kust = load_yaml(K8S_DIR / "kustomization.yaml")
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kust["kind"] == "Kustomization"
    assert set(kust) <= {"apiVersion", "kind", "namespace", "resources", "images", "labels"}
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed <= on_disk, listed - on_disk
    # The Secret example holds placeholders: never applied by `kubectl apply -k`.
    assert on_disk - listed == {"secret.example.yaml"}
    assert len(listed) == len(kust["resources"]), "a resource is listed twice"


def test_k8s_statefulset_wiring(tmp_path: Path, secret_env: None) -> None:
    objs = k8s_objects()
    ns = load_yaml(K8S_DIR / "kustomization.yaml")["namespace"]
    assert objs[f"Namespace/{ns}"]
    sts = objs["StatefulSet/jetlog"]
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (ctr,) = pod["containers"]

    # The command line is a valid `jetlog serve` whose node name is the pod name.
    cmd = ctr["command"] + ctr.get("args", [])
    assert cmd[0] == "jetlog"
    args = build_parser().parse_args(cmd[1:])
    assert args.cmd == "serve" and args.name == "$(POD_NAME)"
    env = {e["name"]: e for e in ctr["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    # Secrets: only from the Secret, only through variables jetlog reads, keys the example has.
    secret = load_yaml(K8S_DIR / "secret.example.yaml")
    secret_vars = {n for n, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})}
    assert secret_vars == {"JETLOG_UPSTREAM_USER", "JETLOG_UPSTREAM_PASSWORD", "JETLOG_CLUSTER_SECRET"}
    assert secret_vars <= SECRET_VARS
    for n in secret_vars:
        ref = env[n]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"], ref
    assert not any("value" in e and n in SECRET_VARS for n, e in env.items()), "plain-text secret"

    # The ConfigMap is mounted where --config points.
    mounts = {m["name"]: m for m in ctr["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    cm_vol = next(v for v in vols.values() if "configMap" in v)
    cm = objs[f"ConfigMap/{cm_vol['configMap']['name']}"]
    assert args.config == f"{mounts[cm_vol['name']]['mountPath']}/jetlog.toml"
    assert "jetlog.toml" in cm["data"]
    assert mounts[cm_vol["name"]].get("readOnly") is True

    # data_dir is on the volume claim template.
    cfg = load_config(str(k8s_toml(tmp_path)), {"name": "jetlog-0"})
    (vct,) = spec["volumeClaimTemplates"]
    assert mounts[vct["metadata"]["name"]]["mountPath"] == cfg.data_dir
    assert vct["spec"]["accessModes"] == ["ReadWriteOnce"]

    # Ports: the container ports are the ones in the TOML.
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert cfg.http.listen == f"0.0.0.0:{ports['http']}"
    assert cfg.cluster.raft_bind == f"0.0.0.0:{ports['raft']}"

    # Peers are the pods' stable names through the headless Service, in the kustomize namespace.
    headless = objs[f"Service/{spec['serviceName']}"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in headless["spec"]["ports"]} >= {"raft"}
    svc = spec["serviceName"]
    assert cfg.cluster.members() == {
        f"jetlog-{i}": f"jetlog-{i}.{svc}.{ns}.svc.cluster.local:{ports['raft']}" for i in range(3)
    }

    # Probes: liveness /healthz, readiness /readyz, a startup probe, all on the http port.
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert ctr["startupProbe"]["httpGet"]["port"] == "http"
    startup = ctr["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300

    # Restricted pod security.
    sc = ctr["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert any(m["mountPath"] == "/tmp" for m in ctr["volumeMounts"])


def test_k8s_services_and_pdb_select_the_pods() -> None:
    objs = k8s_objects()
    labels = objs["StatefulSet/jetlog"]["spec"]["template"]["metadata"]["labels"]
    services = [o for k, o in objs.items() if k.startswith("Service/")]
    assert len(services) == 2
    for s in services:
        assert s["spec"]["selector"].items() <= labels.items()
    client = objs["Service/jetlog-http"]
    assert client["spec"].get("clusterIP") != "None"
    assert [p["port"] for p in client["spec"]["ports"]] == [8222]
    pdb = objs["PodDisruptionBudget/jetlog"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


# ---- compose -------------------------------------------------------------------------------------


def check_jsonschema_bin() -> Path:
    path = Path(sys.executable).parent / "check-jsonschema"
    if not path.exists():
        pytest.fail(
            f"{path} missing: install the test extra (`pip install -e '.[test]'`), which brings "
            "check-jsonschema and its vendored Compose Specification schema",
            pytrace=False,
        )
    return path


def run_compose_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(check_jsonschema_bin()), "--builtin-schema", "vendor.compose-spec", str(path)],
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_compose_file_validates_against_the_compose_specification() -> None:
    res = run_compose_schema(COMPOSE_FILE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "validation done" in res.stdout


def test_compose_schema_validation_catches_mistakes(tmp_path: Path) -> None:
    """The schema is live: a misspelt service key is refused."""
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE_FILE.read_text().replace("    healthcheck:", "    healthchek:", 1))
    res = run_compose_schema(bad)
    assert res.returncode != 0, res.stdout
    assert "healthchek" in res.stdout + res.stderr


def compose() -> dict[str, Any]:
    doc = load_yaml(COMPOSE_FILE)
    assert isinstance(doc, dict)
    return doc


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """``{container path: host path}`` of a service's bind mounts (short syntax)."""
    out = {}
    for v in service.get("volumes", []):
        src, dst, *_ = v.split(":")
        if src.startswith("."):
            out[dst] = (COMPOSE_DIR / src).resolve()
    return out


def test_compose_services(secret_env: None) -> None:
    doc = compose()
    services = doc["services"]
    nodes = [f"jetlog-n{i}" for i in (1, 2, 3)]
    assert set(services) == {"nats", *nodes, "prometheus", "grafana"}

    nats_svc = services["nats"]
    assert nats_svc["image"] == "nats:2.11"
    conf_mounts = bind_mounts(nats_svc)
    (conf,) = conf_mounts.values()
    assert conf == DEPLOY / "nats" / "nats-server.conf"
    assert nats_svc["command"] == ["--config", next(iter(conf_mounts))]
    # Every $VAR the nats config expands is in the nats container's environment.
    conf_vars = set(re.findall(r":\s*\$([A-Z_][A-Z0-9_]*)", conf.read_text()))
    assert conf_vars == {"JETLOG_PASSWORD", "APP_PASSWORD"}
    assert conf_vars <= set(nats_svc["environment"])

    for name in nodes:
        svc = services[name]
        build = svc["build"]
        assert (COMPOSE_DIR / build["context"]).resolve() == REPO
        assert (REPO / build["dockerfile"]).resolve() == COMPOSE_DIR / "Dockerfile"
        mounts = bind_mounts(svc)
        toml_path = mounts["/etc/jetlog/jetlog.toml"]
        cfg = load_config(str(toml_path))
        assert f"jetlog-{cfg.name}" == name
        # data_dir on the node's named volume.
        named = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"] if not v.startswith(".")}
        assert named[cfg.data_dir] in doc["volumes"]
        # Peers are the compose services, the Raft port stays inside the compose network.
        for peer, addr in cfg.cluster.members().items():
            host = addr.rsplit(":", 1)[0]
            assert host == f"jetlog-{peer}" and host in services
        assert all(not p.endswith(":7401") for p in svc.get("ports", []))
        assert any(p.endswith(":8222") for p in svc["ports"])
        # Secrets only through the variables jetlog reads.
        env = svc["environment"]
        assert set(env) <= SECRET_VARS
        assert {"JETLOG_UPSTREAM_USER", "JETLOG_UPSTREAM_PASSWORD", "JETLOG_CLUSTER_SECRET"} <= set(env)
        assert env["JETLOG_UPSTREAM_USER"] == "jetlog"
        assert env["JETLOG_UPSTREAM_PASSWORD"].startswith("${JETLOG_PASSWORD:?")
        # Healthcheck on /readyz of the node's HTTP port.
        hc = svc["healthcheck"]
        assert hc["test"][0] == "CMD"
        assert f"http://127.0.0.1:{cfg.http.listen.rsplit(':', 1)[1]}/readyz" in " ".join(hc["test"])
        assert svc["depends_on"]["nats"]["condition"] == "service_started"
        assert svc["restart"] == "on-failure"

    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in ("prometheus", "grafana"):
        assert "healthcheck" in services[name]
        for host_path in bind_mounts(services[name]).values():
            assert host_path.exists(), host_path
    # Every published port but the NATS client port binds to the loopback interface.
    for name, svc in services.items():
        for p in svc.get("ports", []):
            assert name == "nats" or p.startswith("127.0.0.1:"), (name, p)


def test_compose_variables_are_in_env_example() -> None:
    text = COMPOSE_FILE.read_text()
    used = env_names(text)
    required = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?", text))
    active, commented = dotenv_keys(COMPOSE_DIR / ".env.example")
    assert required <= active, required - active
    assert used <= active | commented, used - (active | commented)
    assert active <= used, active - used


def test_prometheus_scrapes_every_node() -> None:
    prom = load_yaml(COMPOSE_DIR / "prometheus.yml")
    (job,) = prom["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    services = compose()["services"]
    expected = set()
    for i in (1, 2, 3):
        listen = tomllib.loads((COMPOSE_DIR / f"n{i}.toml").read_text())["http"]["listen"]
        expected.add(f"jetlog-n{i}:{listen.rsplit(':', 1)[1]}")
    assert targets == expected
    assert all(t.split(":")[0] in services for t in targets)


def test_grafana_provisioning() -> None:
    ds = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    dash = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "jetlog.yml")
    (provider,) = dash["providers"]
    mounts = bind_mounts(compose()["services"]["grafana"])
    dash_dir = provider["options"]["path"]
    assert any(dst.startswith(dash_dir + "/") and src == DASHBOARD for dst, src in mounts.items())
    assert mounts["/etc/grafana/provisioning"] == DEPLOY / "grafana" / "provisioning"


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile() -> None:
    ins = dockerfile_instructions(COMPOSE_DIR / "Dockerfile")
    assert ins[0] == ("FROM", "python:3.11-slim")
    entry = [json.loads(rest) for op, rest in ins if op == "ENTRYPOINT"]
    assert entry == [["jetlog", "serve", "--config", "/etc/jetlog/jetlog.toml"]]
    args = build_parser().parse_args(entry[0][1:])
    assert args.cmd == "serve"
    users = [rest for op, rest in ins if op == "USER"]
    assert users and not users[-1].startswith(("root", "0")), "the node must not run as root"
    # What COPY takes from the build context (the repository root) exists and passes the
    # Dockerfile's .dockerignore (which ignores everything else).
    ignore = (COMPOSE_DIR / "Dockerfile.dockerignore").read_text().split()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = []
    for op, rest in ins:
        if op == "COPY":
            copied += rest.split()[:-1]
    assert copied
    for src in copied:
        assert (REPO / src).exists(), src
        assert src.rstrip("/") in allowed, f"{src} is excluded by Dockerfile.dockerignore"
    readme = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in copied


# ---- systemd -------------------------------------------------------------------------------------


class UnitParser(configparser.ConfigParser):
    """systemd unit syntax: case-sensitive keys, no interpolation, repeated keys allowed."""

    def __init__(self) -> None:
        super().__init__(strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";"))

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def unit_values(path: Path) -> dict[str, dict[str, list[str]]]:
    """Every value of every key per section (configparser keeps only the last of repeated keys,
    which systemd accumulates, e.g. ``EnvironmentFile=``, ``SystemCallFilter=``)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


UNITS = sorted(SYSTEMD_DIR.glob("*.service"))

HARDENING = {
    "User": "jetlog",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ReadWritePaths": "/var/lib/jetlog",
    "PrivateTmp": "yes",
    "ProtectHome": "yes",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "LimitNOFILE": "65536",
    "Restart": "on-failure",
    "TimeoutStopSec": "30",
    "KillSignal": "SIGTERM",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
}


def test_systemd_units_exist() -> None:
    assert {p.name for p in UNITS} == {"jetlog.service", "jetlog@.service"}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_unit_is_hardened(unit: Path) -> None:
    cp = UnitParser()
    cp.read(unit)
    assert set(cp.sections()) == {"Unit", "Service", "Install"}
    svc = cp["Service"]
    for key, value in HARDENING.items():
        assert key in svc, f"{unit.name}: [Service] {key}= missing"
        assert svc[key] == value, f"{unit.name}: {key}={svc[key]!r}, expected {value!r}"
    values = unit_values(unit)["Service"]
    assert "-/etc/jetlog/jetlog.env" in values["EnvironmentFile"]
    assert "@system-service" in values["SystemCallFilter"]
    assert cp["Install"]["WantedBy"] == "multi-user.target"
    assert "network-online.target" in cp["Unit"]["After"].split()
    assert "network-online.target" in cp["Unit"]["Wants"].split()
    # The state directory is /var/lib/jetlog (or below it), writable despite ProtectSystem=strict.
    assert svc["StateDirectory"].split("/")[0] == "jetlog"
    # ExecStart is a valid `jetlog serve` command line reading a config file, no secrets on it.
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == "/opt/jetlog/.venv/bin/jetlog"
    args = build_parser().parse_args(argv[1:])
    assert args.cmd == "serve" and args.config.startswith("/etc/jetlog/")
    assert not re.search(r"password|secret|token", svc["ExecStart"], re.I)


def test_systemd_env_file_names_only_variables_jetlog_reads() -> None:
    active, commented = dotenv_keys(SYSTEMD_DIR / "jetlog.env")
    assert active | commented <= SECRET_VARS, (active | commented) - SECRET_VARS
    assert {"JETLOG_UPSTREAM_USER", "JETLOG_UPSTREAM_PASSWORD", "JETLOG_CLUSTER_SECRET"} <= active


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed: units checked by parsing only")
    return path


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify_and_security(unit: Path, tmp_path: Path) -> None:
    tool = systemd_analyze()
    # verify checks that ExecStart's binary exists: point it at this venv's jetlog.
    jetlog_bin = Path(sys.executable).parent / "jetlog"
    text = unit.read_text().replace("/opt/jetlog/.venv/bin/jetlog", str(jetlog_bin))
    copy = tmp_path / unit.name
    copy.write_text(text)
    target = tmp_path / unit.name.replace("@.", "@n1.")  # a template is verified as an instance
    res = subprocess.run([tool, "verify", str(target)], capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert unit.name not in out, f"systemd-analyze verify warns about {unit.name}:\n{out}"
    res = subprocess.run(
        [tool, "security", "--offline=true", str(target)], capture_output=True, text=True, timeout=60
    )
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout)
    if m is None:
        pytest.skip(f"systemd-analyze security --offline unavailable: {res.stderr.strip()[:200]}")
    assert float(m.group(1)) <= 2.0, res.stdout


# ---- the Grafana dashboard -----------------------------------------------------------------------


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from dashboard_panels(p.get("panels", []))


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard_panels(dash["panels"]) for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (a lexical reading of PromQL, enough for dashboards)."""
    m = re.fullmatch(r"\s*(?:label_values|query_result)\((.*?)(?:,\s*\w+)?\)\s*", expr)
    if m:  # Grafana template functions
        expr = m.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # Grafana variables
    names = set()
    for w in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[w.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if w.group(0).lower() in _PROMQL_WORDS:
            continue
        names.add(w.group(0))
    return names


def test_promql_metric_names() -> None:
    assert promql_metric_names(
        'histogram_quantile(0.99, sum by (instance, le) (rate(jetlog_fsync_seconds_bucket{a="b(c)"}[$__rate_interval])))'
    ) == {"jetlog_fsync_seconds_bucket"}
    assert promql_metric_names("label_values(jetlog_stream_messages, stream)") == {"jetlog_stream_messages"}
    assert promql_metric_names("sum(a_total) / on (x) group_left b > bool 0.5") == {"a_total", "b"}


def dashboard_metric_names() -> set[str]:
    names: set[str] = set()
    for e in dashboard_exprs():
        names |= promql_metric_names(e)
    return names


def test_dashboard_structure() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    panels = list(dashboard_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), p["title"]
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["expr"].count("{") == t["expr"].count("}"), t["expr"]
            assert t["expr"].count("[") == t["expr"].count("]"), t["expr"]
    names = dashboard_metric_names()
    assert names >= DASHBOARD_REQUIRED, DASHBOARD_REQUIRED - names
    assert all(n.startswith("jetlog_") for n in names), names


def documented_metrics() -> tuple[set[str], set[str]]:
    """(families, histogram families) of docs/operations.md's metrics table. A short name
    (`_bytes`) continues the first full name's prefix (`jetlog_stream_messages` -> `jetlog_stream`)."""
    text = OPERATIONS_MD.read_text()
    section = text.split("## Prometheus metrics", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    histograms: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `jetlog_"):
            continue
        cell = line.split("|")[1]
        prefix = ""
        for tok in re.findall(r"`([a-z_]+)`", cell):
            if tok.startswith("jetlog_"):
                prefix = "_".join(tok.split("_")[:2])
                name = tok
            else:
                name = prefix + tok
            names.add(name)
            if "(histogram)" in cell:
                histograms.add(name)
    return names, histograms


def sample_names(exposition: str) -> set[str]:
    out = set()
    for line in exposition.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
        if m and not line.startswith("#"):
            out.add(m.group(1))
    return out


def family_of(name: str, histograms: set[str]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in histograms:
            return name.removesuffix(suffix)
    return name


class _Link:
    connected = True


class _ClusterView:
    def metrics_view(self) -> dict[str, Any]:
        lag = {"jetlog-1": 0, "jetlog-2": 4}
        return {
            "raft_leader": True,
            "raft_term": 3,
            "streams": {
                "S": {"leader": True, "isr": 3, "replicas": 3, "epoch": 2, "lag": lag},
                "F": {"leader": False, "isr": 3, "replicas": 3, "epoch": 5, "lag": {}, "fetches": 12},
                "U": {"leader": False, "isr": 2, "replicas": 3, "epoch": 6, "lag": {}, "unapplied": True},
            },
        }


class _ClusterHost:
    """What the collector reads of a cluster node, without a cluster."""

    streams = None
    api = None
    client = _Link()
    leaf = _Link()
    cluster = _ClusterView()


async def test_cluster_metrics_on_the_dashboard_are_exported_and_documented() -> None:
    # The collector reads per-loop state (the fsync service): collect inside a running loop.
    registry = CollectorRegistry()
    registry.register(NodeCollector(_ClusterHost()))
    text = generate_latest(registry).decode()
    exported = sample_names(text)
    documented, _ = documented_metrics()
    assert exported >= CLUSTER_ONLY, CLUSTER_ONLY - exported
    unapplied = {ln for ln in text.splitlines() if ln.startswith("jetlog_stream_unapplied{")}
    assert unapplied == {
        'jetlog_stream_unapplied{stream="S"} 0.0',
        'jetlog_stream_unapplied{stream="F"} 0.0',
        'jetlog_stream_unapplied{stream="U"} 1.0',
    }
    assert documented >= CLUSTER_ONLY, CLUSTER_ONLY - documented


async def http_get(port: int, path: str) -> tuple[int, str]:
    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read().decode()

    return await asyncio.to_thread(get)


async def test_a_real_node_exports_every_dashboard_metric_and_answers_the_probes(tmp_path: Path) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "data"), **{"http.listen": "127.0.0.1:0"})
        try:
            assert node.http is not None
            port = node.http.port
            # Probes (Kubernetes) and the compose healthcheck command.
            code, body = await http_get(port, "/healthz")
            assert code == 200 and json.loads(body) == {"status": "ok"}
            assert await http_get(port, "/readyz") == (200, "ready\n")
            hc = compose()["services"]["jetlog-n1"]["healthcheck"]["test"][1:]
            hc = [a.replace("127.0.0.1:8222", f"127.0.0.1:{port}") for a in hc]
            assert hc[0] == "python"
            res = await asyncio.to_thread(
                subprocess.run, [sys.executable, *hc[1:]], capture_output=True, text=True, timeout=30
            )
            assert res.returncode == 0, res.stderr

            # A stream, a consumer with delivered and unacked messages, an API error.
            nc = await nats.connect(srv.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="DASH", subjects=["dash.>"])
                for i in range(5):
                    await js.publish(f"dash.{i}", b"x")
                with pytest.raises(nats.js.errors.APIError):
                    await js.publish("dash.0", b"", headers={"Nats-Expected-Stream": "nope"})
                sub = await js.pull_subscribe("dash.>", durable="DC", stream="DASH")
                msgs = await sub.fetch(3, timeout=5)
                await msgs[0].ack_sync()
            finally:
                await nc.close()
            code, body = await http_get(port, "/metrics")
            assert code == 200
        finally:
            await node.stop()
        # The HTTP endpoint is gone with the node: the healthcheck then fails.
        res = await asyncio.to_thread(
            subprocess.run, [sys.executable, *hc[1:]], capture_output=True, text=True, timeout=30
        )
        assert res.returncode != 0

    exported = sample_names(body)
    documented, histograms = documented_metrics()
    used = dashboard_metric_names()
    assert used >= DASHBOARD_REQUIRED
    missing = sorted(n for n in used - CLUSTER_ONLY if n not in exported)
    assert not missing, f"the dashboard queries metrics a node does not export: {missing}"
    assert not (exported & CLUSTER_ONLY), "a single node exports cluster metrics"
    undocumented = sorted(n for n in used if family_of(n, histograms) not in documented)
    assert not undocumented, f"not in docs/operations.md's metrics table: {undocumented}"


# ---- end to end: the compose stack in a container engine ------------------------------------------


def require_container_engine() -> str:
    """The docker CLI path, or a skip that says why there is nothing to run the stack on."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:
        pytest.skip(f"no container engine reachable: {type(e).__name__}: {e}")
    cli = shutil.which("docker")
    if cli is None:
        pytest.skip("no container engine reachable: a Docker API answers but there is no docker CLI")
    res = subprocess.run([cli, "compose", "version"], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        pytest.skip(f"container engine reachable, but not `docker compose`: {res.stderr.strip()[:200]}")
    return cli


async def _publish(url: str, n: int) -> tuple[dict[int, bytes], str]:
    """Create an R3 stream, publish ``n`` messages with acks; (acked seq -> data, leader name)."""
    nc = await nats.connect(url, user="app", password="e2e-app-password", connect_timeout=10)
    try:
        js = nc.jetstream(timeout=10)
        deadline = time.monotonic() + 60
        while True:
            try:
                await js.add_stream(name="E2E", subjects=["e2e.>"], num_replicas=3)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1)
        acked = {}
        for i in range(n):
            data = f"m{i}".encode()
            ack = await js.publish(f"e2e.{i % 7}", data)
            acked[ack.seq] = data
        info = await js.stream_info("E2E")
        assert info.cluster is not None and info.cluster.leader
        return acked, info.cluster.leader
    finally:
        await nc.close()


async def _publish_through_failover(url: str, acked: dict[int, bytes], n: int) -> None:
    """Keep publishing while a node is gone; only acknowledged messages count."""
    nc = await nats.connect(url, user="app", password="e2e-app-password", connect_timeout=10)
    try:
        js = nc.jetstream(timeout=5)
        for i in range(n):
            data = f"after-kill-{i}".encode()
            with contextlib.suppress(Exception):
                ack = await js.publish("e2e.after", data)
                acked[ack.seq] = data
    finally:
        await nc.close()


async def _read_back(url: str, acked: dict[int, bytes]) -> None:
    nc = await nats.connect(url, user="app", password="e2e-app-password", connect_timeout=10)
    try:
        js = nc.jetstream(timeout=5)
        for seq, data in sorted(acked.items()):
            deadline = time.monotonic() + 60
            while True:
                try:
                    msg = await js.get_msg("E2E", seq)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
            assert msg.data == data, f"seq {seq}: {msg.data!r} != {data!r}"
    finally:
        await nc.close()


@pytest.mark.timeout(1200)
def test_compose_stack_keeps_acknowledged_messages_when_a_node_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_container_engine()
    import docker
    from testcontainers.compose import DockerCompose

    nats_port = free_port()
    env_file = tmp_path / "e2e.env"
    env_file.write_text(
        "\n".join(
            [
                "JETLOG_PASSWORD=e2e-jetlog-password",
                "APP_PASSWORD=e2e-app-password",
                f"JETLOG_CLUSTER_SECRET={CLUSTER_SECRET}",
                "GRAFANA_ADMIN_PASSWORD=e2e-grafana",
                f"JETLOG_NATS_PORT={nats_port}",
                *(f"JETLOG_N{i}_HTTP_PORT={free_port()}" for i in (1, 2, 3)),
            ]
        )
        + "\n"
    )
    # Its own project name: never touches a stack the user runs from deploy/compose.
    monkeypatch.setenv("COMPOSE_PROJECT_NAME", f"jetlog-e2e-{os.getpid()}")
    stack = DockerCompose(
        context=str(COMPOSE_DIR),
        compose_file_name="docker-compose.yml",
        env_file=str(env_file),
        build=True,
        wait=True,  # `up --wait`: every node's /readyz healthcheck passes
        services=["nats", "jetlog-n1", "jetlog-n2", "jetlog-n3"],
    )
    url = f"nats://127.0.0.1:{nats_port}"
    with stack:
        try:
            acked, leader = asyncio.run(_publish(url, 300))
            assert len(acked) == 300
            victim = stack.get_container(f"jetlog-{leader}")
            client = docker.from_env()
            try:
                client.containers.get(victim.ID).kill()  # SIGKILL the stream's leader
            finally:
                client.close()
            asyncio.run(_publish_through_failover(url, acked, 100))
            asyncio.run(_read_back(url, acked))
        except BaseException:
            with contextlib.suppress(Exception):  # the logs help; never hide the failure
                out, err = stack.get_logs()
                print(out[-20000:], err[-20000:], sep="\n")
            raise
