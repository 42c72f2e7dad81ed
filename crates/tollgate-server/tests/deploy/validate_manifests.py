"""Validates rendered Kubernetes manifests, every document of every file given, or fails.

    validate_manifests.py --kube-version 1.30.0 [--kube-version ...] FILE...
    validate_manifests.py --self-test

Run by crates/tollgate-server/tests/deploy_chart.rs with the virtualenv scripts/test makes at
target/chart-tools. Each document is checked by its kind:

- Kubernetes' own kinds: against the Kubernetes OpenAPI schemas of each version given, with
  kubernetes-validate in strict mode (an unknown or misspelt field is an error). A kind or
  apiVersion the schemas do not know is an error too (the command line tool only warns).
- ServiceMonitor and PrometheusRule (prometheus-operator's monitoring.coreos.com/v1): against
  the operator's models (cloudcoil-models-prometheus-operator), with unknown fields refused;
  a PrometheusRule's spec is also a Prometheus rule file, so `promtool check rules` checks it.
- EnvoyFilter (Istio's networking.istio.io/v1alpha3): against Istio's models
  (cloudcoil-models-istio), unknown fields refused. A patch's value is Envoy configuration,
  free-form to Istio: the guides' test applies the patches to a real Envoy.
- Anything else: an error, until this script learns how to check it.

--self-test shows that each check refuses what it should (a misspelt field, a wrong type, an
unknown kind, a bad alert expression), so that a check that accepts everything cannot pass.
"""

import argparse
import copy
import importlib
import inspect
import os
import subprocess
import sys
import tempfile

import kubernetes_validate
import pydantic
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError



_forbidden = set()


def _forbid_unknown_fields():
    """The models ignore unknown fields; make every one of them refuse them."""
    models = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("cloudcoil"):
            continue
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, pydantic.BaseModel)
                and value is not pydantic.BaseModel
            ):
                models.add(value)
    if models <= _forbidden:
        return
    _forbidden.update(models)
    for model in models:
        model.model_config["extra"] = "forbid"
    # A model's schema embeds those of the models it holds: rebuild until all have the change.
    for _ in range(3):
        for model in models:
            model.model_rebuild(force=True)


_MODULES = ("cloudcoil.models.prometheus_operator.v1", "cloudcoil.models.istio.networking.v1alpha3")


def _model(module, name):
    """The model `name` of the cloudcoil module, imported when first needed (they are slow to
    import), refusing unknown fields."""

    def load():
        # All of them at once: the change of configuration must come after every import.
        for each in _MODULES:
            importlib.import_module(each)
        _forbid_unknown_fields()
        return getattr(importlib.import_module(module), name)

    return load


CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"):
        _model("cloudcoil.models.prometheus_operator.v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"):
        _model("cloudcoil.models.prometheus_operator.v1", "PrometheusRule"),
    ("networking.istio.io/v1alpha3", "EnvoyFilter"):
        _model("cloudcoil.models.istio.networking.v1alpha3", "EnvoyFilter"),
}


def check_rules(spec, promtool="promtool"):
    """`promtool check rules` on a PrometheusRule's spec; problems as a string, or None."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        yaml.safe_dump(spec, file)
        path = file.name
    try:
        result = subprocess.run(
            [promtool, "check", "rules", path], capture_output=True, text=True
        )
    finally:
        os.unlink(path)
    if result.returncode != 0:
        return (result.stdout + result.stderr).strip()
    return None


def problems(document, versions):
    """What is wrong with one document, as a list of strings (empty when it is valid)."""
    if not isinstance(document, dict):
        return [f"not a mapping: {document!r:.80}"]
    key = (document.get("apiVersion"), document.get("kind"))
    name = f"{key[1]} {document.get('metadata', {}).get('name')}"
    found = []
    if key in CUSTOM:
        try:
            CUSTOM[key]().model_validate(document)
        except pydantic.ValidationError as error:
            found.append(f"{name}: {error}")
        if key[1] == "PrometheusRule":
            failed = check_rules(document.get("spec", {}))
            if failed:
                found.append(f"{name}: promtool check rules: {failed}")
        return found
    for version in versions:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except SchemaNotFoundError as error:
            found.append(f"{name}: no Kubernetes {version} schema for {key}: {error}")
        except ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            found.append(f"{name} (Kubernetes {version}): {path}: {error.message}")
    return found


def validate_files(paths, versions):
    failures = []
    counts = {}
    for path in paths:
        with open(path) as file:
            for document in yaml.safe_load_all(file):
                if document is None:
                    continue
                kind = document.get("kind", "?") if isinstance(document, dict) else "?"
                counts[kind] = counts.get(kind, 0) + 1
                failures += [f"{path}: {problem}" for problem in problems(document, versions)]
    return counts, failures


def self_test(versions):
    """Each check refuses what it must; returns what it wrongly accepted."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "x", "image": "x"}]},
            },
        },
    }
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [{"port": "http"}]},
    }
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "x"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0"}]}]},
    }
    envoy_filter = {
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": {"name": "x"},
        "spec": {"configPatches": [{"applyTo": "CLUSTER", "patch": {"operation": "ADD", "value": {"name": "c"}}}]},
    }
    accepted = []
    for good in (deployment, monitor, rule, envoy_filter):
        found = problems(good, versions)
        if found:
            accepted.append(f"a valid {good['kind']} was refused: {found}")

    def bad(label, base, change):
        document = copy.deepcopy(base)
        change(document)
        if not problems(document, versions):
            accepted.append(label)

    bad("a misspelt Deployment field", deployment,
        lambda d: d["spec"].update(replicaz=2))
    bad("a Deployment field of the wrong type", deployment,
        lambda d: d["spec"].update(replicas="two"))
    bad("a removed API (policy/v1beta1 PodDisruptionBudget)", deployment,
        lambda d: d.update(apiVersion="policy/v1beta1", kind="PodDisruptionBudget",
                           spec={"maxUnavailable": 1}))
    bad("an unknown kind", deployment, lambda d: d.update(kind="Deploymint"))
    bad("a misspelt ServiceMonitor field", monitor,
        lambda d: d["spec"]["endpoints"][0].update(intervall="15s"))
    bad("a misspelt PrometheusRule field", rule,
        lambda d: d["spec"]["groups"][0].update(rulez=[]))
    bad("an alert expression that does not parse", rule,
        lambda d: d["spec"]["groups"][0]["rules"][0].update(expr="sum(rate(x[5m])"))
    bad("a misspelt EnvoyFilter field", envoy_filter,
        lambda d: d["spec"]["configPatches"][0].update(aplyTo="CLUSTER"))
    bad("an EnvoyFilter patch operation Istio does not have", envoy_filter,
        lambda d: d["spec"]["configPatches"][0]["patch"].update(operation="APPEND"))
    return accepted


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kube-version", action="append", required=True)
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("files", nargs="*")
    arguments = parser.parse_args()
    if arguments.self_test:
        accepted = self_test(arguments.kube_version)
        for label in accepted:
            print(f"self-test: accepted {label}", file=sys.stderr)
        if accepted:
            return 1
        print("self-test: every check refuses what it must")
    counts, failures = validate_files(arguments.files, arguments.kube_version)
    for failure in failures:
        print(failure, file=sys.stderr)
    if arguments.files:
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
        print(f"validated against Kubernetes {', '.join(arguments.kube_version)}: {summary}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
