"""Run namespaces (issue 30) as the plan and the submit check read them: the run's name
(`checkpoints.run`, else the job id), what the agent is told of it, and what a listing of a
shared prefix holds."""

from __future__ import annotations

import pytest
from planning import spec_of

from launcher.plan.build import CheckpointSync
from launcher.plan.node_files import checkpoint_care, spec_hash
from launcher.storage.runs import Survey


@pytest.mark.parametrize("name", ["checkpoint-5", "a/b", "../up", "", "step_3"])
def test_a_run_name_is_one_folder_and_never_a_checkpoints_name(name: str) -> None:
    with pytest.raises(ValueError, match="a folder name"):
        spec_of(checkpoints={"run": name})


def test_the_agent_is_told_its_run_and_the_spec_hash_ignores_the_run_name() -> None:
    spec = spec_of(checkpoints={"sync_to": "lab:runs/qs"})
    sync = CheckpointSync(rclone_path="gpujob_lab:b/runs/qs/job-1", env={})
    care = checkpoint_care(spec, "/jobs/job-1", sync, "job-1")
    assert care["run"] == {"name": "job-1", "job_id": "job-1", "spec_hash": spec_hash(spec)}
    assert care["sync_remote"] == "lab:runs/qs/job-1"
    assert "run" not in checkpoint_care(spec, "/jobs/job-1", None, "job-1")  # no sync: no run
    named = spec_of(checkpoints={"sync_to": "lab:runs/qs", "run": "sft"})
    assert checkpoint_care(named, "/j", sync, "job-2")["sync_remote"] == "lab:runs/qs/sft"
    assert spec_hash(named) == spec_hash(spec)  # naming the run continues the same spec's
    assert spec_hash(spec_of(checkpoints={"sync_to": "lab:runs/qs", "keep_last": 1})) != (
        spec_hash(spec)
    )


def test_a_listing_is_read_into_flat_checkpoints_and_runs() -> None:
    keys = [
        ("checkpoint-30/.gpujob-complete", 1), ("checkpoint-30/model.bin", 9),
        ("checkpoint-40/model.bin", 9),  # no marker: not a checkpoint
        ("logs/old-job/node-0.log", 3),
        ("run-a/gpujob-run.json", 1), ("run-a/checkpoint-20/.gpujob-complete", 1),
        ("run-a/checkpoint-10/.gpujob-complete", 1), ("run-b/gpujob-run.json", 1),
        ("run-c/checkpoint-5/.gpujob-complete", 1),  # a run whose manifest is not there yet
    ]  # fmt: skip
    found = Survey.of(keys)
    assert found.flat == ["checkpoint-30"]
    assert found.runs == {"run-a": ["checkpoint-10", "checkpoint-20"], "run-b": [],
                          "run-c": ["checkpoint-5"]}  # fmt: skip
    assert found.manifests == {"run-a", "run-b"}
