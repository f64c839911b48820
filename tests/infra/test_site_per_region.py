"""BURST_TF_SITE_VARS per region (docs/topology.md): a directory of <region>.tfvars files,
carried to the steps as one workflow parameter (a site map) and expanded again; each
placement applies its own region's file; a region without one fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.infra.workspace import expand_site_vars, site_file, site_map


def sites(tmp_path: Path) -> Path:
    d = tmp_path / "sites"
    d.mkdir()
    (d / "ap-southeast-1.tfvars").write_text('vpc_id = "vpc-sg"\n')
    (d / "me-central-1.tfvars.json").write_text('{"vpc_id": "vpc-uae"}\n')
    return d


def test_each_region_gets_its_own_file_and_a_missing_one_fails_closed(tmp_path: Path) -> None:
    d = sites(tmp_path)
    assert site_file(d, "ap-southeast-1") == d / "ap-southeast-1.tfvars"
    assert site_file(d, "me-central-1") == d / "me-central-1.tfvars.json"
    with pytest.raises(BadInputError, match="no site configuration for region 'il-central-1'"):
        site_file(d, "il-central-1")
    one = d / "ap-southeast-1.tfvars"
    assert site_file(one, "il-central-1") == one  # one file: every region (one-region plans)
    assert site_file(None, "x") is None


def test_the_site_map_parameter_expands_to_the_same_files(tmp_path: Path) -> None:
    d = sites(tmp_path)
    param = tmp_path / "site.tfvars"  # what the step's raw input artifact holds
    param.write_text(site_map(d))
    out = expand_site_vars(param, tmp_path / "work")
    assert out is not None and out.is_dir()
    for name in ("ap-southeast-1.tfvars", "me-central-1.tfvars.json"):
        assert (out / name).read_text() == (d / name).read_text()
    empty = tmp_path / "empty.tfvars"
    empty.write_text("")
    assert expand_site_vars(empty, tmp_path / "w2") is None  # no site configuration given
    plain = tmp_path / "plain.tfvars"
    plain.write_text('vpc_id = "x"\n')
    assert expand_site_vars(plain, tmp_path / "w3") == plain


def test_a_site_map_with_a_bad_region_name_is_refused(tmp_path: Path) -> None:
    param = tmp_path / "site.tfvars"
    param.write_text('{"kind": "burst/site-vars-by-region", "regions": {"../x": "a = 1"}}')
    with pytest.raises(BadInputError, match="not a region name"):
        expand_site_vars(param, tmp_path / "w")
