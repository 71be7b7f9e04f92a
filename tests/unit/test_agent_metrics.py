"""The node's metrics as the agent records them (launcher/agent/metrics.py) and as `gpujob
metrics` shows them: log patterns, the bounded record, the GPU sample shared with the idle
rule, sparklines, and the status line."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from launcher import agent as agent_pkg
from launcher.agent import metrics as m
from launcher.commands.metrics import draw, sparkline, step_table
from launcher.commands.status import metrics_text
from launcher.jobs.metrics import parse_record

PATTERN = re.compile(r"step (?P<step>\d+)/\d+ loss (?P<loss>[0-9.]+)(?: tokens/s (?P<tps>\d+))?")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("step 20/60 loss 2.3109 tokens/s 29786", {"step": 20, "loss": 2.3109, "tps": 29786.0}),
        ("step 1/60 loss 5.5039", {"step": 1, "loss": 5.5039}),
        ("[rank0] step 3/9 loss 1.5 and more", {"step": 3, "loss": 1.5}),
        ("final loss 0.8597", None),
        ("", None),
    ],
)
def test_a_log_line_gives_the_patterns_named_numbers(line: str, expected: dict | None) -> None:
    assert m.from_log(PATTERN, line) == expected


def test_a_group_that_is_no_number_is_left_out() -> None:
    pattern = re.compile(r"phase (?P<phase>\w+) loss (?P<loss>\S+)")
    assert m.from_log(pattern, "phase warmup loss 0.5") == {"loss": 0.5}
    assert m.from_log(pattern, "phase warmup loss nan") is None  # not finite: no figure


def test_a_steps_object_keeps_its_numbers() -> None:
    raw = {"step": 4.0, "loss": 0.5, "lr": "3e-4", "tag": "x", "done": True, "nested": {"a": 1},
           "t": 9, "kind": "sys"}  # fmt: skip
    assert m.figures(raw) == {"step": 4, "loss": 0.5, "lr": 3e-4}


def test_parse_gpus_reads_utilisation_and_memory() -> None:
    text = "0, 87, 1234\n1, 0, 5\n2, [N/A], 7\nnot a row\n"
    assert m.parse_gpus(text) == {0: (87.0, 1234.0), 1: (0.0, 5.0)}


def fake_nvidia_smi(tmp_path: Path, rows: str) -> tuple[str, ...]:
    """A real program that answers as `nvidia-smi` does and counts its calls."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho x >> {tmp_path}/calls\nprintf '{rows}'\n")
    script.chmod(0o755)
    return (str(script),)


def test_one_nvidia_smi_call_serves_the_idle_rule_and_the_metrics(tmp_path: Path) -> None:
    probe = m.GpuProbe(fresh_s=60, query=fake_nvidia_smi(tmp_path, "0, 91, 100\\n1, 45, 200\\n"))
    assert probe.utilization() == {0: 91.0, 1: 45.0}
    assert probe.sample() == {0: (91.0, 100.0), 1: (45.0, 200.0)}
    assert (tmp_path / "calls").read_text().count("x") == 1


def test_a_host_without_nvidia_smi_is_asked_once(tmp_path: Path) -> None:
    probe = m.GpuProbe(query=(str(tmp_path / "absent"),))
    for _ in range(2):
        with pytest.raises(m.GpuQueryFailed, match="not installed"):
            probe.sample()
    assert probe.absent


def test_the_record_is_thinned_under_its_bound_keeping_the_newest_whole(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"t": i, "kind": "step", "step": i, "loss": 1 / (i + 1)},
                        separators=(",", ":")) for i in range(4000)]  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))
    bound = 40_000
    m.bound(path, bound)
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.stat().st_size <= bound
    steps = [record["step"] for record in kept]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 3999
    assert steps[-50:] == list(range(3950, 4000))  # the newest quarter whole
    assert len(steps) > 300  # the older part thinned, not dropped
    assert not list(tmp_path.glob(".*tmp"))


