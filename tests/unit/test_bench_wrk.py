"""The benchmark reads wrk's report: the figures it states, and a clear error for one it cannot read."""

from __future__ import annotations

import pytest

from outbox_bridge.bench import loadgen
from outbox_bridge.bench.loadgen import parse

REPORT = """Running 8s test @ http://127.0.0.1:18555/jobs
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    30.01ms   40.00ms   1.20s    90.00%
    Req/Sec   237.10     50.00   300.00     70.00%
  Latency Distribution
     50%  928.00us
     75%   30.00ms
     90%   40.00ms
     99%    1.20s
  3814 requests in 8.09s, 1.78MB read
  Socket errors: connect 0, read 3, write 0, timeout 5
  Non-2xx or 3xx responses: 14
Requests/sec:    471.49
Transfer/sec:    225.00KB
"""


def test_the_figures_of_a_report_with_rejections_and_socket_errors() -> None:
    figures = parse(REPORT)
    assert figures["requests"] == 3814
    assert (figures["accepted"], figures["non_2xx"], figures["socket_errors"]) == (3800, 14, 8)
    assert figures["accepted_per_second"] == round(3800 / 8.09, 1)
    assert figures["latency_ms"] == {"50": 0.928, "90": 40.0, "99": 1200.0}


def test_a_clean_report_has_no_rejections() -> None:
    clean = "\n".join(line for line in REPORT.splitlines() if "Non-2xx" not in line and "Socket" not in line)
    figures = parse(clean)
    assert (figures["accepted"], figures["non_2xx"], figures["socket_errors"]) == (3814, 0, 0)


def test_a_run_of_minutes_is_read_in_seconds() -> None:
    minutes = REPORT.replace("3814 requests in 8.09s", "241682 requests in 2.00m")  # as wrk writes it
    assert parse(minutes)["accepted_per_second"] == round((241682 - 14) / 120, 1)


def test_a_report_without_its_request_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="no match"):
        parse("wrk: connection refused\n")


def test_the_apis_cpu_is_its_process_and_each_of_its_workers() -> None:
    by_process = {"api": 0.01, "api-101": 0.2, "api-102": 0.3, "bench": 0.7, "worker-1": 0.4}
    assert loadgen.api_cpu_per_job(by_process) == 0.51
    assert loadgen.api_cpu_per_job({"api": 0.25, "relay": 0.1}) == 0.25
    assert loadgen.api_cpu_per_job({"relay": 0.1}) is None
