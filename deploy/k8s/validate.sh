#!/usr/bin/env bash
# Validates the Kubernetes manifests without a cluster (`make test` runs it):
#
#   1. renders the kustomization (`kubectl kustomize`, or `kustomize build`,
#      or, with neither installed, the files kustomization.yaml lists, in
#      order), once as it is (GPU workers) and once with workers-cpu.yaml in
#      place of workers.yaml;
#   2. checks every file and both renderings against the Kubernetes API
#      schemas with kubernetes-validate --strict (unknown fields are errors);
#   3. checks what a schema cannot (check_refs.py): every Secret, ConfigMap
#      and volume claim the pods name is defined in secrets.example.yaml,
#      the ConfigMap or volumes.yaml, mounted files are keys of their
#      Secret, the Jobs restart OnFailure or Never, the Service matches.
#
#   deploy/k8s/validate.sh            exits non-zero naming what is wrong
#
# Environment: PYTHON, a Python with PyYAML (default: the test venv's,
# .cache/testenv/bin/python, else python3); KUBERNETES_VALIDATE, the
# validator (default: the test venv's, else one on PATH). Without the validator (the test
# venv could not be installed) step 2 is skipped, saying so; steps 1 and 3
# still run. Without PyYAML in any Python it skips everything, saying so.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=$repo/.cache/testenv/bin
PYTHON=${PYTHON:-$([ -x "$venv/python" ] && echo "$venv/python" || echo python3)}
validator=${KUBERNETES_VALIDATE:-$([ -x "$venv/kubernetes-validate" ] && echo "$venv/kubernetes-validate" || echo kubernetes-validate)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$PYTHON" -c 'import yaml' 2>/dev/null; then
    python3 -c 'import yaml' 2>/dev/null ||
        { echo "validate.sh: SKIPPED: no Python with PyYAML ($PYTHON, python3); make testenv installs one"; exit 0; }
    PYTHON=python3
fi

# The files of a kustomization in order, when no kustomize is installed
# (resources only, with the images' newName/newTag; what these use).
render_by_hand() {
    "$PYTHON" - "$1" <<'PY'
import os, sys, yaml
root = sys.argv[1]
k = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
images = {i["name"]: i for i in k.get("images") or []}
out = []
for r in k["resources"]:
    for d in yaml.safe_load_all(open(os.path.join(root, r))):
        if not d:
            continue
        spec = (d.get("spec") or {}).get("template", {}).get("spec") or {}
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            name, _, tag = c["image"].partition(":")
            if name in images:
                i = images[name]
                c["image"] = i.get("newName", name) + ":" + i.get("newTag", tag)
        out.append(d)
print(yaml.safe_dump_all(out, sort_keys=False), end="")
PY
}

render() {
    if command -v kubectl >/dev/null; then
        kubectl kustomize "$1"
    elif command -v kustomize >/dev/null; then
        kustomize build "$1"
    else
        render_by_hand "$1"
    fi
}

cp "$here"/*.yaml "$tmp/"
mkdir "$tmp/cpu"
cp "$here"/*.yaml "$tmp/cpu/"
sed -i 's/^  - workers\.yaml$/  - workers-cpu.yaml/' "$tmp/cpu/kustomization.yaml"
grep -q '^  - workers-cpu\.yaml$' "$tmp/cpu/kustomization.yaml" ||
    { echo "validate.sh: kustomization.yaml no longer lists workers.yaml as '  - workers.yaml'" >&2; exit 1; }
render "$tmp" >"$tmp/rendered-gpu.yaml" || { echo "validate.sh: rendering deploy/k8s failed" >&2; exit 1; }
render "$tmp/cpu" >"$tmp/rendered-cpu.yaml" || { echo "validate.sh: rendering deploy/k8s with workers-cpu.yaml failed" >&2; exit 1; }
for r in gpu cpu; do
    n=$(grep -c '^kind:' "$tmp/rendered-$r.yaml" || true)
    [ "$n" = 4 ] || { echo "validate.sh: the $r rendering has $n objects, not 4 (ConfigMap, Service, two Jobs)" >&2; exit 1; }
done

files=(coordinator.yaml workers.yaml workers-cpu.yaml volumes.yaml secrets.example.yaml)
if [ -x "$validator" ] || command -v "$validator" >/dev/null 2>&1; then
    (cd "$here" && "$validator" --strict --quiet "${files[@]}") ||
        { echo "validate.sh: kubernetes-validate --strict refused a file above" >&2; exit 1; }
    (cd "$tmp" && "$validator" --strict --quiet rendered-gpu.yaml rendered-cpu.yaml) ||
        { echo "validate.sh: kubernetes-validate --strict refused the rendered kustomization above" >&2; exit 1; }
    schema="kubernetes-validate --strict ($("$validator" --version 2>/dev/null | tr -d '\n'))"
else
    echo "validate.sh: SKIPPED the schema check: no kubernetes-validate ($validator); make testenv installs it"
    schema="no schema check"
fi

for r in gpu cpu; do
    "$PYTHON" "$here/check_refs.py" "$tmp/rendered-$r.yaml" "$here/volumes.yaml" "$here/secrets.example.yaml" >"$tmp/refs-$r.txt" ||
        { cat "$tmp/refs-$r.txt"; echo "validate.sh: the $r rendering names what the templates lack (above)" >&2; exit 1; }
done
echo "validate.sh: deploy/k8s: ${#files[@]} files and the GPU and CPU renderings pass ($schema, $(tail -n 1 "$tmp/refs-gpu.txt" | sed 's/^check_refs: //'))"
