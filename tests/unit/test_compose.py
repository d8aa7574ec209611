"""The compose file and the image describe a stack the code can actually run: every command is a real
`outbox-bridge` subcommand with real options, every environment variable is a real setting with a valid
default, and the one-host SQLite layout (one shared volume) holds."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import typer
import typer.main
import yaml
from typer.core import TyperGroup

from outbox_bridge.cli import app
from outbox_bridge.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
APP_SERVICES = ("api", "relay", "consumer")
REQUIRED_SETTINGS = (
    "DATABASE_URL",
    "RABBITMQ_URL",
    "AUTH_SECRET",
    "RESULTS_DIR",
    "LEASE_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_BODY_BYTES",
)
DEFAULTED = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*):-(?P<default>[^}]*)\}$")
# Settings with no safe default: compose refuses to start the stack without them (`${NAME:?message}`).
REQUIRED = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*):\?(?P<message>[^}]+)\}$")
NO_DEFAULT = ("AUTH_SECRET",)
CLUSTER_APP_SERVICES = ("api-cluster", "relay-cluster", "consumer-cluster")
ALL_APP_SERVICES = (*APP_SERVICES, "api-pg", "relay-pg", "consumer-pg", *CLUSTER_APP_SERVICES)
CLUSTER_NODES = ("rabbitmq-1", "rabbitmq-2", "rabbitmq-3")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def image_entrypoint(dockerfile: str) -> list[str]:
    found = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile, flags=re.MULTILINE)
    assert len(found) == 1, "the Dockerfile needs exactly one exec-form ENTRYPOINT"
    return list(yaml.safe_load(found[0]))


def cli_invocations(service: dict[str, Any], entrypoint: list[str]) -> list[list[str]]:
    """The `outbox-bridge` argument lists a service runs: its command after the image entrypoint, or each
    `outbox-bridge ...` step of a `sh -c` command."""
    command = service["command"]
    if "entrypoint" not in service:
        assert entrypoint == ["outbox-bridge"]
        return [list(command)]
    assert service["entrypoint"] == ["/bin/sh", "-c"], "only a plain `sh -c` entrypoint override is expected"
    script = command[0] if isinstance(command, list) else command
    steps = [shlex.split(step) for step in script.split("&&")]
    invocations = []
    for step in steps:
        if step[0] == "exec":
            step = step[1:]
        assert step[0] == "outbox-bridge", f"a step that is not outbox-bridge: {step}"
        invocations.append(step[1:])
    return invocations


def parse_cli(args: list[str]) -> Any:
    """Resolve `args` against the real CLI and parse the leaf's options: an unknown subcommand fails the
    assertion, an unknown option or an invalid value raises the CLI's usage error. Nothing is run."""
    command: Any = typer.main.get_command(app)
    path = ["outbox-bridge"]
    rest = list(args)
    while isinstance(command, TyperGroup):
        assert rest, f"{' '.join(path)} needs a subcommand"
        name = rest.pop(0)
        sub = command.get_command(typer.Context(command), name)
        assert sub is not None, f"`{' '.join(path)} {name}` is not a command"
        command, path = sub, [*path, name]
    command.make_context(" ".join(path), rest)
    return command


def test_parse_cli_rejects_unknown_subcommands_and_options() -> None:
    with pytest.raises(AssertionError):
        parse_cli(["no-such-command"])
    with pytest.raises(Exception, match="No such option"):
        parse_cli(["consumer", "--no-such-option", "1"])
    with pytest.raises(typer.BadParameter):
        parse_cli(["consumer", "--concurrency", "0"])


def test_image_runs_outbox_bridge_as_a_non_root_user(dockerfile: str) -> None:
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, flags=re.MULTILINE)
    assert image_entrypoint(dockerfile) == ["outbox-bridge"]
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users and users[-1] not in {"root", "0"}
    assert re.search(r"chown\b.*\s/var/lib/outbox-bridge\b", dockerfile), "the data directory must be owned"


def test_image_installs_the_locked_dependencies_in_a_layer_before_the_sources(dockerfile: str) -> None:
    steps = [line for line in dockerfile.splitlines() if re.match(r"^(COPY|RUN|ADD)\s", line)]
    copy_lock = steps.index("COPY requirements/runtime.txt requirements/runtime.txt")
    install_lock = steps.index("RUN pip install -r requirements/runtime.txt")
    copy_sources = steps.index("COPY . .")
    install_project = next(
        i for i, step in enumerate(steps) if step.startswith("RUN pip install --no-deps .")
    )
    assert copy_lock < install_lock < copy_sources < install_project
    assert not any(step.startswith(("COPY", "ADD")) for step in steps[:copy_lock])
    assert (ROOT / "requirements" / "runtime.txt").is_file()
    assert "requirements" not in (ROOT / ".dockerignore").read_text().split()


