# ecron: the scheduler daemon in a container.
#
#   docker build -t ecron .
#   docker run -p 8080:8080 -e ECRON_API_TOKEN="$(openssl rand -hex 24)" \
#     -v "$PWD/config:/etc/ecron:ro" -v ecron-data:/var/lib/ecron ecron
#
# The API listens on 0.0.0.0 here, so a token is required: without api_token (or
# api_tokens, ECRON_API_TOKENS, ECRON_API_TOKENS_FILE) the daemon refuses to start, unless
# ECRON_ALLOW_UNAUTHENTICATED=true says that anyone who reaches the port may act.
#
# /etc/ecron holds ecron.yaml and tasks/*.yaml (it may be mounted read-only).
# /var/lib/ecron is for the SQLite database: point `database:` in ecron.yaml at
# sqlite+aiosqlite:////var/lib/ecron/ecron.db, or pass
# -e ECRON_DATABASE_URL=sqlite+aiosqlite:////var/lib/ecron/ecron.db (ECRON_* variables
# win over the file). For PostgreSQL: -e ECRON_DATABASE_URL=postgresql+asyncpg://user:pw@host/db
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/ecron

# examples/ is part of the package: the wheel ships examples/job_service.py for `ecron demo`.
COPY pyproject.toml README.md ./
COPY ecron ./ecron
COPY examples ./examples
RUN pip install --no-cache-dir '.[redis]' \
 && useradd --system --uid 10001 --user-group --home-dir /srv/ecron --shell /usr/sbin/nologin ecron \
 && mkdir -p /etc/ecron /var/lib/ecron \
 && chown ecron:ecron /var/lib/ecron

ENV ECRON_LISTEN=0.0.0.0:8080

USER ecron
VOLUME ["/etc/ecron", "/var/lib/ecron"]
EXPOSE 8080

# Slim images have no curl; the standard library does the check (a non-2xx answer raises).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

CMD ["ecron", "run", "-c", "/etc/ecron"]
