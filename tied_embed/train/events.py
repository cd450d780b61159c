"""TensorBoard event files without TensorFlow: `EventWriter` writes a run's scalars, histograms, images and
hyperparameters, `load_events` reads an event file back.

The files are those TensorFlow's summary writer (CLU's) makes, built by TensorBoard's own TensorFlow-free functions and
framed by its `RecordWriter`, so TensorBoard and `read_scalars` read a workdir alike whichever wrote it. Not CLU's
writers: `clu.metric_writers` imports TensorFlow, seconds of every start (docs/performance.md)."""

from __future__ import annotations

import concurrent.futures
import io
import itertools
import logging
import os
import pathlib
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.histogram import summary_v2 as histogram_summary
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from tied_embed import workdir as workdir_lib
from tied_embed.util import RunStopped, first_line

log = logging.getLogger(__name__)

_FILE_NUMBER = itertools.count()  # two writers of one process in one second still get two files


class EventsFailed(RunStopped):
  """Writing an event file failed (a full disk, a file size limit): exit status 1."""

  def __init__(self, path: pathlib.Path, error: OSError):
    super().__init__(f"writing {path} failed: {error.strerror or first_line(error)}")


class EventWriter:
  """Appends summaries to a new event file in `logdir` on one background thread, as CLU's asynchronous writer does: each
  `write_*` returns at once, its values reach the disk flushed, in call order. A failed write is raised as EventsFailed
  by the next call, later writes dropped. `logdir` None: no file. `verbose`: values logged too. Re-closing: no-op."""

  def __init__(self, logdir: str | pathlib.Path | None, *, verbose: bool = False):
    self._verbose = verbose
    self._error: OSError | None = None
    self.path = self._file = None
    if logdir is None:
      return
    logdir = pathlib.Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    stamp = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_NUMBER)}"
    name = f"{workdir_lib.EVENTS_PREFIX}{stamp}.v2"
    self.path = logdir / name
    self._file = open(self.path, "xb")  # noqa: SIM115 (closed by close(); "x": never written through a link)
    self._records = RecordWriter(self._file)
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")
    self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2",
                                 source_metadata=event_pb2.SourceMetadata(writer=__name__)))

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    """One scalar summary per tag at `step`, stored as float32 (as TensorFlow's writer stores them)."""
    self._write(step, lambda: [scalar_summary.scalar_pb(tag, float(value)) for tag, value in scalars.items()])
    if self._verbose:
      log.info("[%d] %s", step, ", ".join(f"{tag}={float(value):.6g}" for tag, value in sorted(scalars.items())))

  def write_histograms(self, step: int, arrays: Mapping[str, np.ndarray]) -> None:
    """One histogram per tag at `step`: any shape, flattened into TensorBoard's 30 equal-width buckets."""
    self._write(step, lambda: [histogram_summary.histogram_pb(tag, np.asarray(array)) for tag, array in arrays.items()])
    if self._verbose:
      for tag, array in sorted(arrays.items()):
        array = np.asarray(array, np.float64)
        log.info("[%d] %s: %d values, min %.6g, mean %.6g, max %.6g", step, tag, array.size, array.min(),
                 array.mean(), array.max())

  def write_images(self, step: int, images: Mapping[str, np.ndarray]) -> None:
    """One image summary per tag at `step`: (N, H, W, 3) or (H, W, 3) uint8 pixels, each stored as a PNG."""
    self._write(step, lambda: [_image_pb(tag, np.asarray(pixels)) for tag, pixels in images.items()])
    if self._verbose:
      log.info("[%d] images: %s", step, {tag: np.shape(pixels) for tag, pixels in sorted(images.items())})

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    """The run's hyperparameters ({name: bool, number or str; None as ''}) for TensorBoard's HParams, at step 0."""
    values = {name: "" if value is None else value for name, value in hparams.items()}
    self._write(0, lambda: [hparams_summary.hparams_pb(values)])
    if self._verbose:
      log.info("[hyperparameters] %s", values)

  def flush(self) -> None:
    """Waits until every write so far is on disk; EventsFailed if one failed."""
    if self._file is None:
      return
    self._pool.submit(lambda: None).result()
    self._raise_failure()

  def close(self) -> None:
    """Flushes, stops the thread and closes the file; EventsFailed if a write failed."""
    if self._file is None or self._file.closed:
      return
    self._pool.shutdown(wait=True)
    try:
      self._file.close()  # a write that failed left bytes in the buffer: closing tries them again
    except OSError as error:
      self._error = self._error or error
    self._raise_failure()

  def _write(self, step: int, summaries: Callable[[], list[summary_pb2.Summary]]) -> None:
    """`summaries()` as one event at `step`, appended on the thread (built here: the caller may reuse its arrays)."""
    if self._file is None:
      return
    self._raise_failure()
    summary = summary_pb2.Summary(value=[value for one in summaries() for value in one.value])
    self._pool.submit(self._append, event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

  def _append(self, event: event_pb2.Event) -> None:
    """Frames `event` into the file and flushes it, unless a write failed already (on the thread)."""
    if self._error is not None:
      return
    try:
      self._records.write(event.SerializeToString())
      self._file.flush()
    except OSError as error:
      self._error = error

  def _raise_failure(self) -> None:
    if self._error is not None:
      raise EventsFailed(self.path, self._error)


def _image_pb(tag: str, pixels: np.ndarray) -> summary_pb2.Summary:
  """An image summary as `tf.summary.image` writes it; `pixels`: (N, H, W, C) or (H, W, C) uint8, C in 1, 3, 4."""
  from PIL import Image  # noqa: PLC0415 (inspection's pictures only)

  pixels = pixels[None] if pixels.ndim == 3 else pixels
  pngs = []
  for image in pixels.astype(np.uint8):
    buffer = io.BytesIO()
    Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(buffer, format="PNG")
    pngs.append(buffer.getvalue())
  height, width = pixels.shape[1:3]
  tensor = tensor_util.make_tensor_proto([str(width).encode(), str(height).encode(), *pngs], dtype=np.object_)
  summary = summary_pb2.Summary()
  summary.value.add(tag=tag, metadata=image_metadata.create_summary_metadata(display_name=None, description=None),
                    tensor=tensor)
  return summary


def load_events(path: str | pathlib.Path) -> Iterator[event_pb2.Event]:
  """One event file's events in order (a half-written last record ends it), by TensorBoard's own reader."""
  from tensorboard.compat.tensorflow_stub import errors  # noqa: PLC0415
  from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New  # noqa: PLC0415

  reader = PyRecordReader_New(str(path))
  while True:
    try:
      reader.GetNext()
    except (errors.OutOfRangeError, errors.DataLossError):  # the end, or a truncated last record
      return
    yield event_pb2.Event.FromString(reader.record())
