"""`on_checkpoint` runs once per complete checkpoint, one at a time, its output in the job
log; a Hugging Face save without gpujob's marker is adopted once its files hold still."""

from __future__ import annotations

import json
import re

from conftest import wait_until


def test_hooks_run_one_at_a_time_for_each_complete_checkpoint_in_order(agent_job, tmp_path):
    ckpt = tmp_path / "ckpts"
    hook = (
        'echo "eval start $GPUJOB_CHECKPOINT_STEP"; sleep 0.7; '
        'ls "$GPUJOB_CHECKPOINT" | tr "\\n" " "; echo; echo "eval end $GPUJOB_CHECKPOINT_STEP"'
    )
    job = agent_job(
        ckpt, ["--saves", "4", "--size", "1", "--every", "0.2"], keep_last=1, on_checkpoint=hook
    )
    status = job.start().wait(timeout=120)
    assert status["state"] == "succeeded", job.log
    events = re.findall(r"^eval (start|end) (\d+)$", job.log, re.M)
    assert events == [(kind, str(step)) for step in (10, 20, 30, 40) for kind in ("start", "end")]
    assert job.log.count("model.bin optimizer.bin trainer_state.json") == 4
    assert "on_checkpoint for checkpoint-40 exited 0" in job.log
    # retention waited for each hook before deleting its checkpoint
    assert sorted(p.name for p in ckpt.iterdir()) == ["checkpoint-40"]


def test_a_save_without_the_marker_is_adopted_when_it_is_complete_by_its_format(
    agent_job, tmp_path
):
    ckpt = tmp_path / "ckpts"
    program = tmp_path / "hf_like.py"
    program.write_text(
        "import json, os, sys, time\n"
        "root = sys.argv[sys.argv.index('--dir') + 1]\n"
        "for step in (10, 20):\n"
        "    d = os.path.join(root, f'checkpoint-{step}')\n"
        "    os.makedirs(d)\n"
        "    open(os.path.join(d, 'model.safetensors'), 'wb').write(b'w' * 1000)\n"
        "    if step == 20:\n"
        "        open(os.path.join(d, 'checkpoint-is-incomplete.txt'), 'w').write('x')\n"
        "    json.dump({'global_step': step}, open(os.path.join(d, 'trainer_state.json'), 'w'))\n"
        "    time.sleep(2)\n"
    )
    job = agent_job(ckpt, [], keep_last=3)
    config = json.loads((job.node_dir / "job.json").read_text())
    config["argv"] = ["python3", str(program), "--dir", str(ckpt)]
    (job.node_dir / "job.json").write_text(json.dumps(config))
    job.start()
    wait_until(
        lambda: "checkpoint-10: complete (marker written by the agent)" in job.log,
        "the agent to adopt checkpoint-10",
        30,
    )
    assert job.wait(60)["state"] == "succeeded"
    marker = json.loads((ckpt / "checkpoint-10" / ".gpujob-complete").read_text())
    assert marker == {
        "files": {"model.safetensors": 1000, "trainer_state.json": 19},
        "step": 10,
        "written_by": "agent",
    }
    assert not (ckpt / "checkpoint-20" / ".gpujob-complete").exists()


def test_hooks_run_with_the_jobs_own_variables(agent_job, tmp_path):
    """job.json's `hook_env` (the node's variables, as the plan writes them: see
    tests/unit/test_plan.py) reaches every hook, beside its checkpoint's own."""
    hook_env = {"GPUJOB_CHECKPOINT_DIR": str(tmp_path / "ckpts"), "EVAL_SET": "dev"}
    ckpt = tmp_path / "ckpts"
    hook = 'echo "hook sees $GPUJOB_CHECKPOINT_DIR $EVAL_SET $GPUJOB_CHECKPOINT_STEP"'
    job = agent_job(ckpt, ["--saves", "1", "--size", "1", "--every", "0.2"], keep_last=1,
                    on_checkpoint=hook, hook_env=hook_env)  # fmt: skip
    assert job.start().wait(timeout=120)["state"] == "succeeded", job.log
    assert f"hook sees {hook_env['GPUJOB_CHECKPOINT_DIR']} dev 10" in job.log
