"""Typed documents: everything that flows between pipeline steps, and the run report.

Each step returns one model (``burst.stepio`` serialises it); each consumer parses what it
reads with the model, so a document of the wrong shape is one line naming the document, where
it came from and the field (``DocumentError``, exit 2). ``burst schema --document NAME``
prints a document's JSON Schema.

    name             model                 written by          read by
    decision-record  DecisionRecord        preflight           plan, provision
    plan             PlanDocument          plan                provision, train
    verified-image   VerifiedImage         verify-image        (the pipeline gate)
    provision        ProvisionDocument     provision           train, report
    train            TrainDocument         train               report
    train-attempt    TrainAttempt          train (per attempt) train, teardown
    teardown         TeardownDocument      teardown            report
    aggregate        AggregateDocument     aggregate           report (its regional section)
    report           RunReport             burst run           report, status, run view
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from burst.documents.base import Document, DocumentError, StepDocument, problems_of
from burst.documents.decision import Decision, DecisionRecord, Reason
from burst.documents.image import VerifiedImage
from burst.documents.plan import Candidate, Exclusion, PlanDocument
from burst.documents.provision import ProvisionAttempt, ProvisionDocument
from burst.documents.regional import AggregateDocument
from burst.documents.report import RunReport, StepRecord
from burst.documents.teardown import CheckpointSync, TeardownDocument
from burst.documents.train import ATTEMPTS_FILE, ATTEMPTS_PREFIX, TrainAttempt, TrainDocument

__all__ = [
    "ATTEMPTS_FILE",
    "ATTEMPTS_PREFIX",
    "DOCUMENTS",
    "INPUTS",
    "STEP_DOCUMENTS",
    "AggregateDocument",
    "Candidate",
    "CheckpointSync",
    "Decision",
    "DecisionRecord",
    "Document",
    "DocumentError",
    "Exclusion",
    "PlanDocument",
    "ProvisionAttempt",
    "ProvisionDocument",
    "Reason",
    "RunReport",
    "StepDocument",
    "StepRecord",
    "TeardownDocument",
    "TrainAttempt",
    "TrainDocument",
    "VerifiedImage",
    "document_name",
    "json_schema",
    "parse_document",
    "produce",
    "read_document",
]

M = TypeVar("M", bound=BaseModel)

#: Every document by name (``burst schema --document NAME``).
DOCUMENTS: dict[str, type[Document]] = {
    "decision-record": DecisionRecord,
    "plan": PlanDocument,
    "verified-image": VerifiedImage,
    "provision": ProvisionDocument,
    "train": TrainDocument,
    "train-attempt": TrainAttempt,
    "teardown": TeardownDocument,
    "aggregate": AggregateDocument,
    "report": RunReport,
}
#: The document each step writes.
STEP_DOCUMENTS: dict[str, type[StepDocument]] = {
    "preflight": DecisionRecord,
    "plan": PlanDocument,
    "verify-image": VerifiedImage,
    "provision": ProvisionDocument,
    "train": TrainDocument,
    "aggregate": AggregateDocument,
    "teardown": TeardownDocument,
}
#: The document a step input (``--input NAME=...``) carries.
INPUTS: dict[str, type[StepDocument]] = {
    "decision": DecisionRecord,
    "plan": PlanDocument,
    "infra": ProvisionDocument,
    "previous": ProvisionDocument,  # provision: the placement a requeue or restart follows
}
_ALIASES = {"preflight": "decision-record", "verify-image": "verified-image"}


def document_name(model: type[BaseModel]) -> str:
    return next((n for n, m in DOCUMENTS.items() if m is model), model.__name__)


def parse_document(model: type[M], data: Any, source: str | None = None) -> M:
    """Validate ``data`` (a parsed JSON object) as ``model``; ``DocumentError`` (exit 2, one
    line naming the document, ``source`` and the field) when it does not fit. A model
    instance passes through."""
    if isinstance(data, model):
        return data
    name = document_name(model)
    if not isinstance(data, dict):
        raise DocumentError(name, source, [f"must be a JSON object (got {type(data).__name__})"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(name, source, problems_of(exc)) from None


def produce(model: type[M], data: Any) -> M:
    """A producer's own document as its model. A mismatch is burst's bug, not bad input:
    ``BurstError`` (exit 1), one line naming the document and the field."""
    try:
        return parse_document(model, data)
    except DocumentError as exc:
        from burst.errors import BurstError

        raise BurstError(f"burst wrote a {exc.message} (a bug: please report it)") from None


def read_document(model: type[M], path: Path) -> M:
    """Read and validate a JSON document file (``DocumentError`` when unreadable too)."""
    from burst.errors import BadInputError
    from burst.inputs import parse_json, read_text

    name = document_name(model)
    try:  # bounded (burst.inputs): file type, size, strict JSON
        data = parse_json(read_text(path, what=f"{name} document"), str(path), what="document")
    except BadInputError as exc:
        raise DocumentError(name, str(path), [exc.message]) from None
    return parse_document(model, data, str(path))


def lookup(name: str) -> type[Document]:
    """The model of a document name (or the step that writes it)."""
    key = _ALIASES.get(name, name)
    if key not in DOCUMENTS:
        from burst.errors import BadInputError

        what = f"unknown document {name!r}" if name else "name a document"
        raise BadInputError(f"{what}; documents: {', '.join(DOCUMENTS)}", where="--document")
    return DOCUMENTS[key]


def json_schema(name: str) -> dict[str, Any]:
    model = lookup(name)
    key = document_name(model)
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://burst.dev/schema/{key}-v1.json"
    return schema
