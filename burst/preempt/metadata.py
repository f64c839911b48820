"""Cloud metadata watchers: AWS spot (IMDSv2), GCP preemption, Azure Scheduled Events.

Each watcher is a daemon thread that polls its metadata service every ``poll_s`` seconds
(``BURST_PREEMPT_POLL_S``, 5 by default) and posts a ``Notice`` with the deadline it learned.
Base URLs come from environment variables so a test can point them at a local HTTP server:

    BURST_AWS_IMDS_URL        default http://169.254.169.254
    BURST_GCP_METADATA_URL    default http://metadata.google.internal
    BURST_AZURE_METADATA_URL  default http://169.254.169.254

A metadata service that does not answer is logged once and polled again; it never stops
training. Proxies from the environment are ignored (metadata is link-local).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import requests

from burst.preempt.notice import Notice, NoticeBoard

log = logging.getLogger(__name__)

POLL_ENV = "BURST_PREEMPT_POLL_S"
DEFAULT_POLL_S = 5.0
TIMEOUT_S = 2.0
GCP_NOTICE_S = 30.0  # GCP preemption: ACPI G2 soft-off, 30 s before the stop
AZURE_NOTICE_S = 30.0  # Azure Spot eviction: at least 30 s (Scheduled Events Preempt)


def poll_seconds() -> float:
    from burst.settings import current

    return current().preempt_poll_s


def _iso_to_epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class MetadataWatcher(threading.Thread, ABC):
    """Poll ``check()`` until it returns a stop notice or ``stop()`` is called."""

    name_env = ""
    default_url = ""
    source = ""

    def __init__(
        self, board: NoticeBoard, base_url: str | None = None, poll_s: float | None = None
    ) -> None:
        super().__init__(name=f"burst-watch-{self.source}", daemon=True)
        self.board = board
        from burst.settings import current

        configured = current().raw(self.name_env) if self.name_env else None
        self.base_url = (base_url or configured or self.default_url).rstrip("/")
        self.poll_s = poll_seconds() if poll_s is None else poll_s
        self.session = requests.Session()
        self.session.trust_env = False
        self._halt = threading.Event()
        self._failing = False
        self.polls = 0

    @abstractmethod
    def check(self) -> list[Notice]:
        """One poll: the notices the metadata service announces now."""

    def run(self) -> None:
        while not self._halt.is_set():
            started = time.monotonic()
            try:
                notices = self.check()
                self.polls += 1
                if self._failing:
                    log.info("%s metadata answers again", self.source)
                    self._failing = False
            except (requests.RequestException, ValueError, KeyError) as exc:
                if not self._failing:
                    log.warning(
                        "%s metadata at %s does not answer (%s); polling on",
                        self.source,
                        self.base_url,
                        exc.__class__.__name__,
                    )
                self._failing = True
                notices = []
            stop = False
            for n in notices:
                log.warning(
                    "preemption notice from %s: %s, deadline in %s s",
                    n.source,
                    n.detail,
                    "n/a" if n.deadline is None else f"{n.seconds_left():.1f}",
                )
                self.board.post(n)
                stop = stop or not n.advisory
            if stop:
                return
            # a hanging GET (GCP wait_for_change) already waited: poll again at once
            self._halt.wait(max(0.0, self.poll_s - (time.monotonic() - started)))

    def stop(self) -> None:
        self._halt.set()

    def _get(self, path: str, headers: dict[str, str]) -> requests.Response:
        return self.session.get(self.base_url + path, headers=headers, timeout=TIMEOUT_S)


class AWSSpotWatcher(MetadataWatcher):
    """IMDSv2: PUT a session token, then read spot/instance-action and the rebalance advice."""

    name_env = "BURST_AWS_IMDS_URL"
    default_url = "http://169.254.169.254"
    source = "aws"
    token_ttl_s = 21600

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._token: str | None = None
        self._token_expires = 0.0
        self._rebalance_seen = False

    def _headers(self) -> dict[str, str]:
        if self._token is None or time.monotonic() > self._token_expires:
            r = self.session.put(
                self.base_url + "/latest/api/token",
                timeout=TIMEOUT_S,
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)},
            )
            r.raise_for_status()
            self._token = r.text.strip()
            self._token_expires = time.monotonic() + self.token_ttl_s - 60
        return {"X-aws-ec2-metadata-token": self._token}

    def check(self) -> list[Notice]:
        headers = self._headers()
        out: list[Notice] = []
        r = self._get("/latest/meta-data/spot/instance-action", headers)
        if r.status_code == 401:
            self._token = None  # expired token: fetch a new one next poll
        elif r.status_code == 200:
            doc = json.loads(r.text)
            action = str(doc["action"])
            out.append(
                Notice(
                    f"aws-spot-{action}",
                    time.time(),
                    _iso_to_epoch(doc["time"]),
                    detail=f"spot instance-action {action} at {doc['time']}",
                )
            )
        elif r.status_code != 404:
            r.raise_for_status()
        if not self._rebalance_seen:
            r = self._get("/latest/meta-data/events/recommendations/rebalance", headers)
            if r.status_code == 200:
                doc = json.loads(r.text)
                self._rebalance_seen = True
                out.append(
                    Notice(
                        "aws-rebalance",
                        time.time(),
                        None,
                        advisory=True,
                        detail=f"rebalance recommendation at {doc.get('noticeTime')}",
                    )
                )
        return out


class GCPPreemptionWatcher(MetadataWatcher):
    """instance/preempted turns TRUE about 30 s before the VM stops (watched by hanging GET)."""

    name_env = "BURST_GCP_METADATA_URL"
    default_url = "http://metadata.google.internal"
    source = "gcp"

    def check(self) -> list[Notice]:
        # A hanging GET: the server answers as soon as the value changes (or after the
        # timeout with the current value), so the notice is seen at once, not up to a poll late.
        wait_s = max(1, int(self.poll_s))
        r = self.session.get(
            f"{self.base_url}/computeMetadata/v1/instance/preempted"
            f"?wait_for_change=true&timeout_sec={wait_s}",
            headers={"Metadata-Flavor": "Google"},
            timeout=wait_s + TIMEOUT_S,
        )
        r.raise_for_status()
        if r.headers.get("Metadata-Flavor") != "Google":
            raise ValueError("answer without the Metadata-Flavor: Google header")
        if r.text.strip().upper() != "TRUE":
            return []
        now = time.time()
        return [
            Notice(
                "gcp-preempted",
                now,
                now + GCP_NOTICE_S,
                detail=f"instance/preempted TRUE (stop in at most {GCP_NOTICE_S:g}s)",
            )
        ]


class AzureScheduledEventsWatcher(MetadataWatcher):
    """Scheduled Events: an event of type Preempt for this VM, deadline its NotBefore."""

    name_env = "BURST_AZURE_METADATA_URL"
    default_url = "http://169.254.169.254"
    source = "azure"
    api = "api-version=2020-07-01"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._vm_name: str | None = None
        self._vm_name_tried = False

    def _vm(self) -> str | None:
        if not self._vm_name_tried:
            self._vm_name_tried = True
            r = self._get(
                "/metadata/instance/compute/name?api-version=2021-02-01&format=text",
                {"Metadata": "true"},
            )
            if r.status_code == 200 and r.text.strip():
                self._vm_name = r.text.strip()
        return self._vm_name

    def check(self) -> list[Notice]:
        vm = self._vm()
        r = self._get(f"/metadata/scheduledevents?{self.api}", {"Metadata": "true"})
        r.raise_for_status()
        doc = json.loads(r.text)
        for ev in doc.get("Events", []):
            if ev.get("EventType") != "Preempt":
                continue
            resources = ev.get("Resources") or []
            # Unknown VM name: fail closed and take the event as ours.
            if vm is not None and resources and vm not in resources:
                continue
            now = time.time()
            not_before = ev.get("NotBefore") or ""
            deadline = (
                email.utils.parsedate_to_datetime(not_before).timestamp()
                if not_before
                else now + AZURE_NOTICE_S
            )
            return [
                Notice(
                    "azure-preempt",
                    now,
                    deadline,
                    detail=f"scheduled event {ev.get('EventId')} Preempt, "
                    f"NotBefore {not_before or 'unset'}",
                )
            ]
        return []


WATCHERS: dict[str, type[MetadataWatcher]] = {
    "aws": AWSSpotWatcher,
    "gcp": GCPPreemptionWatcher,
    "azure": AzureScheduledEventsWatcher,
}
