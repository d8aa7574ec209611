"""docs/settings.md, rendered from the fields of `Settings`: each setting's environment variable, type,
default, bounds and description (the field's docstring). Regenerate the page with `make settings-doc`, or
`python -m outbox_bridge.core.reference > docs/settings.md`; tests/unit/test_settings_reference.py fails
when it is out of date."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic.fields import FieldInfo

from outbox_bridge.core.settings import SECRET_SETTINGS, Settings

# (title, what the section is about, the settings in it, in the order shown). Every field is in one section.
SECTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Store",
        "Where job state lives, and how hard the processes try to reach it.",
        ("database_url", "sqlite_synchronous", "store_lock_timeout_seconds", "results_dir"),
    ),
    (
        "Broker",
        "RabbitMQ and the names of the exchanges and queues the relays and consumers declare.",
        ("rabbitmq_url", "exchange", "queue", "dead_letter_exchange", "dead_letter_queue", "delivery_limit"),
    ),
    (
        "API and HTTP",
        "What one `outbox-bridge api` process accepts from its clients.",
        (
            "max_body_bytes",
            "http_header_timeout_seconds",
            "http_body_timeout_seconds",
            "http_max_head_bytes",
            "http_max_connections",
            "http_max_connections_per_client",
        ),
    ),
    (
        "Authentication",
        "Bearer tokens, signed result links and dashboard sessions.",
        (
            "auth_secret",
            "token_max_ttl_seconds",
            "auth_issuer",
            "auth_audience",
            "result_link_seconds",
            "dashboard_session_seconds",
        ),
    ),
    (
        "Jobs and kinds",
        "Which kinds run, and how attempts are leased and retried.",
        (
            "allowed_kinds",
            "outbox_bridge_kinds",
            "max_attempts",
            "lease_seconds",
            "backoff_base_seconds",
            "backoff_max_seconds",
            "max_snoozes",
        ),
    ),
    (
        "Relay",
        "What `outbox-bridge relay` publishes, how fast, and the store work it does on a timer.",
        (
            "relay_batch_size",
            "relay_window",
            "relay_poll_seconds",
            "relay_lease_seconds",
            "publish_ahead",
            "sweep_interval_seconds",
            "reannounce_after_seconds",
            "dead_letter_check_seconds",
        ),
    ),
    (
        "Webhooks",
        "How the relay role's holder sends completion webhooks (`outbox-bridge webhooks`).",
        (
            "webhook_timeout_seconds",
            "webhook_retry_seconds",
            "webhook_max_in_flight_per_endpoint",
            "webhook_tenant_share",
            "webhook_senders",
            "webhook_allow_private",
            "webhook_backoff_base_seconds",
            "webhook_backoff_max_seconds",
            "webhook_poll_seconds",
        ),
    ),
    (
        "Consumers and workers",
        "How `outbox-bridge consumer` and `outbox-bridge worker` take, share and give back work.",
        (
            "consumer_prefetch",
            "consumer_delivery_hold_seconds",
            "degraded_after_seconds",
            "tenant_max_running",
            "kind_max_running",
            "kind_rate_limits",
            "concurrency_key_max_running",
            "tenant_share",
            "shutdown_grace_seconds",
        ),
    ),
    (
        "Retention",
        "How long finished jobs and published outbox rows are kept.",
        ("job_retention_seconds", "outbox_retention_seconds", "retention_check_seconds"),
    ),
    (
        "Observability",
        "Heartbeats, warnings, metrics and logs.",
        (
            "heartbeat_seconds",
            "queued_age_warning_seconds",
            "metrics_port",
            "metrics_host",
            "metrics_token",
            "log_format",
            "log_job_events",
            "access_log",
        ),
    ),
    (
        "Development",
        "For local trials, the demo, the tests and the benchmark.",
        ("outbox_bridge_dev", "notify_log", "execution_log", "stats_dir"),
    ),
)

HEADER = """\
# Settings

<!-- Generated from outbox_bridge/core/settings.py by `make settings-doc`: edit the docstrings there. -->

Every process reads its settings once, at start, from environment variables, then from a `.env` file in
its working directory (the environment wins). Names are the variables below; a value that does not parse
or is out of bounds stops the process with one line naming the setting. Give every process of a
deployment the same settings.
"""

SECRETS = (
    "{names} can each be given as `<NAME>_FILE` instead: the path of a file that holds the value (its"
    " final line break is dropped), as Docker and Kubernetes mount secrets. Naming a setting both ways"
    " (`<NAME>` set and not empty), or a file that cannot be read, stops the process with the setting's"
    " name."
)

TRACES = """\
## Traces: `OTEL_*`

