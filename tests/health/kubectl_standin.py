#!/usr/bin/env python3
"""A stand-in ``kubectl`` for the few verbs remediation uses, over a JSON file of Nodes.

No API server can run on the test machines (DESIGN.md). This keeps Node objects in
``$KUBE_STANDIN_STATE`` and answers like kubectl 1.3x does (kubectl reference:
https://kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/ and
kubectl_cordon, kubectl_annotate, kubectl_get): ``get node N -o json`` prints a Node
(``spec.unschedulable`` only when true), ``cordon``/``uncordon``, ``annotate
[--overwrite] node N k=v | k-``, ``drain N ...`` cordons then evicts the node's pods,
failing with kubectl's PodDisruptionBudget message for a pod marked ``pdb_blocked``.
Every call is appended to the state's ``calls`` list.
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
if verb == "get" and args[1] == "node":
    n = node(args[2])
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": args[2], "annotations": n.get("annotations", {})},
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
else:
    sys.stderr.write(f"kubectl stand-in: unsupported {args}\n")
    save()
    sys.exit(2)
save()
