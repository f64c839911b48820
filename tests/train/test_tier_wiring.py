"""How the memory tiers (training.checkpoint.memory_tiers) reach the ranks: which server each
rank writes to (ring over the nodes), where a gang pod finds its peers, how often the store,
the spec's refusals, and the gang template's sidecar, port and NetworkPolicy (built from the
code, not the compiled goldens). The run itself: tests/train/test_memory_tiers.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.errors import BadInputError
from burst.pipelines import burst_train, gang
from burst.pipelines.train_pod import PEER_LABEL, PEER_MEMORY, PEER_PORT, PEER_PORT_NAME
from burst.runner.argo import peer_parameters
from burst.settings import Settings, use
from burst.spec import BurstJob, load_spec
from burst.train.tiers import gang_addresses, rank_tiers, store_every

REPO = Path(__file__).resolve().parents[2]


def job(tmp_path: Path, tiers: str, extra: str = "") -> BurstJob:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    old = "    keep_weights: 3\n"
    assert old in text
    text = text.replace(old, f"{old}    memory_tiers: {tiers}\n{extra}")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec(path)


def test_each_rank_writes_to_its_node_then_the_next_node_in_a_ring() -> None:
    tiers = rank_tiers(["n0:1", "n1:1", "n2:1"], 6)
    assert tiers[0] == [("local", "n0:1"), ("peer", "n1:1")]
    assert tiers[3] == [("local", "n1:1"), ("peer", "n2:1")]
    assert tiers[5] == [("local", "n2:1"), ("peer", "n0:1")]  # the last node's: the first
    # one node: no other node to hold a copy, the local tier only
    assert rank_tiers(["n0:1"], 2) == [[("local", "n0:1")], [("local", "n0:1")]]
    with pytest.raises(BadInputError, match="do not spread evenly over 2"):
        rank_tiers(["n0:1", "n1:1"], 3)


def test_a_gang_pod_finds_the_sidecars_at_volcanos_hosts_in_rank_order() -> None:
    env = {
        "VC_MASTER_HOSTS": "run-train-x-master-0.run-train-x",
        "VC_WORKER_HOSTS": "run-train-x-worker-0.run-train-x,run-train-x-worker-1.run-train-x",
    }
    with use(Settings({"BURST_PEER_PORT": "7171"})):
        assert gang_addresses(env) == [
            "run-train-x-master-0.run-train-x:7171",
            "run-train-x-worker-0.run-train-x:7171",
            "run-train-x-worker-1.run-train-x:7171",
        ]
    with use(Settings({})):
        assert gang_addresses({"VC_MASTER_HOSTS": "m.j"}) == [f"m.j:{PEER_PORT}"]


def test_store_every_is_the_specs_or_one_without_a_peer(tmp_path: Path) -> None:
    fixed = job(tmp_path, "{enabled: true, store_every: 4}")
    assert store_every(fixed, None, None, 2) == 4
    auto = job(tmp_path, "{enabled: true}")
    assert store_every(auto, None, None, 1) == 1  # one node: the store takes every save
    assert store_every(auto, None, None, 2) == 1  # no plan: every save


@pytest.mark.parametrize(
    ("tiers", "extra", "problem"),
    [
        ("{enabled: true, capacity: lots}", "", "'lots' is not a number of bytes"),
        ("{enabled: true, capacity: 10K}", "", "less than 1M"),
        ("{enabled: true, store_every: 0}", "", "from 1 to 1000000, or 'auto'"),
        ("{enabled: true}", "  engine: deepspeed\n", "engine torch only, not engine deepspeed"),
    ],
)
def test_a_bad_memory_tiers_setting_names_the_field(
    tmp_path: Path, tiers: str, extra: str, problem: str
) -> None:
    with pytest.raises(BadInputError, match=problem):
        job(tmp_path, tiers, extra)


def test_submit_sizes_the_sidecar_to_the_capacity(tmp_path: Path) -> None:
    assert peer_parameters(job(tmp_path, "{enabled: true, capacity: 8G}")) == {
        "memory-tiers": "on",
        "peer-capacity": str(8 << 30),
        "peer-memory": f"{8 * 1024 + 256}Mi",
    }
    off = peer_parameters(job(tmp_path, "{enabled: false}"))
    assert off["peer-capacity"] == "1M" and off["memory-tiers"] == "off"


def _steps(template: dict[str, Any]) -> list[str]:
    return [s["name"] for group in template["steps"] for s in group]


def test_the_gang_pod_runs_the_peer_server_as_a_sidecar_admitted_from_its_run_only() -> None:
    job_doc = gang.volcano_job()
    pod = job_doc["spec"]["tasks"][1]["template"]
    assert pod["metadata"]["labels"][PEER_LABEL] == "{{workflow.name}}"
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # native sidecar: the pod ends with train
    assert sidecar["command"][:3] == ["python", "-m", "burst.checkpoint.peer"]
    assert sidecar["ports"] == [
        {"name": PEER_PORT_NAME, "containerPort": PEER_PORT, "protocol": "TCP"}
    ]
    assert sidecar["resources"]["limits"]["memory"] == PEER_MEMORY
    assert sidecar["resources"]["requests"]["memory"] == PEER_MEMORY
    assert sidecar["image"] == pod["spec"]["containers"][0]["image"]
    train_env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert train_env["BURST_PEER_PORT"] == str(PEER_PORT)

    policy = yaml.safe_load(gang.PEER_POLICY_MANIFEST)
    assert policy["kind"] == "NetworkPolicy"
    selector = {"matchLabels": {PEER_LABEL: "{{workflow.name}}"}}
    assert policy["spec"]["podSelector"] == selector
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": selector}]}]

    built = burst_train.build().to_dict()
    templates = {t["name"]: t for t in built["spec"]["templates"]}
    assert templates["peer-network-policy"]["resource"]["setOwnerReference"] is True
    order = _steps(templates["place-gang"])
    assert order.index("peer-network-policy") < order.index("train")
    (policy_step,) = [
        s for g in templates["place-gang"]["steps"] for s in g if s["name"] == "peer-network-policy"
    ]  # only a run with the tiers on gets it (the policy admits nothing else to the pods)
    assert policy_step["when"] == "'{{workflow.parameters.memory-tiers}}' == 'on'"
    params = {p["name"] for p in built["spec"]["arguments"]["parameters"]}
    assert {"memory-tiers", "peer-capacity", "peer-memory"} <= params
