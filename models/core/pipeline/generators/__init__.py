"""Generators: one module per schedule family, each holding its schedules' op orders,
parameter rules, closed forms and traits records.

Owns: nothing but the re-exports; `models.core.pipeline.registry` lists the records and
dispatches. Must not: dispatch on a schedule name.
"""

from models.core.pipeline.generators.classic import (
    gpipe,
    interleaved,
    interleaved_order,
    one_f_one_b,
)
from models.core.pipeline.generators.dualpipe import dualpipe, dualpipev
from models.core.pipeline.generators.zero_bubble import zb_h1, zb_h2, zbv

__all__ = [
    "dualpipe",
    "dualpipev",
    "gpipe",
    "interleaved",
    "interleaved_order",
    "one_f_one_b",
    "zb_h1",
    "zb_h2",
    "zbv",
]
