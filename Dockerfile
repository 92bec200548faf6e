# atlas-planner API image: the package installed into a slim Python 3.11 image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    ATLAS_SQLITE_PATH=/data/atlas-planner.db

WORKDIR /app
COPY pyproject.toml README.md ./
COPY api_schemas ./api_schemas
COPY models ./models
COPY solver ./solver
COPY service ./service
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data atlas \
    && mkdir -p /data && chown atlas /data

USER atlas
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, httpx; sys.exit(httpx.get('http://127.0.0.1:8000/healthz', timeout=2).status_code != 200)"]
CMD ["atlas-planner", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