def test_the_runtime_lock_pins_every_dependency_at_the_dev_locks_version() -> None:
    """The image (runtime lock) runs the versions the tests ran on (dev lock): `make lock` resolves the
    runtime lock under the dev lock's pins."""

    def pins(name: str) -> dict[str, str]:
        lines = (ROOT / "requirements" / name).read_text().splitlines()
        pinned = [line.split(";")[0].strip() for line in lines if line and not line.startswith((" ", "#"))]
        found = dict(line.split("==", 1) for line in pinned)  # an environment marker follows a ";"
        assert all(re.fullmatch(r"[\w.+!-]+", version) for version in found.values()), found
        return found

    runtime, dev = pins("runtime.txt"), pins("dev.txt")
    assert {"fastapi", "sqlalchemy", "swagger-ui-bundle-v2"} <= runtime.keys()
    assert {name: dev.get(name) for name in runtime} == runtime


@pytest.mark.parametrize("name", (*APP_SERVICES, *CLUSTER_APP_SERVICES))
def test_every_service_command_is_a_real_cli_invocation(
    compose: dict[str, Any], dockerfile: str, name: str
) -> None:
    invocations = cli_invocations(compose["services"][name], image_entrypoint(dockerfile))
    assert invocations
    for args in invocations:
        parse_cli(args)


def test_services_run_the_documented_commands(compose: dict[str, Any], dockerfile: str) -> None:
    entrypoint = image_entrypoint(dockerfile)
    services = compose["services"]
    assert cli_invocations(services["api"], entrypoint) == [
        ["db", "init"],
        ["api", "--host", "0.0.0.0", "--port", "8000"],
    ]
    assert cli_invocations(services["relay"], entrypoint) == [["relay"]]
    assert cli_invocations(services["consumer"], entrypoint) == [["consumer", "--concurrency", "4"]]
    assert services["consumer"]["deploy"]["replicas"] == 2


@pytest.mark.parametrize("name", APP_SERVICES)
def test_every_environment_variable_is_a_setting_with_a_valid_default(
    compose: dict[str, Any], name: str
) -> None:
    environment = compose["services"][name]["environment"]
    assert set(REQUIRED_SETTINGS) <= set(environment)
    defaults: dict[str, Any] = {}
    for variable, value in environment.items():
        assert variable.lower() in Settings.model_fields, f"{variable} is not a setting"
        if variable in NO_DEFAULT:
            continue
        match = DEFAULTED.match(str(value))
        assert match, f"{variable} must read ${{{variable}:-default}}, not {value!r}"
        assert match["name"] == variable
        defaults[variable.lower()] = match["default"]
    Settings(**defaults)


def test_rabbitmq_is_pinned_and_health_checked(compose: dict[str, Any]) -> None:
    rabbitmq = compose["services"]["rabbitmq"]
    assert rabbitmq["image"] == "rabbitmq:3.13-management"
    assert rabbitmq["healthcheck"]["test"] == ["CMD", "rabbitmq-diagnostics", "-q", "ping"]


