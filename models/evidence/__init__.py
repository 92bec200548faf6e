"""The evidence: published runs, calibration fits, error bands and plausibility records.

Owns: what the cost model is measured against and what it was fitted on. May import the
core and the catalog. Must not: import the labs (`models.labs`).
"""
