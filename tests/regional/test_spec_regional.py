"""training.strategy / training.regional_sync in the spec: defaults, and one line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import SpecError
from burst.spec import BurstJob, json_schema, parse_spec

REPO = Path(__file__).resolve().parents[2]
SHARDS = "  shards: {ap-southeast-1: 0.004, me-central-1: 0.006}\n"


def _text(training_extra: str, shards: str = SHARDS) -> str:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    text = text.replace("  region: ap-southeast-1\n", f"  region: ap-southeast-1\n{shards}")
    return text.replace("  learning_rate: 0.01\n", f"  learning_rate: 0.01\n{training_extra}")


def _problems(training_extra: str, shards: str = SHARDS) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(_text(training_extra, shards), "s.yaml")
    return info.value.problems


def test_default_strategy_is_single_region() -> None:
    job = parse_spec(_text(""), "s.yaml")
    assert job.training.strategy == "single-region"
    assert job.training.regional_sync is None


def test_regional_sync_defaults_come_from_the_shards() -> None:
    job = parse_spec(_text("  strategy: regional-sync\n  regional_sync: {local_steps: 5}\n"))
    rs = job.training.regional_sync
    assert rs is not None
    assert rs.regions == ["ap-southeast-1", "me-central-1"]
    assert rs.aggregation_region == "ap-southeast-1"
    assert rs.local_steps == 5
    # null: the measured table's for the run's regions and H (burst.regional.defaults)
    assert (rs.outer.optimizer, rs.outer.lr, rs.outer.momentum) == ("nesterov", None, None)
    assert rs.first_local_steps is None  # every round H steps
    assert (rs.compression.codec, rs.compression.block_size) == ("int8", 256)
    assert rs.compression.topk_fraction == 0.01
    assert (rs.sync_fraction, rs.round_deadline_s, rs.max_staleness) == (0.1, 600, 0)
    # the resolved spec is stable: dumping and loading again gives the same hash
    again = BurstJob.model_validate(job.model_dump(mode="json", by_alias=True))
    assert again.sha256() == job.sha256()


def test_explicit_regions_and_aggregator() -> None:
    extra = (
        "  strategy: regional-sync\n  regional_sync:\n    regions: [me-central-1, ap-southeast-1]\n"
        "    aggregation_region: ap-southeast-1\n    local_steps: null\n"
        "    compression: {codec: topk, topk_fraction: 0.05}\n"
    )
    rs = parse_spec(_text(extra)).training.regional_sync
    assert rs is not None
    assert rs.regions == ["me-central-1", "ap-southeast-1"]
    assert rs.aggregation_region == "ap-southeast-1"
    assert rs.local_steps is None
    assert rs.compression.codec == "topk"


@pytest.mark.parametrize(
    ("extra", "shards", "needle"),
    [
        ("  strategy: regional-sync\n", SHARDS, "needs training.regional_sync"),
        ("  regional_sync: {local_steps: 5}\n", SHARDS, "strategy is not regional-sync"),
        ("  strategy: regional-sync\n  regional_sync: {}\n", "", "needs data.shards"),
        (
            "  strategy: regional-sync\n  regional_sync: {regions: [ap-southeast-1, eu-west-1]}\n",
            SHARDS,
            "'eu-west-1', which is not a region of data.shards",
        ),
        (
            "  strategy: regional-sync\n  regional_sync: {regions: [ap-southeast-1]}\n",
            SHARDS,
            "at least two regions",
        ),
        (
            "  strategy: regional-sync\n"
            "  regional_sync: {regions: [ap-southeast-1, ap-southeast-1, me-central-1]}\n",
            SHARDS,
            "names a region twice",
        ),
        (
            "  strategy: regional-sync\n  regional_sync: {aggregation_region: eu-west-1}\n",
            SHARDS,
            "aggregation_region 'eu-west-1' is not one of",
        ),
        (
            "  strategy: regional-sync\n  regional_sync: {local_steps: 31}\n",
            SHARDS,
            "local_steps (31) is more than training.steps (30)",
        ),
        (
            "  strategy: regional-sync\n  engine: deepspeed\n  regional_sync: {}\n",
            SHARDS,
            "one torch process per region",
        ),
    ],
)
def test_regional_sync_mistakes_are_one_line_each(extra: str, shards: str, needle: str) -> None:
    problems = _problems(extra, shards)
    assert len(problems) == 1, problems
    assert problems[0].startswith("s.yaml:"), problems
    assert "training" in problems[0]
    assert needle in problems[0], problems


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("  strategy: multi-region\n", "training.strategy"),
        ("  strategy: regional-sync\n  regional_sync: {local_steps: 0}\n", "local_steps"),
        ("  strategy: regional-sync\n  regional_sync: {sync_fraction: 0}\n", "sync_fraction"),
        ("  strategy: regional-sync\n  regional_sync: {compression: {codec: fp4}}\n", "codec"),
        ("  strategy: regional-sync\n  regional_sync: {outer: {momentum: 1}}\n", "momentum"),
        ("  strategy: regional-sync\n  regional_sync: {round_deadline_s: -1}\n", "deadline"),
        ("  strategy: regional-sync\n  regional_sync: {first_local_steps: 0}\n", "first_local"),
        ("  strategy: regional-sync\n  regional_sync: {max_staleness: -1}\n", "max_staleness"),
        ("  strategy: regional-sync\n  regional_sync: {bogus: 1}\n", "unknown field"),
    ],
)
def test_field_level_mistakes_name_the_field(extra: str, field: str) -> None:
    problems = _problems(extra)
    assert len(problems) == 1, problems
    assert field in problems[0], problems


def test_schema_documents_the_strategy() -> None:
    s = json_schema()
    props = s["$defs"]["Training"]["properties"]
    assert set(props["strategy"]["enum"]) == {"single-region", "regional-sync"}
    assert "RegionalSync" in s["$defs"]
    assert set(s["$defs"]["RegionalSync"]["properties"]) == {
        "regions",
        "aggregation_region",
        "local_steps",
        "first_local_steps",
        "sync_fraction",
        "outer",
        "compression",
        "round_deadline_s",
        "max_staleness",
    }