def test_api_health_check_asks_readyz_on_the_served_port(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    probe = " ".join(api["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/readyz" in probe
    assert "--port 8000" in api["command"][0]


@pytest.mark.parametrize(
    "name", ["relay", "consumer", "relay-pg", "consumer-pg", "relay-cluster", "consumer-cluster"]
)
def test_relays_and_consumers_are_healthy_only_while_their_own_heartbeat_is_fresh(
    compose: dict[str, Any], name: str
) -> None:
    check = compose["services"][name]["healthcheck"]
    role = name.removesuffix("-pg").removesuffix("-cluster")
    assert check["test"] == ["CMD", "outbox-bridge", "healthcheck", role]
    parse_cli(check["test"][2:])
    beat = float(compose["x-settings"]["HEARTBEAT_SECONDS"].split(":-")[1].rstrip("}"))
    assert int(check["interval"].rstrip("s")) >= beat, "a check more often than a beat could see no beat yet"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_services_start_only_after_their_dependencies_are_healthy(compose: dict[str, Any], name: str) -> None:
    depends = compose["services"][name]["depends_on"]
    assert depends["rabbitmq"] == {"condition": "service_healthy"}
    if name != "api":
        assert depends["api"] == {"condition": "service_healthy"}
    for dependency in depends.values():
        assert dependency["condition"] == "service_healthy"


def test_one_named_volume_holds_the_store_and_results_for_every_process(compose: dict[str, Any]) -> None:
    mounts = {tuple(compose["services"][name]["volumes"]) for name in APP_SERVICES}
    assert len(mounts) == 1, "api, relay and consumers must share exactly the same volume"
    (volumes,) = mounts
    assert len(volumes) == 1
    volume, _, target = volumes[0].partition(":")
    assert volume in compose["volumes"]
    environment = compose["services"]["api"]["environment"]
    database = DEFAULTED.match(environment["DATABASE_URL"])
    results = DEFAULTED.match(environment["RESULTS_DIR"])
    assert database and database["default"] == f"sqlite:///{target}/jobs.db"
    assert results and results["default"].startswith(f"{target}/")


def test_compose_file_says_sqlite_means_one_host() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "one host" in text.lower()
    assert "same machine" in text.lower()


@pytest.mark.parametrize("name", ALL_APP_SERVICES)
def test_auth_secret_has_no_default_so_the_stack_needs_one(compose: dict[str, Any], name: str) -> None:
    environment = compose["services"][name]["environment"]
    for variable in NO_DEFAULT:
        match = REQUIRED.match(str(environment[variable]))
        assert match, f"{variable} must read ${{{variable}:?message}}, not {environment[variable]!r}"
        assert match["name"] == variable
        assert "32 bytes" in match["message"]
    assert "OUTBOX_BRIDGE_DEV" not in environment, "the stack publishes its port: never a development setup"


def test_compose_file_says_how_to_make_a_secret() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "secrets.token_urlsafe(48)" in text


def test_cluster_profile_runs_three_rabbitmq_nodes_that_find_each_other_from_one_peer_list(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert "cluster" in services["postgres"]["profiles"]
    config_mounts, cookies = set(), set()
    for name in CLUSTER_NODES:
        node = services[name]
        assert node["profiles"] == ["cluster"]
        assert node["image"] == services["rabbitmq"]["image"]
        assert node["hostname"] == name
        assert node["healthcheck"]["test"] == ["CMD", "rabbitmq-diagnostics", "-q", "ping"]
        data, config = node["volumes"]
        assert data == f"{name}-data:/var/lib/rabbitmq" and f"{name}-data" in compose["volumes"]
        config_mounts.add(config)
        cookies.add(node["environment"]["RABBITMQ_ERLANG_COOKIE"])
    assert len(cookies) == 1, "every node of a cluster has the same Erlang cookie"
    assert DEFAULTED.match(cookies.pop())
    (mount,) = config_mounts
    source, target, mode = mount.split(":")
    assert target.startswith("/etc/rabbitmq/conf.d/") and target.endswith(".conf") and mode == "ro"
    lines = (ROOT / source).read_text().splitlines()
    settings = dict(line.split(" = ", 1) for line in lines if line and not line.startswith("#"))
    assert settings["cluster_formation.peer_discovery_backend"] == "classic_config"
    peers = {
        value for key, value in settings.items() if key.startswith("cluster_formation.classic_config.nodes.")
    }
    assert peers == {f"rabbit@{name}" for name in CLUSTER_NODES}
    assert settings["quorum_queue.continuous_membership_reconciliation.target_group_size"] == "3"


@pytest.mark.parametrize("name", CLUSTER_APP_SERVICES)
def test_cluster_profile_points_the_stack_at_all_three_nodes_on_postgresql(
    compose: dict[str, Any], name: str
) -> None:
    service = compose["services"][name]
    assert service["profiles"] == ["cluster"]
    environment = service["environment"]
    broker = DEFAULTED.match(environment["RABBITMQ_URL"])
    database = DEFAULTED.match(environment["DATABASE_URL"])
    assert broker and database and database["default"].startswith("postgresql+psycopg://")
    urls = [urlparse(url) for url in broker["default"].split(",")]
    assert [(url.scheme, url.hostname, url.port) for url in urls] == [
        ("amqp", node, 5672) for node in CLUSTER_NODES
    ]
    Settings(rabbitmq_url=broker["default"], database_url=database["default"])
    depends = service["depends_on"]
    assert {*CLUSTER_NODES, "postgres"} <= set(depends)
    assert "rabbitmq" not in depends
    assert all(dependency == {"condition": "service_healthy"} for dependency in depends.values())
