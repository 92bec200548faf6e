"""The labs built on the core: the RL memory seesaw, checkpoint interval and failures, and
the remote activation offload what-if.

Owns: what-if analyses that answer their own endpoints. May import the core and the catalog.
Must not: be imported by the core, the catalog or the evidence.
"""
