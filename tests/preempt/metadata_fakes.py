"""Fake cloud metadata services on a real local HTTP server (pytest-httpserver).

They are mocks of AWS IMDSv2, the GCP metadata server and Azure Scheduled Events, since none
of those can run here: each answers what its documentation says the real one answers.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import secrets
import threading
from dataclasses import dataclass, field

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response


def iso_in(seconds: float) -> str:
    t = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeIMDS:
    """AWS IMDSv2: PUT /latest/api/token, then GETs with X-aws-ec2-metadata-token."""

    server: HTTPServer
    action: dict[str, str] | None = None
    rebalance: dict[str, str] | None = None
    tokens: set[str] = field(default_factory=set)
    unauthorized: int = 0

    def __post_init__(self) -> None:
        s = self.server
        s.expect_request("/latest/api/token", method="PUT").respond_with_handler(self._token)
        s.expect_request(
            "/latest/meta-data/spot/instance-action", method="GET"
        ).respond_with_handler(self._action)
        s.expect_request(
            "/latest/meta-data/events/recommendations/rebalance", method="GET"
        ).respond_with_handler(self._rebalance)

    @property
    def url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def _token(self, req: Request) -> Response:
        if not req.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return Response("missing ttl", status=400)
        tok = secrets.token_hex(8)
        self.tokens.add(tok)
        return Response(tok, content_type="text/plain")

    def _authorized(self, req: Request) -> bool:
        ok = req.headers.get("X-aws-ec2-metadata-token") in self.tokens
        if not ok:
            self.unauthorized += 1
        return ok

    def _action(self, req: Request) -> Response:
        if not self._authorized(req):
            return Response("", status=401)
        if self.action is None:
            return Response("not found", status=404)
        return Response(json.dumps(self.action), content_type="text/plain")

    def _rebalance(self, req: Request) -> Response:
        if not self._authorized(req):
            return Response("", status=401)
        if self.rebalance is None:
            return Response("not found", status=404)
        return Response(json.dumps(self.rebalance), content_type="text/plain")

    def announce_stop(self, in_seconds: float, action: str = "terminate") -> str:
        when = iso_in(in_seconds)
        self.action = {"action": action, "time": when}
        return when


@dataclass
class FakeGCP:
    """GCP metadata: instance/preempted, with ``wait_for_change=true`` answered when the value
    changes (or at ``timeout_sec``), as the real server does."""

    server: HTTPServer
    preempted: bool = False
    changed: threading.Event = field(default_factory=threading.Event)
    requests: int = 0

    def __post_init__(self) -> None:
        self.server.expect_request(
            "/computeMetadata/v1/instance/preempted", method="GET"
        ).respond_with_handler(self._preempted)

    @property
    def url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def preempt(self) -> None:
        self.preempted = True
        self.changed.set()

    def _preempted(self, req: Request) -> Response:
        self.requests += 1
        if req.headers.get("Metadata-Flavor") != "Google":
            return Response("Missing Metadata-Flavor:Google header.", status=403)
        if req.args.get("wait_for_change") == "true" and not self.preempted:
            self.changed.wait(float(req.args.get("timeout_sec", "60")))
        return Response(
            "TRUE" if self.preempted else "FALSE",
            headers={"Metadata-Flavor": "Google"},
            content_type="application/text",
        )


@dataclass
class FakeAzure:
    server: HTTPServer
    vm_name: str = "burst-node-0"
    events: list[dict[str, object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        s = self.server
        s.expect_request("/metadata/scheduledevents", method="GET").respond_with_handler(
            self._events
        )
        s.expect_request("/metadata/instance/compute/name", method="GET").respond_with_handler(
            self._name
        )

    @property
    def url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def _name(self, req: Request) -> Response:
        if req.headers.get("Metadata") != "true":
            return Response("", status=400)
        return Response(self.vm_name, content_type="text/plain")

    def _events(self, req: Request) -> Response:
        if req.headers.get("Metadata") != "true" or not req.args.get("api-version"):
            return Response("", status=400)
        return Response(
            json.dumps({"DocumentIncarnation": len(self.events), "Events": self.events}),
            content_type="application/json",
        )

    def preempt(self, in_seconds: float, resources: list[str] | None = None) -> None:
        when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=in_seconds)
        self.events.append(
            {
                "EventId": secrets.token_hex(4),
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": [self.vm_name] if resources is None else resources,
                "EventStatus": "Scheduled",
                "NotBefore": email.utils.format_datetime(when, True),
                "Description": "Spot eviction",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            }
        )
