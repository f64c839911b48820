"""A FAKE of the cloud inventory APIs burst's leak scan speaks (named as such: nothing of GCP or
Azure can run here). A real HTTP server on loopback that answers with the documented request
and response shapes, so burst's own HTTP client, paging, token handling and error paths run
for real against it:

* GCP Cloud Asset ``GET /v1/{scope}:searchAllResources`` (``query``, ``pageSize``,
  ``pageToken``; answer ``{"results": [{"name", "assetType", "location", "labels"}],
  "nextPageToken"}``):
  https://cloud.google.com/asset-inventory/docs/reference/rest/v1/TopLevel/searchAllResources
  and the GCE metadata server's token (``Metadata-Flavor: Google``;
  ``{"access_token", "expires_in", "token_type"}``); for workload identity federation, STS
  ``POST /v1/token`` (RFC 8693 form; ``{"access_token", "issued_token_type", "token_type",
  "expires_in"}``, https://cloud.google.com/iam/docs/reference/sts/rest/v1/TopLevel/token)
  and IAM Credentials ``POST /v1/projects/-/serviceAccounts/{sa}:generateAccessToken``
  (``{"scope": [...]}``; ``{"accessToken", "expireTime"}``,
  https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken).
* Azure Resource Graph ``POST /providers/Microsoft.ResourceGraph/resources`` (body
  ``{"subscriptions", "query", "options": {"$top", "$skipToken", "resultFormat"}}``; answer
  ``{"totalRecords", "count", "resultTruncated", "$skipToken", "data", "facets"}``):
  https://learn.microsoft.com/en-us/rest/api/azureresourcegraph/resourcegraph/resources/resources
  and the Microsoft Entra token endpoint (client credentials with a client assertion;
  ``{"token_type", "expires_in", "access_token"}``).

Errors are the APIs' documented error documents (Google ``{"error": {"code", "message",
"status"}}``, Azure ``{"error": {"code", "message"}}``). ``mode`` switches the behaviour:
``ok``, ``401``, ``403``, ``500``, ``slow`` (answers after ``delay`` seconds), ``garbage``
(not JSON), ``endless`` (every page has a next page).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "fake-access-token"


@dataclass
class FakeCloudApis:
    """Resources the fake holds (GCP search results, Azure rows), what it was asked, its mode."""

    gcp_results: list[dict[str, Any]] = field(default_factory=list)
    azure_rows: list[dict[str, Any]] = field(default_factory=list)
    page_size: int = 2  # the fake's own page size: small, so a scan must page
    mode: str = "ok"
    delay: float = 2.0
    assertion: str = "projected-sa-token"
    requests: list[dict[str, Any]] = field(default_factory=list)
    base: str = ""  # http://127.0.0.1:<port> once started

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, doc: Any, raw: bytes | None = None) -> None:
                body = raw if raw is not None else json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # the client may have given up (its timeout): nothing to answer then
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def _record(self, body: bytes) -> urllib.parse.SplitResult:
                url = urllib.parse.urlsplit(self.path)
                fake.requests.append(
                    {
                        "method": self.command,
                        "path": url.path,
                        "query": dict(urllib.parse.parse_qsl(url.query)),
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body.decode(),
                    }
                )
                return url

            def _fault(self, google: bool) -> bool:
                """Answer as the mode says; True when it answered."""
                if fake.mode == "slow":
                    time.sleep(fake.delay)
                if fake.mode in ("401", "403", "500"):
                    code = int(fake.mode)
                    status = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 500: "INTERNAL"}
                    if google:
                        err = {"code": code, "message": "fake refusal", "status": status[code]}
                    else:
                        azure = {401: "InvalidAuthenticationToken", 403: "AuthorizationFailed"}
                        err = {"code": azure.get(code, "InternalServerError"), "message": "fake"}
                    self._send(code, {"error": err})
                    return True
                if fake.mode == "garbage":
                    self._send(200, None, b"<html>captive portal</html>")
                    return True
                return False

            def _authorised(self, google: bool) -> bool:
                if self.headers.get("Authorization") == f"Bearer {TOKEN}":
                    return True
                err = (
                    {"code": 401, "message": "no token", "status": "UNAUTHENTICATED"}
                    if google
                    else {"code": "AuthenticationFailed", "message": "no token"}
                )
                self._send(401, {"error": err})
                return False

            def do_GET(self) -> None:
                url = self._record(b"")
                if url.path.endswith("/service-accounts/default/token"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        self._send(403, None, b"Missing Metadata-Flavor:Google header.")
                        return
                    self._send(
                        200, {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
                    )
                    return
                if url.path.endswith(":searchAllResources"):
                    if self._fault(True) or not self._authorised(True):
                        return
                    q = dict(urllib.parse.parse_qsl(url.query))
                    start = int(q.get("pageToken") or 0)
                    page = fake.gcp_results[start : start + fake.page_size]
                    doc: dict[str, Any] = {"results": page}
                    nxt = start + fake.page_size
                    if nxt < len(fake.gcp_results) or fake.mode == "endless":
                        doc["nextPageToken"] = str(nxt)
                    self._send(200, doc)
                    return
                self._send(404, {"error": {"code": 404, "message": "not found"}})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = self._record(body)
                if url.path == "/v1/token":  # Google STS token exchange
                    form = dict(urllib.parse.parse_qsl(body.decode()))
                    grant = "urn:ietf:params:oauth:grant-type:token-exchange"
                    if (
                        form.get("grant_type") != grant
                        or form.get("subject_token") != fake.assertion
                    ):
                        self._send(
                            400,
                            {"error": "invalid_grant", "error_description": "bad subject token"},
                        )
                        return
                    self._send(
                        200,
                        {
                            "access_token": "federated-token",
                            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                            "token_type": "Bearer",
                            "expires_in": 3600,
                        },
                    )
                    return
                if url.path.endswith(":generateAccessToken"):
                    if self.headers.get("Authorization") != "Bearer federated-token":
                        self._send(
                            401,
                            {"error": {"code": 401, "message": "no", "status": "UNAUTHENTICATED"}},
                        )
                        return
                    self._send(200, {"accessToken": TOKEN, "expireTime": "2030-01-01T00:00:00Z"})
                    return
                if url.path.endswith("/oauth2/v2.0/token"):
                    form = dict(urllib.parse.parse_qsl(body.decode()))
                    if form.get("client_assertion") != fake.assertion:
                        self._send(
                            401,
                            {"error": "invalid_client", "error_description": "bad assertion"},
                        )
                        return
                    self._send(
                        200, {"token_type": "Bearer", "expires_in": 3599, "access_token": TOKEN}
                    )
                    return
                if url.path == "/providers/Microsoft.ResourceGraph/resources":
                    if self._fault(False) or not self._authorised(False):
                        return
                    req = json.loads(body)
                    start = int(req.get("options", {}).get("$skipToken") or 0)
                    page = fake.azure_rows[start : start + fake.page_size]
                    nxt = start + fake.page_size
                    more = nxt < len(fake.azure_rows) or fake.mode == "endless"
                    doc = {
                        "totalRecords": len(fake.azure_rows),
                        "count": len(page),
                        "resultTruncated": "false",
                        "data": page,
                        "facets": [],
                    }
                    if more:
                        doc["$skipToken"] = str(nxt)
                    self._send(200, doc)
                    return
                self._send(404, {"error": {"code": "NotFound", "message": "not found"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.base

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
