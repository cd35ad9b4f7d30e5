"""Rebuild k8s_schemas.json: the strict Kubernetes JSON schemas of the kinds config/deploy/kubernetes uses, with
only the definitions they reach, so the deployment tests validate offline without a cluster.

Source: the `kubernetes-validate` package from PyPI (schemas generated from the Kubernetes OpenAPI spec); its
"-strict" variants reject unknown fields (additionalProperties: false), which catches misspelled keys.
    pip download --no-deps kubernetes-validate==1.37.0 && unzip kubernetes_validate-*.whl
    python tests/deploy/vendor_k8s_schemas.py kubernetes_validate/kubernetes-json-schema/v1.33.0-local-strict
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

VERSION = "v1.33.0-local-strict"
KINDS = {  # (apiVersion, kind) → file of the kind's schema
    "apps/v1 StatefulSet": "statefulset-apps-v1.json",
    "v1 Service": "service-v1.json",
    "policy/v1 PodDisruptionBudget": "poddisruptionbudget-policy-v1.json",
}
_EXTERNAL = "/api/_definitions.json#/$defs/"
_LOCAL = "#/$defs/"


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _localize(node):
    text = json.dumps(node).replace(json.dumps(_EXTERNAL)[1:-1], _LOCAL)
    return _without_descriptions(json.loads(text))


def _without_descriptions(node):
    """Descriptions are prose for humans; dropping them keeps the vendored file small."""
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def build(schema_dir: Path) -> dict:
    definitions = json.loads((schema_dir / "_definitions.json").read_text())["$defs"]
    roots = {name: _localize(json.loads((schema_dir / file).read_text())) for name, file in KINDS.items()}
    for root in roots.values():
        root.pop("$schema", None)
        root.pop("$id", None)
    wanted, todo = {}, [ref for root in roots.values() for ref in _refs(root)]
    while todo:
        name = todo.pop().removeprefix(_LOCAL)
        if name in wanted:
            continue
        wanted[name] = _without_descriptions(definitions[name])
        todo.extend(_refs(definitions[name]))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "source": f"kubernetes-validate 1.37.0, {VERSION}", "kinds": roots,
            "$defs": dict(sorted(wanted.items()))}


if __name__ == "__main__":
    out = Path(__file__).with_name("k8s_schemas.json")
    out.write_text(json.dumps(build(Path(sys.argv[1])), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
