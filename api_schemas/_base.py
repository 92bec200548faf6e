"""The pydantic base class every input type shares: frozen, no unknown fields."""

from pydantic import BaseModel, ConfigDict


class SpecModel(BaseModel):
    """Immutable input type that rejects unknown fields (so typos fail loudly)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ResultModel(BaseModel):
    """Response type: immutable, extra fields allowed only where declared."""

    model_config = ConfigDict(frozen=True)
