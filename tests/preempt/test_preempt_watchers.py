"""Metadata watchers against fake metadata services on a real local HTTP server (mocks of the
cloud services, which cannot run here), and the signal watcher with real signals."""

from __future__ import annotations

import os
import signal
import time

import pytest
from metadata_fakes import FakeAzure, FakeGCP, FakeIMDS
from pytest_httpserver import HTTPServer

from burst.errors import BadInputError
from burst.preempt.metadata import (
    AWSSpotWatcher,
    AzureScheduledEventsWatcher,
    GCPPreemptionWatcher,
)
from burst.preempt.notice import Notice, NoticeBoard
from burst.preempt.signals import install_signal_watcher
from burst.preempt.watch import start_watchers, watcher_names

POLL = 0.05


def _wait(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_aws_imdsv2_spot_action_gives_the_announced_deadline(httpserver: HTTPServer) -> None:
    imds = FakeIMDS(httpserver)
    board = NoticeBoard()
    w = AWSSpotWatcher(board, base_url=imds.url, poll_s=POLL)
    w.start()
    try:
        assert _wait(lambda: w.polls >= 3)
        assert board.stop_notice() is None  # 404: nothing announced yet
        when = imds.announce_stop(120)
        assert _wait(lambda: board.stop_notice() is not None)
    finally:
        w.stop()
    n = board.stop_notice()
    assert n is not None and n.source == "aws-spot-terminate"
    assert n.deadline is not None
    expected = time.mktime(time.strptime(when, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert n.deadline == pytest.approx(expected)
    assert imds.unauthorized == 0  # every GET carried the IMDSv2 session token


def test_aws_rebalance_is_advisory_and_does_not_stop(httpserver: HTTPServer) -> None:
    imds = FakeIMDS(httpserver)
    imds.rebalance = {"noticeTime": "2026-11-21T23:00:00Z"}
    board = NoticeBoard()
    w = AWSSpotWatcher(board, base_url=imds.url, poll_s=POLL)
    w.start()
    try:
        assert _wait(lambda: w.polls >= 3)
    finally:
        w.stop()
    assert board.stop_notice() is None
    adv = board.take_advisories()
    assert [a.source for a in adv] == ["aws-rebalance"] and adv[0].advisory
    assert board.take_advisories() == []


def test_gcp_preempted_is_seen_at_once_through_the_hanging_get(httpserver: HTTPServer) -> None:
    gcp = FakeGCP(httpserver)
    board = NoticeBoard()
    # a 30 s poll: only the hanging GET (wait_for_change) can see the change within 10 s
    w = GCPPreemptionWatcher(board, base_url=gcp.url, poll_s=30)
    w.start()
    try:
        assert _wait(lambda: gcp.requests >= 1)
        assert board.stop_notice() is None
        gcp.preempt()
        assert _wait(lambda: board.stop_notice() is not None, 10)
    finally:
        w.stop()
    n = board.stop_notice()
    assert n is not None and n.source == "gcp-preempted" and n.deadline is not None
    assert n.deadline - n.received_at == pytest.approx(30.0)
    assert gcp.requests == 1


def test_azure_preempt_event_for_this_vm_only(httpserver: HTTPServer) -> None:
    az = FakeAzure(httpserver)
    board = NoticeBoard()
    w = AzureScheduledEventsWatcher(board, base_url=az.url, poll_s=POLL)
    az.preempt(30, resources=["someone-else"])  # another VM's eviction: not ours
    w.start()
    try:
        assert _wait(lambda: w.polls >= 3)
        assert board.stop_notice() is None
        az.preempt(30)
        assert _wait(lambda: board.stop_notice() is not None)
    finally:
        w.stop()
    n = board.stop_notice()
    assert n is not None and n.source == "azure-preempt" and n.deadline is not None
    assert 25 < n.deadline - time.time() <= 31  # NotBefore has second resolution


def test_unreachable_metadata_never_posts_and_keeps_polling() -> None:
    board = NoticeBoard()
    w = AWSSpotWatcher(board, base_url="http://127.0.0.1:9", poll_s=POLL)  # discard port
    w.start()
    try:
        time.sleep(0.5)
        assert w.is_alive()
    finally:
        w.stop()
    assert board.stop_notice() is None and w.polls == 0


def test_real_sigterm_posts_a_notice_with_the_grace_deadline() -> None:
    board = NoticeBoard()
    restore = install_signal_watcher(board, grace_s=12.0)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert _wait(lambda: board.stop_notice() is not None, 2)
    finally:
        restore()
    n = board.stop_notice()
    assert n is not None and n.source == "sigterm" and n.deadline is not None
    assert n.deadline - n.received_at == pytest.approx(12.0)


def test_a_notice_the_process_sends_itself_has_its_own_window_once() -> None:
    """burst.faults' ``STEP:notice=SECONDS``: the demo notice's deadline is its own window;
    the next notice has the grace period again."""
    from burst.preempt.signals import expect_own_notice

    windows = []
    for own in (120.0, None):
        board = NoticeBoard()
        restore = install_signal_watcher(board, grace_s=12.0)
        try:
            if own is not None:
                expect_own_notice(own)
            os.kill(os.getpid(), signal.SIGTERM)
            assert _wait(lambda b=board: b.stop_notice() is not None, 2)
        finally:
            restore()
        n = board.stop_notice()
        assert n is not None and n.deadline is not None
        windows.append(round(n.deadline - n.received_at, 3))
    assert windows == [120.0, 12.0]


def test_board_keeps_the_earliest_deadline() -> None:
    board = NoticeBoard()
    board.post(Notice("aws-spot-terminate", 0.0, 100.0))
    board.post(Notice("sigterm", 1.0, 31.0))
    board.post(Notice("gcp-preempted", 2.0, 60.0))
    n = board.stop_notice()
    assert n is not None and n.source == "sigterm"


def test_watcher_names_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURST_PREEMPT_WATCHERS", "aws, gcp")
    assert watcher_names() == ["aws", "gcp"]
    assert watcher_names("none") == []
    with pytest.raises(BadInputError, match="unknown watcher 'oracle'"):
        watcher_names("aws,oracle")


def test_start_watchers_rejects_a_bad_poll_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURST_PREEMPT_POLL_S", "soon")
    with pytest.raises(BadInputError, match="BURST_PREEMPT_POLL_S"):
        start_watchers(names=["aws"]).stop()
