"""One line for a failed call to a remote endpoint (AWS APIs, the Argo server).

A remote failure names the endpoint and the environment variable (or option) it came from,
and is exit 4 (``InfraError``: unreachable, refused credentials, a server error) or exit 2
(``BadInputError``: a malformed URL, a setting that cannot work). Never "unexpected error".
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from burst.errors import BadInputError, BurstError, InfraError
from burst.inputs import clip, short


def check_url(value: str, var: str, *, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """``value`` if it is a usable URL of one of ``schemes``; BadInputError naming ``var``."""
    text = value.strip()
    problem = None
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        parts, port, problem = None, None, str(exc)
    if problem is None and parts is not None:
        if parts.scheme not in schemes:
            problem = f"the scheme must be {' or '.join(schemes)}"
        elif not parts.hostname or any(c.isspace() for c in text):
            problem = "no host name"
        elif port is not None and not 0 < port < 65536:
            problem = "bad port"
    if problem:
        raise BadInputError(f"{var}={short(text)} is not a valid URL ({problem})")
    return text


REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")


def check_region(region: str, source: str) -> str:
    """An AWS region name (``ap-southeast-1``); BadInputError naming where it came from."""
    if not REGION_RE.match(region):
        raise BadInputError(f"{source}: {short(region)} is not an AWS region name")
    return region


def check_aws_endpoint() -> None:
    """AWS_ENDPOINT_URL, when set, must be a URL (exit 2 before any call)."""
    custom = os.environ.get("AWS_ENDPOINT_URL")
    if custom is not None and custom.strip():
        check_url(custom, "AWS_ENDPOINT_URL")


def aws_endpoint(region: str | None) -> tuple[str, str]:
    """(endpoint, where it came from) of AWS calls in ``region``, for messages."""
    custom = os.environ.get("AWS_ENDPOINT_URL")
    if custom:
        return custom, "AWS_ENDPOINT_URL"
    return f"AWS in {region or '(no region)'}", "the region's default endpoint"


@contextlib.contextmanager
def aws_errors(what: str, region: str | None, region_from: str) -> Iterator[None]:
    """Turn botocore's failures inside the block into one line with the right exit code."""
    try:
        yield
    except BurstError:
        raise
    except Exception as exc:
        raise aws_error(exc, what, region, region_from) from None


def aws_error(exc: Exception, what: str, region: str | None, region_from: str) -> BurstError:
    import botocore.exceptions as be

    endpoint, source = aws_endpoint(region)
    at = f"{endpoint} ({source}; region from {region_from})"
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return InfraError(
            f"{what}: no AWS credentials for {at}: none in the environment "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE) "
            "nor from an instance or pod role"
        )
    if isinstance(exc, be.EndpointConnectionError | be.ConnectTimeoutError | be.ReadTimeoutError):
        return InfraError(f"{what}: cannot reach {at}: {type(exc).__name__}")
    if isinstance(exc, be.ClientError):
        err = exc.response.get("Error", {}) if hasattr(exc, "response") else {}
        code = err.get("Code", "error")
        return InfraError(f"{what}: {at} answered {code}: {clip(str(err.get('Message', '')), 120)}")
    if isinstance(exc, be.InvalidRegionError | be.InvalidEndpointConfigurationError):
        return BadInputError(f"{what}: {clip(str(exc))} ({at})")
    if isinstance(exc, ValueError) and "endpoint" in str(exc).lower():
        return BadInputError(f"{what}: {clip(str(exc))} (from {source})")
    if isinstance(exc, be.BotoCoreError):
        return InfraError(f"{what}: {at}: {type(exc).__name__}: {clip(str(exc))}")
    raise exc


# A silent endpoint (it accepts connections and never answers) must not hold a scan for ever:
# botocore's defaults are 60 s to connect, 60 s per read and up to 5 attempts per call.
AWS_CONNECT_TIMEOUT_S = 10
AWS_READ_TIMEOUT_S = 20
AWS_MAX_ATTEMPTS = 3


def aws_client(service: str, region: str | None) -> Any:
    """A boto3 client with bounded connect/read timeouts and retries (credentials and
    AWS_ENDPOINT_URL from the environment, as boto3 reads them).

    A session of its own (``burst.aws_session``), not boto3's process-wide default one:
    that session keeps the credentials it resolved first, so a later call would act with
    credentials the environment no longer has (a long-lived process, or in-process test
    runs)."""
    from botocore.config import Config

    from burst.aws_session import session

    cfg = Config(
        connect_timeout=AWS_CONNECT_TIMEOUT_S,
        read_timeout=AWS_READ_TIMEOUT_S,
        retries={"max_attempts": AWS_MAX_ATTEMPTS, "mode": "standard"},
    )
    return session().client(service, region_name=region, config=cfg)
