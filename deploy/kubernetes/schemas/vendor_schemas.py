#!/usr/bin/env python3
"""Cuts the schemas the manifest test validates against out of their sources.

    vendor_schemas.py k8s SWAGGER_JSON OUT_JSON --source=TEXT
    vendor_schemas.py crd CRD_YAML OUT_JSON --source=TEXT

k8s: SWAGGER_JSON is a Kubernetes OpenAPI v2 document (kubernetes/kubernetes'
api/openapi-spec/swagger.json). OUT_JSON gets the definitions of KINDS below
and every definition they reach through "$ref", with "description" fields
dropped (they are most of the bytes and validate nothing); nothing else is
changed. crd: CRD_YAML is a CustomResourceDefinition; OUT_JSON gets the
openAPIV3Schema of each served version, descriptions dropped likewise.

The output is sorted, indented JSON, so that a new version shows as a diff.
README.md beside this file lists what was cut from where.
"""

import argparse
import json
import sys

import yaml

# (apiVersion, kind) of every Kubernetes object a manifest may hold. Add one
# here (and rerun, see README.md) before a manifest uses it.
KINDS = [
    ("v1", "ConfigMap"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
]

REF_PREFIX = "#/definitions/"


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items()
                if k != "description"}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def group_version(api_version):
    group, _, version = api_version.rpartition("/")
    return group, version


def find_kind(definitions, api_version, kind):
    group, version = group_version(api_version)
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if (gvk.get("group", ""), gvk["version"], gvk["kind"]) == (
                    group, version, kind):
                return name
    sys.exit(f"{api_version} {kind} is not in the spec")


def vendor_k8s(spec, source):
    definitions = spec["definitions"]
    kinds = {}
    wanted = []
    for api_version, kind in KINDS:
        name = find_kind(definitions, api_version, kind)
        kinds[f"{api_version}/{kind}"] = name
        wanted.append(name)
    kept = {}
    while wanted:
        name = wanted.pop()
        if name in kept:
            continue
        kept[name] = strip_descriptions(definitions[name])
        for ref in refs(kept[name]):
            if not ref.startswith(REF_PREFIX):
                sys.exit(f"{name}: unexpected $ref {ref}")
            wanted.append(ref[len(REF_PREFIX):])
    return {
        "source": source,
        "openapi_info": spec.get("info", {}),
        "kinds": kinds,
        "definitions": kept,
    }


def vendor_crd(crd, source):
    spec = crd["spec"]
    kinds = {}
    for version in spec["versions"]:
        if not version.get("served", False):
            continue
        api_version = f"{spec['group']}/{version['name']}"
        kinds[f"{api_version}/{spec['names']['kind']}"] = strip_descriptions(
            version["schema"]["openAPIV3Schema"])
    return {
        "source": source,
        "crd": crd["metadata"]["name"],
        "annotations": crd["metadata"].get("annotations", {}),
        "kinds": kinds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["k8s", "crd"])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--source", required=True,
                        help="where INPUT came from (repository, tag, "
                        "commit, path, sha256), kept in the output")
    args = parser.parse_args()
    with open(args.input) as f:
        if args.what == "k8s":
            out = vendor_k8s(json.load(f), args.source)
        else:
            out = vendor_crd(yaml.safe_load(f), args.source)
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
