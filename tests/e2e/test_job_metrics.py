"""The quickstart's metrics end to end through the real CLI: the program writes a line per
step to $GPUJOB_METRICS, its agent records them beside the log, `gpujob metrics` shows the
loss falling, `--plot` draws a PNG with a point per logged step, `status` shows the last
loss; a spec's `metrics.from_log` pattern records figures from the log alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)  # fmt: skip


def test_the_quickstarts_loss_is_recorded_shown_plotted_and_in_status(tmp_path: Path) -> None:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", "jobs/quickstart.yaml", "--job-id", "qs-metrics")
    assert run.returncode == 0, run.stderr[-3000:]
    logged = {int(step): float(loss) for step, loss
              in re.findall(r"^step (\d+)/60 loss ([0-9.]+)", run.stdout, re.M)}  # fmt: skip
    final = float(re.findall(r"^final loss ([0-9.]+)$", run.stdout, re.M)[0])

    every = gpujob(env, "metrics", "qs-metrics", "--json")
    assert every.returncode == 0, every.stderr
    (node,) = json.loads(every.stdout)["nodes"]
    steps = node["steps"]
    assert node["source"] == "host"
    assert [s["step"] for s in steps] == list(range(1, 61))  # every step, once, in order
    assert steps[-1]["loss"] == pytest.approx(final, abs=1e-4)
    by_step = {s["step"]: s["loss"] for s in steps}
    assert len(logged) >= 5 and all(  # the log's lines say the same losses
        by_step[step] == pytest.approx(loss, abs=1e-4) for step, loss in logged.items()
    )
    assert any((s["rss_mib"] or 0) > 50 for s in node["system"])  # the job tree's memory

    shown = gpujob(env, "metrics", "qs-metrics")
    assert shown.returncode == 0, shown.stderr
    loss_line = next(line for line in shown.stdout.splitlines() if line.strip().startswith("loss"))
    first, last = re.search(r"loss\s+([0-9.]+) -> ([0-9.]+)", loss_line).groups()  # type: ignore[union-attr]
    assert float(last) < float(first) * 0.5, shown.stdout
    spark = loss_line.split()[-1]
    assert set(spark) <= set("▁▂▃▄▅▆▇█") and spark[0] == "█" and spark[-1] == "▁"
    assert re.search(r"^\s+60\s+0\.\d+\s+\d+$", shown.stdout, re.M), shown.stdout  # last row

    png = tmp_path / "curves.png"
    plotted = gpujob(env, "metrics", "qs-metrics", "--plot", str(png))
    assert plotted.returncode == 0, plotted.stderr
    assert "loss 60 point(s)" in plotted.stdout
    import matplotlib.image

    image = matplotlib.image.imread(png)  # a PNG that decodes, of a real size
    assert image.shape[0] > 300 and image.shape[1] > 300

    status = gpujob(env, "status", "--json")
    row = next(r for r in json.loads(status.stdout)["jobs"] if r["id"] == "qs-metrics")
    rate = steps[-1]["tokens_per_s"]
    speed = f"{rate / 1000:.1f}k tok/s" if rate >= 1000 else f"{rate:.0f} tok/s"
    assert row["metrics"] == f"loss {final:.4g} ↓ @60, {speed}"
    followed = gpujob(env, "metrics", "qs-metrics", "--follow")  # an ended job: shown, then done
    assert followed.returncode == 0 and followed.stdout == shown.stdout, followed.stderr
    table = gpujob(env, "status")
    assert "METRICS" in table.stdout and row["metrics"] in table.stdout


def test_figures_from_the_log_by_the_specs_pattern(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text(
        "for step in range(1, 8):\n"
        "    print(f'it {step} | loss {1 / step:.3f} | acc 0.{step}', flush=True)\n"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: fromlog\nimage: {IMAGE}\nworkdir: work\n"
        "run:\n  entrypoint: prog.py\n  nproc_per_node: 1\n"
        r"metrics:" "\n"
        r"  from_log: 'it (?P<step>\d+) \| loss (?P<loss>[0-9.]+) \| acc (?P<acc>[0-9.]+)'"
        "\n"
    )  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    run = gpujob(env, "submit", str(spec), "--job-id", "fromlog")
    assert run.returncode == 0, run.stderr[-3000:]
    every = gpujob(env, "metrics", "fromlog", "--json")
    steps = json.loads(every.stdout)["nodes"][0]["steps"]
    assert [(s["step"], s["loss"], s["acc"]) for s in steps] == [
        (n, round(1 / n, 3), float(f"0.{n}")) for n in range(1, 8)]  # fmt: skip


def test_follow_prints_new_steps_until_the_job_ends(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text(
        "import json, os, time\n"
        "out = open(os.environ['GPUJOB_METRICS'], 'a', buffering=1)\n"
        "time.sleep(2)\n"
        "for step in range(1, 9):\n"
        "    out.write(json.dumps({'step': step, 'reward': step / 10}) + '\\n')\n"
        "    time.sleep(1)\n"
    )
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: follow\nimage: {IMAGE}\nworkdir: work\nrun:\n  entrypoint: prog.py\n"
                    "  nproc_per_node: 1\nmetrics:\n  every: 1\n")  # fmt: skip
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    started = gpujob(env, "submit", str(spec), "--job-id", "follow", "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    followed = gpujob(env, "metrics", "follow", "--follow")
    assert followed.returncode == 0, followed.stderr
    first = int(re.search(r"node 0: (\d+) step\(s\) recorded", followed.stdout).group(1))  # type: ignore[union-attr]
    assert first < 8, followed.stdout  # it started while the job ran
    new = [int(n) for n in re.findall(r"^node 0: step (\d+)  reward", followed.stdout, re.M)]
    assert new == list(range(first + 1, 9)), followed.stdout  # then every later step, once
