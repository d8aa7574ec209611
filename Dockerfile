# The outbox-bridge image: one image for every process (api, relay, consumer, worker, CLI).
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# An unprivileged user owns the data directory; nothing runs as root.
RUN groupadd --system --gid 10001 outbox \
 && useradd --system --uid 10001 --gid outbox --home-dir /srv/outbox-bridge --shell /usr/sbin/nologin outbox \
 && mkdir -p /srv/outbox-bridge /var/lib/outbox-bridge/results \
 && chown -R outbox:outbox /var/lib/outbox-bridge

WORKDIR /srv/outbox-bridge
# The dependencies first, at the versions the lock pins, in a layer of their own: it is rebuilt only when
# the lock changes, not on every edit of the sources below.
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip install -r requirements/runtime.txt
# Then the project itself, with nothing resolved again (`--no-deps`): only the lock decides versions.
COPY . .
RUN pip install --no-deps . && rm -rf build *.egg-info

# A named volume mounted here starts with this ownership, so the non-root processes can write the store.
VOLUME ["/var/lib/outbox-bridge"]
ENV DATABASE_URL=sqlite:////var/lib/outbox-bridge/jobs.db \
    RESULTS_DIR=/var/lib/outbox-bridge/results \
    NOTIFY_LOG=/var/lib/outbox-bridge/notify-provider.jsonl

USER outbox
EXPOSE 8000
ENTRYPOINT ["outbox-bridge"]
CMD ["--help"]
