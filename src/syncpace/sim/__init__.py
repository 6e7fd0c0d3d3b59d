"""The cluster simulator: topologies, collectives, contention, noise and the pacer,
writing the trace schema. ``syncpace simulate`` (:mod:`.settings`) is its front door;
:func:`~syncpace.sim.engine.simulate` runs one :class:`~syncpace.sim.engine.SimConfig`.
"""
