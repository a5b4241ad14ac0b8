"""The bare-metal plane: BMCs over Redfish (``redfish``), their drift from the spec
(``drift``), reading, planning and applying it (``run``), hot spares and break-fix tickets
(``spares``, ``tickets``). docs/bare-metal.md."""
