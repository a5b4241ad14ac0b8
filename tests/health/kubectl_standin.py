#!/usr/bin/env python3
"""A stand-in ``kubectl`` for the few verbs remediation uses, over a JSON file of Nodes.

No API server can run on the test machines (DESIGN.md). This keeps Node objects in
``$KUBE_STANDIN_STATE`` and answers like kubectl 1.3x does (kubectl reference:
https://kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/ and
kubectl_cordon, kubectl_annotate, kubectl_get): ``get node N -o json`` prints a Node
(``spec.unschedulable`` only when true), ``cordon``/``uncordon``, ``annotate
[--overwrite] node N k=v | k-``, ``drain N ...`` cordons then evicts the node's pods,
failing with kubectl's PodDisruptionBudget message for a pod marked ``pdb_blocked``.
Every call is appended to the state's ``calls`` list. A node with ``"forbid": [verb, ...]``
refuses those verbs the way the API server answers a request an admission webhook or RBAC
denies (``Error from server (Forbidden): ...``, kubectl exit status 1).

DRA: ``get resourceslices -o json --field-selector spec.nodeName=N,spec.driver=D`` lists
the state's ``resourceslices`` (ResourceSlice objects, resource.k8s.io/v1, as the NVIDIA DRA
driver publishes them) that match; ``get devicetaintrules -o json -l k=v``, ``apply -f FILE``
(kubectl's "devicetaintrule.resource.k8s.io/NAME created|unchanged") and ``delete
devicetaintrule NAME`` keep the state's ``devicetaintrules``.

MIG re-apply: ``get node`` prints the node's ``labels`` too; ``label --overwrite node N k=v``;
``get pods -n NS -l k=v --field-selector spec.nodeName=N -o json`` lists the node's pods of
that namespace and label (a pod's ``namespace``/``labels`` in the state); ``delete pod -n NS
NAME...`` removes them ("pod "NAME" deleted", NotFound for one not there).
"""

import json
import os
import sys

path = os.environ["KUBE_STANDIN_STATE"]
with open(path) as handle:
    state = json.load(handle)
args = sys.argv[1:]
state.setdefault("calls", []).append(args)


def node(name):
    if name not in state["nodes"]:
        sys.stderr.write(f'Error from server (NotFound): nodes "{name}" not found\n')
        save()
        sys.exit(1)
    return state["nodes"][name]


def save():
    with open(path, "w") as handle:
        json.dump(state, handle)


verb = args[0]
target = args[1] if verb in ("cordon", "uncordon", "drain") else None
if target is not None and verb in state["nodes"].get(target, {}).get("forbid", []):
    sys.stderr.write(f'Error from server (Forbidden): admission webhook "node-guard.example.com" denied the request: '
                     f'{verb} of node {target} is not allowed\n')
    save()
    sys.exit(1)
if verb == "get" and args[1] == "node":
    n = node(args[2])
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": args[2], "annotations": n.get("annotations", {}),
                                                           "labels": n.get("labels", {})},
           "spec": {"unschedulable": True} if n.get("unschedulable") else {}}
    print(json.dumps(obj))
elif verb in ("cordon", "uncordon"):
    node(args[1])["unschedulable"] = verb == "cordon"
    print("node/{} {}".format(args[1], verb + "ed"))
elif verb == "annotate":
    rest = [a for a in args[1:] if a != "--overwrite"]
    n = node(rest[1])
    for item in rest[2:]:
        if item.endswith("-"):
            n.setdefault("annotations", {}).pop(item[:-1], None)
        else:
            key, value = item.split("=", 1)
            if key in n.get("annotations", {}) and "--overwrite" not in args:
                sys.stderr.write("error: --overwrite is false but found the following declared annotation(s): "
                                 f"'{key}' already has a value\n")
                save()
                sys.exit(1)
            n.setdefault("annotations", {})[key] = value
    print(f"node/{rest[1]} annotated")
elif verb == "drain":
    n = node(args[1])
    n["unschedulable"] = True
    print(f"node/{args[1]} cordoned")
    blocked = [p for p in n.get("pods", []) if p.get("pdb_blocked")]
    n["pods"] = blocked
    if blocked:
        sys.stderr.write('error when evicting pods/"{}" -n "default" (will retry after 5s): Cannot evict pod as it '
                         "would violate the pod's disruption budget.\n".format(blocked[0]["name"]))
        save()
        sys.exit(1)
    print(f"node/{args[1]} drained")
elif verb == "label":
    rest = [a for a in args[1:] if a != "--overwrite"]
    n = node(rest[1])
    for item in rest[2:]:
        key, value = item.split("=", 1)
        n.setdefault("labels", {})[key] = value
    print(f"node/{rest[1]} labeled")
elif verb == "get" and args[1] == "pods":
    ns, (key, value) = args[args.index("-n") + 1], args[args.index("-l") + 1].split("=", 1)
    name = args[args.index("--field-selector") + 1].split("=", 1)[1]
    items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": p["name"], "namespace": ns,
                                                              "labels": p.get("labels", {})},
              "spec": {"nodeName": name}}
             for p in node(name).get("pods", []) if p.get("namespace") == ns and p.get("labels", {}).get(key) == value]
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
elif verb == "delete" and args[1] == "pod":
    ns = args[args.index("-n") + 1]
    names = [a for i, a in enumerate(args[2:], 2) if a != "-n" and args[i - 1] != "-n"]
    for name in names:
        owners = [n for n in state["nodes"].values()
                  if any(p["name"] == name and p.get("namespace") == ns for p in n.get("pods", []))]
        if not owners:
            sys.stderr.write(f'Error from server (NotFound): pods "{name}" not found\n')
            save()
            sys.exit(1)
        for n in owners:
            n["pods"] = [p for p in n["pods"] if not (p["name"] == name and p.get("namespace") == ns)]
        print(f'pod "{name}" deleted')
elif verb == "get" and args[1] == "resourceslices":
    wanted = dict(item.split("=", 1) for item in args[args.index("--field-selector") + 1].split(","))
    items = [s for s in state.get("resourceslices", [])
             if all((s["spec"].get("nodeName") if k == "spec.nodeName" else s["spec"].get("driver")) == v
                    for k, v in wanted.items())]
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
elif verb == "get" and args[1] == "devicetaintrules":
    key, value = args[args.index("-l") + 1].split("=", 1)
    items = [r for r in state.get("devicetaintrules", {}).values() if r["metadata"]["labels"].get(key) == value]
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
elif verb == "apply":
    with open(args[args.index("-f") + 1]) as handle:
        obj = json.load(handle)
    rules = state.setdefault("devicetaintrules", {})
    name = obj["metadata"]["name"]
    print(f"devicetaintrule.resource.k8s.io/{name} {'unchanged' if rules.get(name) == obj else 'created'}")
    rules[name] = obj
elif verb == "delete" and args[1] == "devicetaintrule":
    if state.get("devicetaintrules", {}).pop(args[2], None) is None:
        sys.stderr.write(f'Error from server (NotFound): devicetaintrules.resource.k8s.io "{args[2]}" not found\n')
        save()
        sys.exit(1)
    print(f'devicetaintrule.resource.k8s.io "{args[2]}" deleted')
else:
    sys.stderr.write(f"kubectl stand-in: unsupported {args}\n")
    save()
    sys.exit(2)
save()
