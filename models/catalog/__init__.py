"""The catalog: hardware, model presets, kernel profiles and Hugging Face config ingestion.

Owns: the data the cost model reads about GPUs, nodes and architectures, and turning
request inputs into specs. Must not: import the core cost model (`models.core`), the evidence
(`models.evidence`) or the labs (`models.labs`).
"""