def test_thinning_keeps_the_jobs_figures_and_the_machines_alike() -> None:
    lines = [f'{{"kind":"{"sys" if i % 2 else "step"}","i":{i}}}' for i in range(400)]
    kept = m.thin(lines)
    old = kept[: len(kept) - 100]
    assert sum('"sys"' in line for line in old) == sum('"step"' in line for line in old)


def record_of(node_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (node_dir / m.RECORD).read_text().splitlines()]


def test_the_recorder_reads_the_jobs_file_and_its_log(tmp_path: Path) -> None:
    published: list[dict] = []
    config = {"log": "job.log", "metrics": {"from_log": PATTERN.pattern, "every_s": 0.05}}
    probe = m.GpuProbe(query=fake_nvidia_smi(tmp_path, "0, 70, 10\\n1, 90, 20\\n"))
    recorder = m.Recorder(tmp_path, config, probe, published.append)
    recorder.with_rss(lambda pids: None)([os.getpid()])  # this process: some MiB
    with open(tmp_path / m.JOB_FILE, "w") as out:
        out.write('{"step": 1, "loss": 4.0}\n{"step": 2, "loss": 3.0}\nnot json\n{"step": 3, "lo')
    (tmp_path / "job.log").write_text("step 10/20 loss 2.5\r\nwarming\nstep 11/20 loss 2.0\n")
    recorder.collect()
    with open(tmp_path / m.JOB_FILE, "a") as out:  # the line being written is read once whole
        out.write('ss": 1.0}\n')
    done = threading.Event()
    done.set()
    recorder.run(done)  # a final pass, as at the job's end
    steps = [r for r in record_of(tmp_path) if r["kind"] == "step"]
    assert [(r.get("step"), r["loss"]) for r in steps] == [
        (1, 4.0), (2, 3.0), (10, 2.5), (11, 2.0), (3, 1.0)]  # fmt: skip
    system = [r for r in record_of(tmp_path) if r["kind"] == "sys"]
    assert system[0]["gpu_util"] == [70.0, 90.0] and system[0]["gpu_mem_mib"] == [10.0, 20.0]
    assert 1 < system[0]["rss_mib"] < 4096
    assert published[-1]["metrics"] == {"step": 3, "name": "loss", "value": 1.0,
                                        "trend": "down", "gpu_util": 80}  # fmt: skip


def test_the_file_gpujob_metrics_names_is_the_one_the_agent_reads() -> None:
    assert (agent_pkg.METRICS_JOB_FILE, agent_pkg.METRICS_RECORD) == (m.JOB_FILE, m.RECORD)
    shipped = {os.path.basename(path) for path in agent_pkg.AGENT_MODULES}
    assert {"metrics.py", "log_read.py", "limits.py"} <= shipped


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3, 2, 1], "down"),
        ([1, 2, 3], "up"),
        ([1.0, 1.001, 0.999, 1.0], "flat"),
        ([5.0], "flat"),
    ],
)
def test_trend(values: list[float], expected: str) -> None:
    assert m.trend(values) == expected


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"t": 1, "kind": "step", "step": 3, "acc": 0.5, "loss": 1.0}, "loss"),
        ({"t": 1, "kind": "step", "step": 3, "reward": 0.5, "kl": 1.0}, "reward"),
        ({"t": 1, "kind": "step", "step": 3}, None),
    ],
)
def test_headline_is_the_loss_else_the_first_figure(step: dict, expected: str | None) -> None:
    assert m.headline(step) == expected


@pytest.mark.parametrize(
    ("values", "width", "expected"),
    [
        ([0, 1, 2, 3, 4, 5, 6, 7], 40, "▁▂▃▄▅▆▇█"),
        ([5, 5, 5], 40, "▁▁▁"),
        ([8, 0], 40, "█▁"),
        (list(range(100)), 10, "▁▂▃▃▄▅▆▆▇█"),  # means 4.5, 14.5 .. 94.5
        ([], 40, ""),
        ([1.0, float("nan"), 3.0], 40, "▁█"),
    ],
)
def test_sparkline(values: list[float], width: int, expected: str) -> None:
    assert sparkline(values, width) == expected


