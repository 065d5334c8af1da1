"""deploy/kubernetes parses, and its pieces agree with each other and with `lingbot-map serve`."""

import os

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (python3-yaml) is not installed")

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "kubernetes")


def load(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return list(yaml.safe_load_all(f))


def test_manifests_parse_and_agree():
    kustomization, = load("kustomization.yaml")
    docs = {d["kind"]: d for f in kustomization["resources"] for d in load(f)}
    assert set(docs) == {"Deployment", "Service", "Ingress"}
    deployment, service, ingress = docs["Deployment"], docs["Service"], docs["Ingress"]

    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels
    assert service["spec"]["selector"].items() <= labels
    container, = pod["spec"]["containers"]
    args = container["args"]
    assert args[0] == "serve" and "--host=0.0.0.0" in args
    port = container["ports"][0]
    assert f"--port={port['containerPort']}" in args
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}

    # The token file and the model come from the volumes that are mounted.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert set(mounts) == set(volumes)
    token = volumes["token"]["secret"]["items"][0]["path"]
    assert f"--token-file={mounts['token']}/{token}" in args
    assert any(a.startswith(f"--model={mounts['models']}/") for a in args)

    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert service["spec"].get("sessionAffinity", "None") == "None"
    backends = [p["backend"]["service"] for r in ingress["spec"]["rules"]
                for p in r["http"]["paths"]]
    assert all(b == {"name": service["metadata"]["name"], "port": {"name": "http"}}
               for b in backends)
