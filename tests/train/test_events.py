"""TensorBoard events without TensorFlow (tied_embed.train.events): what the writer writes reads back through
TensorBoard's own EventAccumulator, a failed write is one error, an event file TensorFlow's writer (CLU's) wrote
for the smoke run reads as this writer's does, and a training run and an inspection never import TensorFlow."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT
from helpers import subprocess_env
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util.tensor_util import make_ndarray

from tied_embed.train import events as events_lib
from tied_embed.train.events import EventsFailed, EventWriter
from tied_embed.train.metrics import read_scalars

# What CLU's SummaryWriter (TensorFlow's) wrote for configs/smoke.py, kept to show that such a workdir still reads.
TF_WRITTEN = pathlib.Path(__file__).parent / "tf_written_events"
SCALAR_TAGS = (
    "train/loss", "train/learning_rate", "eval/loss", "eval/loss_floor", "eval/gap", "grad/lookup_norm",
    "grad/projection_norm", "grad/total_norm", "grad/cosine", "grad/split_error", "grad/rows_looked_up",
    "grad/rows_projection_only",
)


def _tensors(events: EventAccumulator, tag: str) -> dict[int, np.ndarray]:
  return {event.step: make_ndarray(event.tensor_proto) for event in events.Tensors(tag)}


def test_scalars_histograms_images_and_hparams_read_back_with_tensorboards_reader(tmp_path):
  rng = np.random.default_rng(0)
  totals, pixels = rng.normal(size=(7, 5)), rng.integers(0, 256, (2, 6, 9, 3), dtype=np.uint8)
  writer = EventWriter(tmp_path)
  writer.write_hparams({"seed": 3, "model.tied": True, "data.source": "planted", "unset": None})
  writer.write_scalars(10, {"train/loss": 2.5, "eval/loss": np.float32(1.25)})
  writer.write_scalars(20, {"train/loss": 0.1})
  writer.write_histograms(10, {"provenance/lookup_total": totals})
  writer.write_images(3, {"report/heatmaps": pixels})
  writer.close()
  writer.close()  # a second close does nothing

  events = EventAccumulator(str(tmp_path)).Reload()
  assert _tensors(events, "train/loss") == {10: np.float32(2.5), 20: np.float32(0.1)}  # stored as float32
  assert _tensors(events, "eval/loss") == {10: 1.25}
  assert events.SummaryMetadata("train/loss").plugin_data.plugin_name == "scalars"
  (histogram,) = _tensors(events, "provenance/lookup_total").values()  # (30, 3): left edge, right edge, count
  edges = np.linspace(totals.min(), totals.max(), 31)
  np.testing.assert_allclose(histogram[:, :2], np.stack([edges[:-1], edges[1:]], axis=1), rtol=1e-12)
  np.testing.assert_array_equal(histogram[:, 2], np.histogram(totals, bins=edges)[0])
  assert events.SummaryMetadata("provenance/lookup_total").plugin_data.plugin_name == "histograms"
  (image,) = _tensors(events, "report/heatmaps").values()  # [width, height, PNG per image]
  assert list(image[:2]) == [b"9", b"6"] and len(image) == 4
  for png, want in zip(image[2:], pixels, strict=True):
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), want)
  assert events.SummaryMetadata("report/heatmaps").plugin_data.plugin_name == "images"
  content = events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
  hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
  assert (hparams["seed"].number_value, hparams["model.tied"].bool_value) == (3, True)
  assert (hparams["data.source"].string_value, hparams["unset"].string_value) == ("planted", "")


def test_a_failed_write_is_raised_by_the_next_call_flush_and_close(tmp_path, monkeypatch):
  writer = EventWriter(tmp_path)

  def file_too_large(self, data):
    raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

  monkeypatch.setattr(events_lib.RecordWriter, "write", file_too_large)
  writer.write_scalars(1, {"train/loss": 1.0})  # returns at once: the write fails on the writer's thread
  message = f"writing {writer.path} failed: File too large"
  for call in (writer.flush, lambda: writer.write_scalars(2, {"train/loss": 0.5}), writer.close):
    with pytest.raises(EventsFailed) as failed:
      call()
    assert str(failed.value) == message and failed.value.exit_status == 1


def test_without_a_logdir_nothing_is_written_and_verbose_logs_the_values(tmp_path, caplog, monkeypatch):
  monkeypatch.chdir(tmp_path)
  writer = EventWriter(None, verbose=True)
  with caplog.at_level(logging.INFO, logger="tied_embed.train.events"):
    writer.write_scalars(5, {"train/loss": 2.5, "eval/gap": 0.125})
    writer.write_histograms(5, {"provenance/lookup_total": np.array([1.0, 2.0, 6.0])})
    writer.flush()
    writer.close()
  assert "[5] eval/gap=0.125, train/loss=2.5" in caplog.text
  assert "[5] provenance/lookup_total: 3 values, min 1, mean 3, max 6" in caplog.text
  assert list(tmp_path.iterdir()) == []


def test_an_event_file_tensorflows_writer_wrote_reads_as_this_writers_do(smoke_run, tmp_path):
  """The same tags of the same kinds; `read_scalars` returns what TensorBoard's reader does; the values are the
  smoke run's (float32, to the rounding another CPU's kernels may differ in); and inspection reads its eval/loss."""
  old = EventAccumulator(str(TF_WRITTEN)).Reload()
  new = EventAccumulator(str(smoke_run.workdir)).Reload()
  kinds = {tag: old.SummaryMetadata(tag).plugin_data.plugin_name for tag in old.Tags()["tensors"]}
  assert kinds == {tag: new.SummaryMetadata(tag).plugin_data.plugin_name for tag in new.Tags()["tensors"]}
  series = read_scalars(TF_WRITTEN, SCALAR_TAGS)
  assert set(series) == set(SCALAR_TAGS)
  for tag, (steps, values) in series.items():
    want = _tensors(old, tag)
    assert list(steps) == sorted(want) and list(values) == [float(want[step]) for step in steps], tag
    np.testing.assert_allclose(values, [float(value) for value in _tensors(new, tag).values()], rtol=1e-4, atol=1e-6)

  from tied_embed.inspection.inspector import inspect_run  # noqa: PLC0415

  workdir = tmp_path / "run"
  shutil.copytree(smoke_run.workdir, workdir, ignore=shutil.ignore_patterns("events.out.tfevents.*", "report"))
  for path in TF_WRITTEN.glob("events.out.tfevents.*"):
    shutil.copy(path, workdir)
  report = inspect_run(workdir, tokens=[0], top_k=2, pictures=False)
  assert report["run"]["eval_loss"] == {"step": 60, "value": float(_tensors(old, "eval/loss")[60])}
  assert not report["warnings"]


LEAN_RUN = """
import json, runpy, sys
workdir = sys.argv[1]
sys.argv = ["train.py", "--config", "configs/smoke.py", "--workdir", workdir]
try:
  runpy.run_path("train.py", run_name="__main__")
