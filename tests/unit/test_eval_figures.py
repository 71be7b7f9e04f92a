"""Eval figures per checkpoint (launcher/jobs/evals.py): what an `on_checkpoint` hook wrote,
in the shapes evals write them, read into a step -> figures table; rows that cannot be read
are skipped with one note per file, never a traceback."""

from __future__ import annotations

import json

from launcher.commands.metrics import eval_table
from launcher.jobs.evals import FILE_CAP, Evals, add_file, folder_step


def read(*files: tuple[str, str]) -> Evals:
    evals = Evals("host")
    for path, text in files:
        add_file(evals, path, text)
    return evals


def test_a_metrics_csv_per_checkpoint_takes_its_step_from_the_column_or_the_folder():
    evals = read(("ckpt/checkpoint-10/metrics.csv", "step,acc\n10,0.5\n"),
                 ("ckpt/checkpoint-20/metrics.csv", "acc,f1\n0.7,0.6\n"))  # fmt: skip
    assert evals.steps == {10: {"acc": 0.5}, 20: {"acc": 0.7, "f1": 0.6}}
    assert evals.notes == []
    assert evals.series("acc") == ([10.0, 20.0], [0.5, 0.7])
    assert eval_table(evals).splitlines() == ["STEP  ACC   F1", "  10  0.5    -",
                                              "  20  0.7  0.6"]  # fmt: skip


def test_seed_000s_rows_a_row_per_dataset_and_the_long_metric_value_shape():
    nine = "dataset,accuracy,n\n" + "".join(f"task{i},0.{i},100\n" for i in range(9))
    evals = read(("ckpt/step_2/metrics.csv", nine),
                 ("outputs/eval_runs/metrics.csv", "checkpoint,metric,value\n"
                  "checkpoint-2,pass@1,0.31\ncheckpoint-4,pass@1,0.35\n"))  # fmt: skip
    assert evals.steps[2]["task3/accuracy"] == 0.3
    assert evals.steps[2]["task8/n"] == 100.0
    assert evals.steps[2]["pass@1"] == 0.31 and evals.steps[4] == {"pass@1": 0.35}


def test_bad_and_cut_rows_are_skipped_with_one_note_per_file():
    evals = read(("outputs/metrics.csv", "step,acc\n10,0.5\n20,oops\n30\n,0.9\n40,0.8\n"))
    assert evals.steps == {10: {"acc": 0.5}, 40: {"acc": 0.8}}
    assert evals.notes == ["outputs/metrics.csv: 3 row(s) skipped (no step, no number, or cut "
                           "short)"]  # fmt: skip
    headless = read(("outputs/metrics.csv", "10,0.9\n20,0.9\n"))  # nothing names the figure
    assert headless.steps == {} and "2 row(s) skipped" in headless.notes[0]
    cut = Evals("host")
    add_file(cut, "checkpoint-5/metrics.csv", "step,acc\n5,0.5\n6,0.", cut=True)
    assert cut.steps == {5: {"acc": 0.5}}
    assert cut.notes == [f"checkpoint-5/metrics.csv: only its first {FILE_CAP // 1024} KiB read"]


def test_json_and_json_lines_nested_objects_and_non_numbers():
    evals = read(
        (
            "checkpoint-30/metrics.json",
            json.dumps({"gsm8k": {"acc": 0.4}, "note": "x", "ok": True}),
        ),
        ("outputs/metrics.jsonl", '{"global_step": 40, "acc": 0.6}\n{"acc": 0.7}\n{"step": 5, '),
    )
    assert evals.steps == {30: {"gsm8k/acc": 0.4}, 40: {"acc": 0.6}}
    assert len(evals.notes) == 1 and "2 row(s) skipped" in evals.notes[0]
    assert read(("checkpoint-1/metrics.json", "{not json")).notes[0].endswith("cut short)")


def test_the_step_of_a_folder():
    assert folder_step("ckpt/checkpoint-30/metrics.csv") == 30
    assert folder_step("outputs/30/eval/metrics.csv") == 30
    assert folder_step("outputs/metrics.csv") is None
