"""TensorBoard event files read with the standard library (launcher/agent/tfevents.py): the
files are written here with the protobuf library from TensorBoard's own message layout
(`Event`, `Summary.Value`, `TensorProto`), not with the reader's code."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from launcher.agent import metrics as m
from launcher.agent.tfevents import EventFolder, records

F = descriptor_pb2.FieldDescriptorProto


def _messages() -> dict[str, type]:
    """tensorflow/core/util/event.proto, summary.proto and tensor.proto: the fields the reader
    uses, under their numbers and types there."""
    proto = descriptor_pb2.FileDescriptorProto(name="gj_tb.proto", package="gjtb", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, str | None, bool]) -> None:
        made = proto.message_type.add(name=name)
        for field_name, number, kind, type_name, repeated in fields:
            label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            field = made.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".gjtb.{type_name}"

    message("TensorProto", ("dtype", 1, F.TYPE_INT32, None, False),
            ("tensor_content", 4, F.TYPE_BYTES, None, False),
            ("float_val", 5, F.TYPE_FLOAT, None, True),
            ("double_val", 6, F.TYPE_DOUBLE, None, True),
            ("int64_val", 10, F.TYPE_INT64, None, True))  # fmt: skip
    message("Value", ("tag", 1, F.TYPE_STRING, None, False),
            ("simple_value", 2, F.TYPE_FLOAT, None, False),
            ("image", 4, F.TYPE_BYTES, None, False),
            ("tensor", 8, F.TYPE_MESSAGE, "TensorProto", False))  # fmt: skip
    message("Summary", ("value", 1, F.TYPE_MESSAGE, "Value", True))
    message("Event", ("wall_time", 1, F.TYPE_DOUBLE, None, False),
            ("step", 2, F.TYPE_INT64, None, False),
            ("file_version", 3, F.TYPE_STRING, None, False),
            ("summary", 5, F.TYPE_MESSAGE, "Summary", False))  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"gjtb.{name}"))
            for name in ("Event", "Summary", "Value", "TensorProto")}  # fmt: skip


MSG = _messages()


def event(step: int | None = None, **values: object) -> bytes:
    """An Event: `simple=` scalars PyTorch's way, `tensor=` TF2's, `version=` a header."""
    made = MSG["Event"](wall_time=1.5)
    if step is not None:
        made.step = step
    if "version" in values:
        made.file_version = str(values["version"])
    for tag, number in dict(values.get("simple", {})).items():  # type: ignore[call-overload]
        made.summary.value.add(tag=tag, simple_value=number)
    for tag, tensor in dict(values.get("tensor", {})).items():  # type: ignore[call-overload]
        made.summary.value.add(tag=tag, tensor=MSG["TensorProto"](**tensor))
    if "image" in values:
        made.summary.value.add(tag="img", image=b"\x89PNG")
    return made.SerializeToString()


def frame(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


def test_scalars_by_step_from_simple_values_and_tf2_tensors(tmp_path: Path) -> None:
    runs = tmp_path / "runs" / "exp1"
    runs.mkdir(parents=True)
    data = frame(event(version="brain.Event:2"))
    for step in (1, 2, 3):
        data += frame(event(step, simple={"train/loss": 1 / step, "lr": 0.001}))
    data += frame(event(3, image=True))  # not a scalar: skipped
    data += frame(event(4, tensor={
        "eval/acc": {"dtype": 1, "tensor_content": struct.pack("<f", 0.75)},
        "eval/loss": {"dtype": 2, "double_val": [0.125]},
        "tokens": {"dtype": 9, "int64_val": [4096]},
    }))  # fmt: skip
    (runs / "events.out.tfevents.1700000000.host.1.0").write_bytes(data)
    steps = EventFolder(tmp_path / "runs").steps()
    assert steps == [
        {"step": 1, "train/loss": 1.0, "lr": pytest.approx(0.001)},
        {"step": 2, "train/loss": 0.5, "lr": pytest.approx(0.001)},
        {"step": 3, "train/loss": pytest.approx(1 / 3), "lr": pytest.approx(0.001)},
        {"step": 4, "eval/acc": 0.75, "eval/loss": 0.125, "tokens": 4096.0},
    ]


def test_a_record_being_written_is_read_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1"
    whole = frame(event(7, simple={"loss": 2.0})) + frame(event(8, simple={"loss": 1.0}))
    cut = len(whole) - 9
    path.write_bytes(whole[:cut])
    folder = EventFolder(tmp_path)
    assert folder.steps() == [{"step": 7, "loss": 2.0}]
    assert folder.steps() == []
    with open(path, "ab") as out:
        out.write(whole[cut:])
    assert folder.steps() == [{"step": 8, "loss": 1.0}]


def test_a_file_that_is_no_event_file_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.tfevents.txt").write_bytes(b"\xff" * 64)
    (tmp_path / "events.out.tfevents.2").write_bytes(frame(event(1, simple={"loss": 3.0})))
    folder = EventFolder(tmp_path)
    assert folder.steps() == [{"step": 1, "loss": 3.0}]
    assert folder.broken == {tmp_path / "notes.tfevents.txt"}
    assert EventFolder(tmp_path / "absent").steps() == []


def test_records_stop_at_a_partial_frame() -> None:
    data = frame(b"abc") + frame(b"")[:5]
    assert records(data) == ([b"abc"], 19)


def test_the_recorder_takes_the_specs_tensorboard_folder_in_the_workdir(tmp_path: Path) -> None:
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    logs = tmp_path / "workdir" / "tb"
    logs.mkdir(parents=True)
    (logs / "events.out.tfevents.3").write_bytes(
        frame(event(10, simple={"train/loss": 0.5})) + frame(event(20, simple={"train/loss": 0.25}))
    )
    published: list[dict] = []
    config = {"metrics": {"tensorboard": "tb"}}
    recorder = m.Recorder(node_dir, config, m.GpuProbe(query=(str(tmp_path / "none"),)),
                          published.append)  # fmt: skip
    recorder.collect()
    lines = [json.loads(line) for line in (node_dir / m.RECORD).read_text().splitlines()]
    assert [(r["step"], r["train/loss"]) for r in lines] == [(10, 0.5), (20, 0.25)]
    assert published[-1]["metrics"]["name"] == "train/loss"