except SystemExit as stop:
  assert not stop.code, stop.code
from tied_embed.inspection.cli import main
assert main(["--workdir", workdir]) == 0
loaded = [name for name in sys.modules if name.split(".")[0] == "tensorflow" or name.startswith("clu.metric_writers")]
print(json.dumps(sorted(loaded)))
"""


def test_a_run_and_an_inspection_import_no_tensorflow(tmp_path):
  """train.py on configs/smoke.py, then `tied-embed-inspect` with its pictures, in one process: neither TensorFlow
  nor CLU's writers (which import it) are loaded, whether or not TensorFlow is installed."""
  workdir = tmp_path / "run"
  result = subprocess.run([sys.executable, "-c", LEAN_RUN, str(workdir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=subprocess_env(PYTHONPATH=str(ROOT)))
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.loads(result.stdout.strip().splitlines()[-1]) == []
  events = EventAccumulator(str(workdir)).Reload()
  assert sorted(_tensors(events, "train/loss")) == [10, 20, 30, 40, 50, 60]
  pictures = EventAccumulator(str(workdir / "report")).Reload()
  assert {"report/heatmaps", "report/loss_curves", "report/provenance"} <= set(pictures.Tags()["tensors"])


def test_a_one_channel_image_and_a_one_pixel_wide_image_read_back_as_written(tmp_path):
  """`_image_pb`'s C in 1, 3, 4: a one-channel image is stored as a grey PNG (H, W), and an RGB image one pixel wide
  keeps its three channels (the channel axis is the last one, whatever the width)."""
  rng = np.random.default_rng(1)
  grey, narrow = rng.integers(0, 256, (2, 3, 4, 1), dtype=np.uint8), rng.integers(0, 256, (5, 1, 3), dtype=np.uint8)
  writer = EventWriter(tmp_path)
  writer.write_images(1, {"grey": grey, "narrow": narrow})
  writer.close()
  events = EventAccumulator(str(tmp_path)).Reload()
  (stored,) = _tensors(events, "grey").values()
  assert list(stored[:2]) == [b"4", b"3"] and len(stored) == 4
  for png, want in zip(stored[2:], grey, strict=True):
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), want[..., 0])
  (stored,) = _tensors(events, "narrow").values()
  assert list(stored[:2]) == [b"1", b"5"] and len(stored) == 3
  np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(stored[2]))), narrow)