Traces are not configured here: with the `otel` extra installed (`pip install 'outbox-bridge[otel]'`), a
process traces when the standard OpenTelemetry variable `OTEL_TRACES_EXPORTER` is set (and not `none`), and
the other `OTEL_*` variables choose the exporter's endpoint, the service name and the sampler. See
[Traces](reference/observability.md#traces).
"""

# The page's line length, as the other docs.
WIDTH = 110
# Stands for a space inside a code span while a paragraph is wrapped.
NO_BREAK = "\x00"

# What a field's default means when the value alone would mislead.
SPECIAL_DEFAULTS = {
    "auth_secret": "none usable: a built-in development value, refused unless `OUTBOX_BRIDGE_DEV=1`"
}


def env_name(field: str) -> str:
    return field.upper()


def describe_type(annotation: Any) -> str:
    """The type as a user writes the value."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return describe_type(args[0])
    if get_origin(annotation) is Literal:
        return " or ".join(f"`{a}`" for a in get_args(annotation))
    if get_origin(annotation) is tuple:
        return "comma-separated names"
    names = {str: "text", bool: "`1` or `0`", int: "integer", float: "number", Path: "path"}
    return names.get(annotation, str(annotation))


def describe_default(name: str, field: FieldInfo) -> str:
    """The default as a user would write it, with a readable length for long durations."""
    value = field.default
    if name in SPECIAL_DEFAULTS:
        return SPECIAL_DEFAULTS[name]
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, Path) and not value.is_absolute():
        return f"`./{value}`"
    shown = f"`{value}`"
    if name.endswith("_seconds") and isinstance(value, int) and value >= 60:
        shown += f" ({duration(value)})"
    return shown


def duration(seconds: int) -> str:
    """`2592000` -> `30 days`: the largest unit that divides it."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def describe_bounds(field: FieldInfo) -> str:
    """The Field constraints in words, or "" when there are none."""
    words = []
    for item in field.metadata:
        if isinstance(item, Ge):
            words.append(f"at least {item.ge}")
        elif isinstance(item, Gt):
            words.append(f"more than {item.gt}")
        elif isinstance(item, Le):
            words.append(f"at most {item.le}")
        elif isinstance(item, Lt):
            words.append(f"less than {item.lt}")
        elif isinstance(item, MinLen):
            words.append(f"at least {item.min_length} character{'s' if item.min_length != 1 else ''}")
    return ", ".join(words)


def wrapped(text: str, indent: str = "") -> str:
    """`text` as one paragraph of lines of at most `WIDTH` characters, never breaking a code span."""
    spans = text.split("`")
    kept = "`".join(part.replace(" ", NO_BREAK) if i % 2 else part for i, part in enumerate(spans))
    lines = textwrap.fill(
        " ".join(kept.split()),
        WIDTH,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines.replace(NO_BREAK, " ")


def render_setting(name: str, field: FieldInfo) -> str:
    facts = [f"Type: {describe_type(field.annotation)}", f"Default: {describe_default(name, field)}"]
    bounds = describe_bounds(field)
    if bounds:
        facts.append(f"Bounds: {bounds}")
    if name in SECRET_SETTINGS:
        facts.append(f"Or from a file: `{env_name(name)}_FILE`")
    lines = [f"### `{env_name(name)}`", "", wrapped(field.description or ""), "", wrapped(" · ".join(facts))]
    return "\n".join(lines) + "\n"


def render() -> str:
    """The whole page."""
    fields = Settings.model_fields
    parts = [HEADER, contents()]
    for title, about, names in SECTIONS:
        parts.append(f"## {title}\n\n{about}\n")
        parts.extend(render_setting(name, fields[name]) for name in names)
    parts.append(secrets())
    parts.append(TRACES)
    return "\n".join(parts)


def secrets() -> str:
    """The section on the `<NAME>_FILE` variables."""
    names = [f"`{env_name(name)}`" for name in SECRET_SETTINGS]
    rows = [f"| `{env_name(name)}_FILE` | `{env_name(name)}` |" for name in SECRET_SETTINGS]
    text = SECRETS.format(names=", ".join(names[:-1]) + " and " + names[-1])
    table = ["| variable | holds the value of |", "|---|---|", *rows]
    return "## Secrets from files\n\n" + wrapped(text) + "\n\n" + "\n".join(table) + "\n"


def contents() -> str:
    """One line per section, with its variables."""
    lines = []
    for title, _, names in SECTIONS:
        anchor = title.lower().replace(" ", "-")
        listed = ", ".join(f"`{env_name(name)}`" for name in names)
        lines.append(wrapped(f"- [{title}](#{anchor}): {listed}", indent="  "))
    lines.append("- [Secrets from files](#secrets-from-files), [Traces](#traces-otel_)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
