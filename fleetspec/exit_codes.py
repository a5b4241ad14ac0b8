"""The exit codes of every fleetspec command (README "Exit codes", docs/security.md).

A usage error (an unknown option, a missing argument, a value out of range) never
shares a code with a result, so a pipeline step such as ``fleetspec plan ...;
test $? -ne 1`` cannot mistake a typo for "changes present".
"""

OK = 0  # success; for plan: planned (with --detailed-exitcode: no changes)
ERROR = 1  # invalid spec, drift, failed apply, unreadable state: the command ran and says why
CHANGES = 2  # --detailed-exitcode only: plan's changes present, verify's drift
USAGE = 64  # EX_USAGE (sysexits.h): the command line itself is wrong; nothing was done
