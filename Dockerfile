# The roofline service on a slim Python base, as a non-root user; migrations run before the server.
FROM python:3.11-slim

# MALLOC_ARENA_MAX: two malloc arenas, not one per thread-pool thread (about 8 MB less resident per worker
# after a long run, `make bench`).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    ROOFLINE_DATABASE_URL=sqlite:////var/lib/roofline/roofline.db \
    MPLCONFIGDIR=/tmp/matplotlib \
    MALLOC_ARENA_MAX=2

WORKDIR /app
RUN useradd --system --uid 10001 --home-dir /app roofline \
    && mkdir -p /var/lib/roofline && chown roofline /var/lib/roofline

# The dependencies first, from pyproject.toml alone, held to the versions the tests were verified with
# (constraints.txt): a change to the code reuses this layer instead of reinstalling every dependency.
COPY pyproject.toml README.md constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --constraint constraints.txt -r /tmp/requirements.txt
COPY schemas ./schemas
COPY service ./service
COPY migrations ./migrations
RUN pip install --no-deps -e .

USER roofline
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"

# Migrate explicitly first (a no-op at head), then serve without migrating again on start.
CMD ["sh", "-c", "python -m service.persistence.migrate && ROOFLINE_MIGRATE_ON_START=false exec python -m service.runtime.server --host 0.0.0.0 --port 8000"]
