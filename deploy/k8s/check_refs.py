"""What a schema cannot check in deploy/k8s: names and paths that must agree
across the manifests. Reads the YAML files given (the rendered kustomization
and the templates) and exits 1 naming every problem:

- every Secret, ConfigMap and PersistentVolumeClaim a pod spec names is
  defined (secrets.example.yaml, the ConfigMap, volumes.yaml);
- a file path in a container's arguments, or in the job config's
  [coordinator] TLS and token keys, that lies in a mounted Secret or
  ConfigMap names one of its keys;
- Jobs restart with OnFailure or Never (Never when podFailurePolicy is
  set), and give at least 15 s to stop (processes exit within 10 s of
  SIGTERM);
- the Service selects the coordinator's pods, its ports are the
  container's, and the workers' --coordinator URL names the Service and
  its gRPC port; the probes use a container port.

Usage: python3 check_refs.py FILE.yaml...
"""

import sys
import tomllib
from urllib.parse import urlparse

import yaml


def docs(paths):
    for p in paths:
        with open(p) as f:
            for d in yaml.safe_load_all(f):
                if d:
                    yield p, d


def pod_specs(objs):
    for p, d in objs:
        kind, spec = d.get("kind"), d.get("spec") or {}
        if kind == "Pod":
            yield p, d, spec
        elif kind == "CronJob":
            yield p, d, spec["jobTemplate"]["spec"]["template"]["spec"]
        elif "template" in spec:
            yield p, d, spec["template"].get("spec") or {}


def main(paths):
    objs = list(docs(paths))
    problems = []
    defined = {"Secret": {}, "ConfigMap": {}, "PersistentVolumeClaim": {}}
    for _, d in objs:
        if d.get("kind") in defined:
            keys = set((d.get("data") or {}).keys()) | set((d.get("stringData") or {}).keys())
            defined[d["kind"]][d["metadata"]["name"]] = keys

    def need(kind, name, where):
        if name not in defined[kind]:
            problems.append(f"{where}: {kind} {name!r} is not defined in any of the files")
            return None
        return defined[kind][name]

    services = [d for _, d in objs if d.get("kind") == "Service"]
    for path, obj, spec in pod_specs(objs):
        where = f"{path}: {obj['kind']} {obj['metadata']['name']}"
        labels = (obj["spec"].get("template", {}).get("metadata") or {}).get("labels") or {}
        if obj["kind"] == "Job":
            rp = spec.get("restartPolicy")
            if rp not in ("OnFailure", "Never"):
                problems.append(f"{where}: restartPolicy is {rp!r}; a Job needs OnFailure or Never")
            if obj["spec"].get("podFailurePolicy") and rp != "Never":
                problems.append(f"{where}: podFailurePolicy needs restartPolicy Never")
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if grace < 15:
                problems.append(f"{where}: terminationGracePeriodSeconds {grace} < 15")
        volumes = {}
        for v in spec.get("volumes") or []:
            if "secret" in v:
                volumes[v["name"]] = ("Secret", v["secret"]["secretName"],
                                      need("Secret", v["secret"]["secretName"], where))
            elif "configMap" in v:
                volumes[v["name"]] = ("ConfigMap", v["configMap"]["name"],
                                      need("ConfigMap", v["configMap"]["name"], where))
            elif "persistentVolumeClaim" in v:
                need("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], where)
                volumes[v["name"]] = ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], None)
            else:
                volumes[v["name"]] = (None, None, None)
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            cw = f"{where} container {c['name']}"
            for e in c.get("envFrom") or []:
                for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                    if key in e and not e[key].get("optional"):
                        need(kind, e[key]["name"], cw)
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                    if key in vf:
                        keys = need(kind, vf[key]["name"], cw)
                        if keys is not None and vf[key]["key"] not in keys:
                            problems.append(f"{cw}: {kind} {vf[key]['name']} has no key {vf[key]['key']!r}")
            mounts = []
            for m in c.get("volumeMounts") or []:
                if m["name"] not in volumes:
                    problems.append(f"{cw}: mounts volume {m['name']!r}, which the pod does not define")
                    continue
                mounts.append((m["mountPath"].rstrip("/") + "/", volumes[m["name"]]))

            def file_in_mount(p, what):
                best = max((m for m in mounts if p.startswith(m[0])), key=lambda m: len(m[0]), default=None)
                if best is None:
                    problems.append(f"{cw}: {what} {p} is on no mounted volume")
                    return
                kind, name, keys = best[1]
                rel = p[len(best[0]):]
                if kind in ("Secret", "ConfigMap") and keys is not None and rel not in keys:
                    problems.append(f"{cw}: {what} {p} is not a key of {kind} {name} (keys: {', '.join(sorted(keys))})")

            args = (c.get("command") or []) + (c.get("args") or [])
            for a in args:
                if isinstance(a, str) and a.startswith("/etc/"):
                    file_in_mount(a, "argument")
            ports = {p["containerPort"] for p in c.get("ports") or []} | {p.get("name") for p in c.get("ports") or []}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if port is not None and port not in ports:
                    problems.append(f"{cw}: {probe} port {port} is not a container port")
            # The job config a coordinator reads: its TLS and token files.
            if "--config" in args:
                cfg_path = args[args.index("--config") + 1]
                file_in_mount(cfg_path, "--config")
                for m in mounts:
                    kind, name, keys = m[1]
                    if kind == "ConfigMap" and cfg_path.startswith(m[0]):
                        cm = next(d for _, d in objs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name)
                        text = (cm.get("data") or {}).get(cfg_path[len(m[0]):])
                        if text is None:
                            continue
                        coord = tomllib.loads(text).get("coordinator", {})
                        for k in ("tls_cert", "tls_key", "auth_token_file"):
                            if k in coord:
                                file_in_mount(coord[k], f"coordinator.{k}")
                        for svc in services:
                            sel = svc["spec"].get("selector") or {}
                            if all(labels.get(k) == v for k, v in sel.items()):
                                for sp in svc["spec"]["ports"]:
                                    if sp.get("targetPort", sp["port"]) not in ports:
                                        problems.append(f"{path}: Service {svc['metadata']['name']} port {sp['name']} targets {sp.get('targetPort')}, not a port of {cw}")
            if "--coordinator" in args:
                url = urlparse(args[args.index("--coordinator") + 1])
                svc = next((s for s in services if s["metadata"]["name"] == url.hostname), None)
                if svc is None:
                    problems.append(f"{cw}: --coordinator {url.geturl()} names no Service in the files")
                elif url.port not in {p["port"] for p in svc["spec"]["ports"]}:
                    problems.append(f"{cw}: --coordinator port {url.port} is not a port of Service {url.hostname}")
                else:
                    sel = svc["spec"].get("selector") or {}
                    if not any(
                        all(((o["spec"].get("template", {}).get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in sel.items())
                        for _, o, _ in pod_specs(objs) if o is not obj
                    ):
                        problems.append(f"Service {url.hostname}: its selector {sel} matches no pod template")
    for p in problems:
        print(f"check_refs: {p}")
    if problems:
        return 1
    n = sum(1 for _ in pod_specs(objs))
    print(f"check_refs: {n} pod templates, {sum(len(v) for v in defined.values())} Secrets, ConfigMaps and claims: names, keys, paths and restart policies agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
