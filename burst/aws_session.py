"""boto3 sessions that share botocore's parsed data.

Every boto3 session burst makes is a new one, so that it resolves the credentials the
environment has now (boto3's process-wide default session keeps the first ones it found). A
new botocore session parses its data again: the endpoints file and each service's model,
read-only JSON, about 0.1 CPU-second a client. The sessions made here share one data loader
(botocore caches what it parsed in the loader), so a process pays that once: a leak scan
makes a client per service and region, a test process many more. (Botocore's extra data
directories, ``AWS_DATA_PATH``, are read once, when the loader is made.)
"""

from __future__ import annotations

import functools
from typing import Any


def session(**kwargs: Any) -> Any:
    """``boto3.session.Session(**kwargs)`` on a fresh botocore session with the shared loader."""
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    core.register_component("data_loader", _shared_loader())
    return boto3.session.Session(botocore_session=core, **kwargs)


@functools.cache
def _shared_loader() -> Any:
    from botocore.loaders import create_loader

    return create_loader()
