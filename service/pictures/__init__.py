"""SVG pictures of API results: pipeline timeline, memory stack, rank mesh, MoE placement,
RL memory by phase, goodput against checkpoint interval.

Owns: turning the response models the API returns into standalone SVG documents, each
labelled "deterministic model, not a measurement". Must not: compute any figure of the cost
model; every number drawn is a field of the result it is given.
"""

from service.pictures.checkpoints import checkpoint_svg
from service.pictures.memory import memory_svg
from service.pictures.mesh import mesh_svg
from service.pictures.placement import placement_svg
from service.pictures.seesaw import seesaw_svg
from service.pictures.svg import MODEL_LABEL
from service.pictures.timeline import timeline_svg
from service.pictures.timeline_summary import timeline_summary_svg

__all__ = ["MODEL_LABEL", "checkpoint_svg", "memory_svg", "mesh_svg", "placement_svg", "seesaw_svg",
           "timeline_summary_svg", "timeline_svg"]
