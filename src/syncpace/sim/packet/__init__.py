"""The packet tier: collectives as TCP transfers through ns-3 (``--tier packet``)."""
