"""The FastAPI service, persistence, CLI and HTTP client: the only layer with I/O."""

__all__: list[str] = []
