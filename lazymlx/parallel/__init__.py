"""The parallel wing, above the engine: several processes (mlx.launch) running one model.

collectives (a tensor-parallel group's messages), distributed (joining a group, sharding, a
rank's failure), context_parallel (a first prompt cut into slices along a ring of ranks: its
chain's messages in chain, the slices' costs in costs, one rank's layers in chain_lane) and
watchdog (deadlines on a neighbour's waits). Joining a group installs what it changes in the
engine through lazymlx/engine/hooks.py; the engine imports nothing from here.
"""