def test_writes_reach_the_file_in_call_order_while_an_earlier_one_is_slow(tmp_path, monkeypatch):
  """One writer thread: a write that takes long (a slow disk) holds the later ones back, never overtaken."""
  writer = EventWriter(tmp_path)
  write, calls = events_lib.RecordWriter.write, []

  def slow_first(self, data):
    calls.append(data)
    if len(calls) == 1:
      time.sleep(0.3)
    write(self, data)

  monkeypatch.setattr(events_lib.RecordWriter, "write", slow_first)
  for step in (1, 2, 3):
    writer.write_scalars(step, {"train/loss": float(step)})
  writer.close()
  assert [event.step for event in events_lib.load_events(writer.path) if event.summary.value] == [1, 2, 3]


class _FillingDisk(io.RawIOBase):
  """A file's bytes on a disk that takes them until `full` is set, then refuses every write with ENOSPC."""

  def __init__(self):
    super().__init__()
    self.full = False

  def writable(self) -> bool:
    return True

  def write(self, data) -> int:
    if self.full:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return len(data)


def test_a_disk_that_fills_fails_the_close_too_with_the_bytes_left_in_the_buffer(tmp_path, monkeypatch):
  """A flush refused for want of space leaves the event in the file's buffer; closing tries it again and fails again:
  close reports the failure, not a clean end."""
  disk = _FillingDisk()
  monkeypatch.setattr(events_lib, "open", lambda path, mode: io.BufferedWriter(disk), raising=False)
  writer = EventWriter(tmp_path)
  disk.full = True
  writer.write_scalars(1, {"train/loss": 1.0})
  with pytest.raises(EventsFailed) as failed:
    writer.close()
  assert str(failed.value) == f"writing {writer.path} failed: No space left on device"


def test_verbose_logs_each_kind_of_value_in_one_line(caplog):
  writer = EventWriter(None, verbose=True)
  with caplog.at_level(logging.INFO, logger="tied_embed.train.events"):
    writer.write_scalars(7, {"train/loss": 2.5, "eval/gap": 0.125})
    writer.write_histograms(7, {"provenance/lookup_total": np.array([1.0, 2.0, 6.0])})
    writer.write_images(7, {"report/provenance": np.zeros((4, 5, 3), np.uint8),
                            "report/heatmaps": np.zeros((2, 4, 4, 3), np.uint8)})
    writer.write_hparams({"seed": 3, "unset": None})
  assert caplog.messages == [
      "[7] eval/gap=0.125, train/loss=2.5",
      "[7] provenance/lookup_total: 3 values, min 1, mean 3, max 6",
      "[7] images: {'report/heatmaps': (2, 4, 4, 3), 'report/provenance': (4, 5, 3)}",
      "[hyperparameters] {'seed': 3, 'unset': ''}",
  ]
