"""A small OCI distribution API client (requests): manifests, blobs, referrers, tags.

HTTPS by default; plain HTTP only for loopback registries (``localhost``, ``127.0.0.1``,
``[::1]``) and hosts listed in ``BURST_INSECURE_REGISTRIES`` (comma-separated), as Docker does.
Anonymous bearer tokens (the ``WWW-Authenticate: Bearer`` challenge) are fetched when a
registry asks for them; burst never stores registry credentials.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import requests

from burst.supplychain.store import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    OCI_INDEX,
    Fetched,
    StoreUnavailable,
    sha256_digest,
)

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
#: manifests, configs and signature payloads are small; a registry sending more is refused
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
DOCKER_HUB_API = "registry-1.docker.io"
_CHALLENGE_RE = re.compile(r'(\w+)="([^"]*)"')


def registry_base_url(registry: str) -> str:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    from burst.settings import current

    insecure: set[str] = set(current().insecure_registries)
    scheme = "http" if host in LOOPBACK_HOSTS or registry in insecure else "https"
    if registry == "docker.io":
        registry = DOCKER_HUB_API
    return f"{scheme}://{registry}"


class RegistryStore:
    """One repository of one registry, spoken to over the OCI distribution API."""

    kind = "registry"

    def __init__(
        self,
        registry: str,
        path: str,
        *,
        timeout: float = 10.0,
        session: requests.Session | None = None,
    ) -> None:
        self.registry = registry
        self.path = path
        self.base = registry_base_url(registry)
        self.location = f"{self.base}/v2/{path}"
        self.timeout = timeout
        self.session = session or requests.Session()
        self._token: str | None = None

    # -- HTTP ---------------------------------------------------------------------------------

    def _request(self, method: str, url: str, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}) or {})
        for attempt in (1, 2):
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            try:
                resp = self.session.request(
                    method, url, headers=headers, timeout=self.timeout, allow_redirects=True, **kw
                )
            except requests.RequestException as exc:
                raise StoreUnavailable(
                    f"registry {self.registry} is unreachable ({exc.__class__.__name__}: "
                    f"{_short(exc)})"
                ) from None
            if resp.status_code == 401 and attempt == 1 and self._authenticate(resp):
                continue
            return resp
        return resp

    def _authenticate(self, resp: requests.Response) -> bool:
        """Fetch an anonymous bearer token when the registry issues a Bearer challenge."""
        challenge = resp.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(_CHALLENGE_RE.findall(challenge))
        realm = params.pop("realm", None)
        if not realm:
            return False
        try:
            tok = self.session.get(realm, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise StoreUnavailable(f"token service {realm} is unreachable: {_short(exc)}") from None
        if tok.status_code != 200:
            return False
        body = tok.json()
        self._token = body.get("token") or body.get("access_token")
        return bool(self._token)

    def _fail(self, resp: requests.Response, what: str) -> StoreUnavailable:
        text = " ".join(resp.text.split())[:200]
        return StoreUnavailable(
            f"registry {self.registry}: {what} failed with HTTP {resp.status_code}: {text}"
        )

    # -- reads --------------------------------------------------------------------------------

    def get_manifest(self, reference: str) -> Fetched | None:
        resp = self._request(
            "GET",
            f"{self.location}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
            stream=True,
        )
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"GET manifest {reference}")
        data = self._read_limited(resp, f"manifest {reference}")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            media_type = _media_type_of(data) or media_type
        return Fetched(data, media_type, sha256_digest(data))

    def get_blob(self, digest: str) -> bytes | None:
        resp = self._request("GET", f"{self.location}/blobs/{digest}", stream=True)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(resp, f"GET blob {digest}")
        return self._read_limited(resp, f"blob {digest}")

    def _read_limited(self, resp: requests.Response, what: str) -> bytes:
        """The body, refusing more than MAX_DOCUMENT_BYTES (a hostile registry can't exhaust
        memory: burst reads only manifests, configs and signature payloads)."""
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in resp.iter_content(64 * 1024):
                total += len(chunk)
                if total > MAX_DOCUMENT_BYTES:
                    raise StoreUnavailable(
                        f"registry {self.registry}: {what} is larger than "
                        f"{MAX_DOCUMENT_BYTES} bytes; refusing to read it"
                    )
                chunks.append(chunk)
        except requests.RequestException as exc:
            raise StoreUnavailable(
                f"registry {self.registry}: reading {what} failed: {_short(exc)}"
            ) from None
        finally:
            resp.close()
        return b"".join(chunks)

    def referrers(self, digest: str) -> list[dict[str, Any]] | None:
        resp = self._request(
            "GET", f"{self.location}/referrers/{digest}", headers={"Accept": OCI_INDEX}
        )
        if resp.status_code in (404, 405, 400):
            return None  # no OCI 1.1 referrers API here: the tag schema is the fallback
        if resp.status_code != 200:
            raise self._fail(resp, f"GET referrers {digest}")
        try:
            index = resp.json()
        except ValueError:
            return None
        manifests = index.get("manifests") if isinstance(index, dict) else None
        return [m for m in manifests if isinstance(m, dict)] if isinstance(manifests, list) else []

    def tags(self) -> list[str]:
        resp = self._request("GET", f"{self.location}/tags/list")
        if resp.status_code == 404:
            return []
        if resp.status_code != 200:
            raise self._fail(resp, "GET tags")
        return list(resp.json().get("tags") or [])

    # -- writes -------------------------------------------------------------------------------

    def put_blob(self, data: bytes) -> str:
        digest = sha256_digest(data)
        head = self._request("HEAD", f"{self.location}/blobs/{digest}")
        if head.status_code == 200:
            return digest
        start = self._request("POST", f"{self.location}/blobs/uploads/")
        if start.status_code != 202 or "Location" not in start.headers:
            raise self._fail(start, "start blob upload")
        location = start.headers["Location"]
        if location.startswith("/"):
            location = self.base + location
        sep = "&" if "?" in location else "?"
        put = self._request(
            "PUT",
            f"{location}{sep}digest={digest}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if put.status_code != 201:
            raise self._fail(put, f"upload blob {digest}")
        return digest

    def put_manifest(self, data: bytes, media_type: str, tag: str | None) -> str:
        digest = sha256_digest(data)
        for reference in [digest] + ([tag] if tag else []):
            resp = self._request(
                "PUT",
                f"{self.location}/manifests/{reference}",
                data=data,
                headers={"Content-Type": media_type},
            )
            if resp.status_code != 201:
                raise self._fail(resp, f"PUT manifest {reference}")
        return digest


def _media_type_of(data: bytes) -> str | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    mt = doc.get("mediaType")
    if isinstance(mt, str):
        return mt
    return INDEX_TYPES[0] if "manifests" in doc else None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:160] + ("..." if len(text) > 160 else "")
