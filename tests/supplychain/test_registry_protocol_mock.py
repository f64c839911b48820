"""Protocol paths the real loopback registry cannot exercise, against a MOCK registry.

MOCK, named as such: Debian's docker-registry (distribution 2.8) has neither the OCI 1.1
referrers API nor token authentication in our config, so a small in-memory OCI registry on
pytest-httpserver stands in for those two paths only: a signature found through
``GET /v2/<name>/referrers/<digest>`` (cosign's ``--registry-referrers-mode=oci-1-1``), and the
anonymous ``WWW-Authenticate: Bearer`` token dance of public registries (ghcr.io, Docker Hub).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from burst.errors import PolicyRefusal
from burst.supplychain.registry import RegistryStore
from burst.supplychain.signature import (
    COSIGN_ARTIFACT_SIG,
    load_private_key,
    make_payload,
    sign_payload,
    signature_layer,
)
from burst.supplychain.store import OCI_INDEX, OCI_MANIFEST, sha256_digest
from burst.supplychain.verify import verify_image
from devtools.tinyimage import push_tiny_image

from .conftest import Keys
from .test_registry_verify import TRAINER_LABELS

PATH = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs|referrers)/(?P<ref>[^/]+)$")
UPLOAD = re.compile(r"^/v2/(?P<name>.+)/blobs/uploads/(?P<id>[^/]*)$")


@dataclass
class MockOciRegistry:
    """In-memory OCI 1.1 registry (MOCK): blobs, manifests, tags, referrers, optional auth."""

    token: str | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    token_requests: int = 0

    def handle(self, request: Request) -> Response:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            realm = request.host_url.rstrip("/") + "/token"
            return Response(
                status=401,
                headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="mock",scope="x"'},
            )
        if m := UPLOAD.match(request.path):
            if request.method == "POST":
                return Response(
                    status=202, headers={"Location": f"/v2/{m['name']}/blobs/uploads/u1"}
                )
            data = request.get_data()
            self.blobs[sha256_digest(data)] = data
            return Response(status=201)
        m = PATH.match(request.path)
        if not m:
            return Response(status=404)
        ref = m["ref"]
        if m["kind"] == "blobs":
            if ref not in self.blobs:
                return Response(status=404)
            return Response(b"" if request.method == "HEAD" else self.blobs[ref], status=200)
        if m["kind"] == "referrers":
            found = []
            for digest, (data, media_type) in self.manifests.items():
                doc = json.loads(data)
                if (doc.get("subject") or {}).get("digest") == ref:
                    found.append({"mediaType": media_type, "digest": digest, "size": len(data),
                                  "artifactType": doc.get("artifactType")})  # fmt: skip
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": found})
            return Response(body, status=200, content_type=OCI_INDEX)
        if request.method == "PUT":
            data = request.get_data()
            digest = sha256_digest(data)
            self.manifests[digest] = (data, request.headers["Content-Type"])
            if not ref.startswith("sha256:"):
                self.tags[ref] = digest
            return Response(status=201)
        digest = self.tags.get(ref, ref)
        if digest not in self.manifests:
            return Response(status=404)
        data, media_type = self.manifests[digest]
        return Response(data, status=200, content_type=media_type)

    def issue_token(self, request: Request) -> Response:
        self.token_requests += 1
        return Response(json.dumps({"token": self.token}), content_type="application/json")


@pytest.fixture
def mock_registry(httpserver: HTTPServer) -> tuple[MockOciRegistry, str]:
    mock = MockOciRegistry()
    httpserver.expect_request("/token").respond_with_handler(mock.issue_token)
    httpserver.expect_request(re.compile(r"^/v2/.*")).respond_with_handler(mock.handle)
    return mock, f"127.0.0.1:{httpserver.port}"


def sign_as_referrer(store: RegistryStore, repository: str, digest: str, key: Path) -> None:
    """What cosign --registry-referrers-mode=oci-1-1 stores: an artifact manifest whose
    subject is the image, no .sig tag."""
    payload = make_payload(repository, digest)
    store.put_blob(payload)
    empty = b"{}"
    store.put_blob(empty)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": COSIGN_ARTIFACT_SIG,
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json",
            "size": 2,
            "digest": sha256_digest(empty),
        },
        "layers": [signature_layer(payload, sign_payload(load_private_key(key), payload))],
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": 0},
    }
    store.put_manifest(json.dumps(manifest).encode(), OCI_MANIFEST, None)


def test_signature_found_through_referrers_api(
    mock_registry: tuple[MockOciRegistry, str], keys: Keys
) -> None:
    mock, host = mock_registry
    store = RegistryStore(host, "team/ref")
    digest = push_tiny_image(store, {"a": b"referrers"}, TRAINER_LABELS)
    ref = f"{host}/team/ref@{digest}"
    with pytest.raises(PolicyRefusal, match=r"referrers API: 0 cosign signature\(s\)"):
        verify_image(ref, "team", keys.trust)
    sign_as_referrer(store, f"{host}/team/ref", digest, keys.private("team"))
    assert not any(t.endswith(".sig") for t in mock.tags)
    verified = verify_image(ref, "team", keys.trust)
    assert verified.signature_source == "referrers"


def test_referrer_signed_by_untrusted_key_is_refused(
    mock_registry: tuple[MockOciRegistry, str], keys: Keys
) -> None:
    _, host = mock_registry
    store = RegistryStore(host, "team/ref2")
    digest = push_tiny_image(store, {"a": b"rogue"}, TRAINER_LABELS)
    sign_as_referrer(store, f"{host}/team/ref2", digest, keys.private("rogue"))
    with pytest.raises(PolicyRefusal, match="does not verify with key 'team'"):
        verify_image(f"{host}/team/ref2@{digest}", "team", keys.trust)


def test_anonymous_bearer_token_is_fetched(
    mock_registry: tuple[MockOciRegistry, str], keys: Keys
) -> None:
    mock, host = mock_registry
    store = RegistryStore(host, "team/auth")
    digest = push_tiny_image(store, {"a": b"auth"}, TRAINER_LABELS)
    mock.token = "t0ken"
    fresh = RegistryStore(host, "team/auth")
    fetched = fresh.get_manifest(digest)
    assert fetched is not None and fetched.digest == digest
    assert mock.token_requests == 1


@pytest.mark.e2e
def test_registry_serving_other_bytes_for_a_digest_is_refused(
    mock_registry: tuple[MockOciRegistry, str], keys: Keys
) -> None:
    """A lying registry: the manifest it returns for digest D does not hash to D."""
    mock, host = mock_registry
    store = RegistryStore(host, "team/liar")
    digest = push_tiny_image(store, {"a": b"honest"}, TRAINER_LABELS)
    other = push_tiny_image(store, {"a": b"swapped"}, TRAINER_LABELS)
    mock.manifests[digest] = mock.manifests[other]
    with pytest.raises(PolicyRefusal, match=f"returned a manifest whose digest is {other}"):
        verify_image(f"{host}/team/liar@{digest}", "team", keys.trust)
