"""The core cost model: specs to parameters, FLOPs, memory, communication and step time.

Owns: the pure functions every plan is priced with, and the search bounds beside the exact
models they bound. May import: `models.catalog` and `models.errors`. Must not: import the
evidence (`models.evidence`) or the labs (`models.labs`).
"""
