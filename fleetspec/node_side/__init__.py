"""Code that leaves the controller: it runs on GPU nodes or inside the cluster.

Everything in this folder is shipped as source and run by a node's ``python3``: the fact
collector (``collector.py``, copied alone), the node check with its fault catalog and
classifier (``node_check.py``, ``faults.py``, ``classify.py``, with ``hostlist.py``), and the
in-cluster remediator (``k8s_remediator.py`` with ``device_taints.py`` and
``min_healthy.py``, in a ConfigMap), and the Slurm tenants' account reconciler
(``slurm_accounts.py``, copied alone to the first controller). So each module imports only the standard library and
this folder, and keeps Python 3.8 syntax, the oldest ``python3`` a supported node OS ships.
``tests/test_architecture.py`` imports every module in a bare interpreter with nothing but
this folder on the path, so the promise is checked, not remembered.

The controller imports from here freely (it is the lowest layer); nothing here imports
back. ``contract.py`` holds what both sides must agree on.
"""
