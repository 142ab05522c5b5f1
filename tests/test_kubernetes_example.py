"""docs/kubernetes.yaml, the replicas example of docs/scale-out.md, stays true: valid YAML of the objects it
names, a container command that llama-ffi's own parser takes (a misspelt flag fails here), readiness
on /health at the port the server listens on, /metrics switched on where Prometheus is told to
scrape it, and a non-loopback address only with API keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_ffi.cli import build_parser

yaml = pytest.importorskip("yaml")
EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "kubernetes.yaml"


def test_the_kubernetes_example_serves_what_it_probes():
    objects = {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text())}
    assert set(objects) == {"Deployment", "Service"}
    pod = objects["Deployment"]["spec"]["template"]
    assert objects["Deployment"]["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert container["command"][0] == "llama-ffi"
    args = build_parser().parse_args([*container["command"][1:], *container["args"]])
    assert args.command == "serve" and args.metrics and args.api_key_file
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics" and int(annotations["prometheus.io/port"]) == args.port
    assert objects["Service"]["spec"]["ports"][0]["targetPort"] in ports
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {m["name"] for m in container["volumeMounts"]} <= volumes
    assert args.model.startswith(next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "models"))
