"""`--queues` as `worker.queues.pools` reads it, and the broker topology of the named queues."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from outbox_bridge.broker import topology
from outbox_bridge.worker.queues import Pool, QueuesError, loaded, pools, threads
from tests.conftest import make_settings


def test_without_queues_one_pool_of_the_concurrency_runs_every_loaded_queue() -> None:
    assert "default" in loaded()
    assert pools(None, 4) == [Pool(tuple(loaded()), 4, every=True)]
    assert pools(None, 4)[0].claimed is None  # no filter on the store's claims
    assert pools("fast", 4)[0].claimed == ("fast",)


def test_queues_with_a_number_get_pools_of_their_own_and_the_others_share_the_concurrency() -> None:
    assert pools("fast, mail ,slow=2,bulk_1=1", 4) == [
        Pool(("fast", "mail"), 4),
        Pool(("slow",), 2),
        Pool(("bulk_1",), 1),
    ]
    assert pools("fast=1,slow=1", 8) == [Pool(("fast",), 1), Pool(("slow",), 1)]
    assert threads(pools("fast=1,slow=3,default", 2)) == 6


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("Fast", "'Fast' is not a queue name (1 to 64 characters of a-z, 0-9, '_' and '-')"),
        ("fast,,slow", "'' is not a queue name"),
        ("", "'' is not a queue name"),
        ("a.b", "'a.b' is not a queue name"),
        ("x" * 65, "is not a queue name"),
        ("fast=0", "'fast=0': the number of threads must be a whole number above 0"),
        ("fast=-1", "the number of threads must be a whole number above 0"),
        ("fast=1.5", "the number of threads must be a whole number above 0"),
        ("fast=two", "the number of threads must be a whole number above 0"),
        ("fast=", "the number of threads must be a whole number above 0"),
        ("fast=²", "the number of threads must be a whole number above 0"),
        ("fast,slow,fast=2", "queue 'fast' is named twice"),
        ("slow=1,slow=1", "queue 'slow' is named twice"),
    ],
)
def test_a_wrong_queues_option_says_what_is_wrong_in_one_line(spec: str, said: str) -> None:
    with pytest.raises(QueuesError) as refused:
        pools(spec, 4)
    assert str(refused.value).startswith("--queues: ")
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


class Recording:
    """A channel that records what is declared on it and deleted from it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((method, args, kwargs))


def test_the_default_queue_keeps_the_names_of_a_deployment_without_named_queues(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, queue="jobs", exchange="jobs")
    assert (topology.queue_name(settings, "default"), topology.routing_key("default")) == ("jobs", "jobs")
    assert (topology.queue_name(settings, "fast"), topology.routing_key("fast")) == ("jobs.fast", "jobs.fast")

    plain, with_default = Recording(), Recording()
    topology.declare(plain, settings)
    topology.declare(with_default, settings, ["default"])
    assert plain.calls == with_default.calls
    assert [args for method, args, _ in plain.calls if method == "queue_declare"] == [
        (settings.dead_letter_queue,),
        ("jobs",),
    ]


def test_every_named_queue_is_a_quorum_queue_dead_lettering_as_the_default_one(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, queue="jobs", exchange="jobs", delivery_limit=7)
    channel = Recording()
    topology.declare(channel, settings, ["slow", "default", "fast", "slow"])

    declared = {
        args[0]: kwargs["arguments"] for method, args, kwargs in channel.calls if method == "queue_declare"
    }
    bound = {
        args[0]: (args[1], kwargs["routing_key"])
        for method, args, kwargs in channel.calls
        if method == "queue_bind"
    }
    assert list(declared) == [settings.dead_letter_queue, "jobs", "jobs.fast", "jobs.slow"]
    assert (
        declared["jobs.fast"]
        == declared["jobs.slow"]
        == declared["jobs"]
        == {
            "x-queue-type": "quorum",
            "x-delivery-limit": 7,
            "x-dead-letter-exchange": settings.dead_letter_exchange,
            "x-dead-letter-routing-key": "jobs",
        }
    )
    assert bound["jobs.fast"] == ("jobs", "jobs.fast")
    assert bound["jobs.slow"] == ("jobs", "jobs.slow")
    assert bound[settings.dead_letter_queue] == (settings.dead_letter_exchange, "jobs")

    deleted = Recording()
    topology.delete(deleted, settings, ["fast", "slow"])
    assert [args[0] for method, args, _ in deleted.calls if method == "queue_delete"] == [
        "jobs.fast",
        "jobs.slow",
        "jobs",
        settings.dead_letter_queue,
    ]


def test_a_named_queue_whose_broker_queue_would_be_the_dead_letter_queue_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, queue="jobs", dead_letter_queue="jobs.dead")
    assert (
        topology.clash(settings, "dead")
        == "queue 'dead' would be the dead-letter queue 'jobs.dead': rename it"
    )
    assert topology.clash(settings, "fast") is None
    assert topology.clash(settings, "default") is None