def test_the_status_line_shows_the_headline_its_trend_and_gpu_busy() -> None:
    status = {"metrics": {"name": "loss", "value": 0.85974, "trend": "down", "step": 60,
                          "gpu_util": 87, "tokens_per_s": 29512}}  # fmt: skip
    assert metrics_text([status]) == "loss 0.8597 ↓ @60, 29.5k tok/s, GPU 87%"  # type: ignore[list-item]
    slow = {"metrics": {"name": "reward", "value": 1.5, "trend": "up", "tokens_per_s": 870.4}}
    assert metrics_text([slow]) == "reward 1.5 ↑, 870 tok/s"  # type: ignore[list-item]
    assert metrics_text([{"metrics": {"gpu_util": 3}}]) == "GPU 3%"  # type: ignore[list-item]
    assert metrics_text([{}]) == "" and metrics_text(None) == ""


def test_a_plot_has_a_point_per_recorded_step_and_gpu_sample() -> None:
    lines = [json.dumps({"t": i, "kind": "step", "step": i + 1, "loss": 5 - i / 10})
             for i in range(37)]  # fmt: skip
    lines += [json.dumps({"t": i, "kind": "sys", "gpu_util": [50, 70]}) for i in range(5)]
    node = parse_record(0, "host", "\n".join(lines) + "\n{cut sh")
    fig = draw("j", [node])
    loss, gpu = fig.axes[0].lines[0], fig.axes[1].lines[0]
    assert list(loss.get_xdata()) == list(range(1, 38)) and loss.get_ydata()[-1] == 5 - 3.6
    assert list(gpu.get_ydata()) == [60.0] * 5
    assert step_table(node, rows=2).splitlines() == ["STEP  LOSS", "  36   1.5", "  37   1.4"]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["metrics", "no-such-job"], 2, "gpujob: error: no job `no-such-job`"),
        (["metrics", "j", "--plot", "out.txt"], 2, "the file's name must end .png, .svg or .html"),
    ],
)
def test_metrics_refuses_in_one_line(gpujob, args: list[str], code: int, said: str) -> None:
    done = gpujob(*args)
    assert done.exit_code == code and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr


def test_a_bad_pattern_in_job_json_leaves_the_rest_recording(tmp_path: Path) -> None:
    config = {"metrics": {"from_log": "loss (?P<loss>", "every_s": 0.05}}
    recorder, done, thread = m.start(tmp_path, config, m.GpuProbe(query=("/nonexistent",)),
                                     lambda update: None)  # fmt: skip
    (tmp_path / m.JOB_FILE).write_text('{"step": 1, "loss": 2.0}\n')
    done.set()
    thread.join(timeout=10)
    assert recorder.pattern is None
    assert [r["loss"] for r in record_of(tmp_path) if r["kind"] == "step"] == [2.0]


def test_the_summary_lines_and_each_kind_of_plot_file(tmp_path: Path) -> None:
    from launcher.commands.metrics import summary_lines, write_plot

    lines = [json.dumps({"t": i, "kind": "step", "step": i, "loss": 4 - i}) for i in range(4)]
    lines += [json.dumps({"t": 10 + i, "kind": "sys", "gpu_util": [u, u], "rss_mib": 100 * i})
              for i, u in enumerate((0, 50, 100))]  # fmt: skip
    node = parse_record(0, "host", "\n".join(lines))
    shown = summary_lines(node)
    assert shown[0].split() == ["loss", "4", "->", "1", "(min", "1)", "█▆▃▁"]
    assert shown[1].split() == ["GPU", "util", "%", "mean", "50,", "last", "100", "▁▅█"]
    assert shown[2].split() == ["host", "memory", "MiB", "peak", "200", "▁▅█"]
    for suffix, head in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".html", b"<!doctype html>")):
        said = write_plot("j", [node], tmp_path / f"c{suffix}")
        data = (tmp_path / f"c{suffix}").read_bytes()
        assert data.startswith(head) and said.startswith(f"wrote {tmp_path}/c{suffix}")
    assert b"<svg" in (tmp_path / "c.html").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plot.")]
