"""Apply drivers: ansible-runner for nodes and Slurm, Pulumi Automation for Kubernetes."""
