"""tfds: bigrams of a TFDS text dataset (e.g. tiny_shakespeare, lm1b), read from TFDS's own prepared copy.

`data.tfds_name` names the dataset ('name/config', 'name:1.0.0'), `data.tfds_train_split` and `data.tfds_eval_split`
its splits (e.g. 'train[:90%]'), `data.text_feature` the text field, `data.tfds_data_dir` where TFDS keeps it ('' =
TFDS's default). Nothing is downloaded: a dataset without a prepared copy is one line naming the command that
prepares it. Examples are read in order, joined by newlines; stray invalid UTF-8 becomes U+FFFD.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any

from tied_embed.data import base
from tied_embed.data.text import tokenizer as tokenizer_lib
from tied_embed.data.text.tokenized import TextSource
from tied_embed.util import UsageError, require

_FIELDS = ("tfds_name", "tfds_train_split", "tfds_eval_split", "text_feature", "tfds_data_dir")


def _builder(name: str, data_dir: str) -> Any:
  """The TFDS builder of `name`; UsageError on data.tfds_name when TFDS has no such dataset."""
  import tensorflow_datasets as tfds  # noqa: PLC0415 (TensorFlow only for this source)

  try:
    return tfds.builder(name, data_dir=os.path.expanduser(data_dir) or None)
  except tfds.core.registered.DatasetNotFoundError:
    raise UsageError.bad_value("data.tfds_name", name, "the name of a TFDS dataset, e.g. 'tiny_shakespeare'"
                               " (see `tfds.list_builders()`)") from None
  except Exception as e:  # noqa: BLE001 (a bad config or version name fails in several types)
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise UsageError.bad_value("data.tfds_name", name,
                               f"a TFDS dataset, config and version that exist ({first})") from None


class Tfds(TextSource):
  name = "tfds"
  fields = (*_FIELDS, "tokenizer")
  sizes_exact = False  # TFDS records serialized sizes, not the text's

  def validate_text(self, config: Any) -> None:
    data = config.data
    for field in _FIELDS:
      empty_ok = field == "tfds_data_dir"
      require(isinstance(data.get(field), str) and (empty_ok or data.get(field)), f"data.{field}", data.get(field),
              "a path ('' = TFDS's default data_dir)" if empty_ok else "a non-empty string")
    builder = _builder(data.tfds_name, data.tfds_data_dir)
    text_features = sorted(key for key, value in builder.info.features.items() if type(value).__name__ == "Text")
    require(data.text_feature in text_features, "data.text_feature", data.text_feature,
            f"a text feature of {data.tfds_name}: one of {text_features}")
    known = list(builder.info.splits)
    for field in ("tfds_train_split", "tfds_eval_split"):
      split = data.get(field)
      if known:  # known once prepared (or from TFDS's metadata)
        try:
          builder.info.splits[split]
        except (KeyError, ValueError):
          raise UsageError.bad_value(f"data.{field}", split, f"a split of {data.tfds_name}: one of {known}") from None
      try:
        builder.as_dataset(split=split)
      except AssertionError:  # TFDS's way of saying the data is not there
        raise UsageError.bad_value(
            "data.tfds_name", data.tfds_name,
            f"a dataset prepared in {builder.data_dir_root}: prepare it on a machine with a network with"
            f" `tfds build {data.tfds_name} --data_dir={builder.data_dir_root}` and copy that directory here,"
            f" or set data.tfds_data_dir to where it is") from None
      except ValueError as e:
        raise UsageError.bad_value(f"data.{field}", split, f"a split of {data.tfds_name} ({e})") from None

  def text_settings(self, config: Any, utf8: bool) -> dict[str, Any]:
    del utf8  # TFDS text is UTF-8
    data = config.data
    builder = _builder(data.tfds_name, data.tfds_data_dir)
    spec = f"{data.tfds_train_split}|{data.tfds_eval_split}|{data.text_feature}"
    content = (f"{re.sub('[^A-Za-z0-9]+', '_', builder.info.full_name)}-"
               f"{hashlib.sha256(spec.encode()).hexdigest()[:8]}")
    return {"tfds_name": data.tfds_name, "tfds_data_dir": data.tfds_data_dir, "text_feature": data.text_feature,
            "splits": {"train": data.tfds_train_split, "validation": data.tfds_eval_split}, "content": content,
            "num_bytes": {split: _num_bytes(builder, name) for split, name in
                          (("train", data.tfds_train_split), ("validation", data.tfds_eval_split))}}

  def corpus_name(self, settings: dict[str, Any]) -> str:
    return f"data.tfds_name={settings['tfds_name']!r}"

  def _texts(self, settings: dict[str, Any], split: str) -> Iterator[str]:
    """The text of each example of `split`, in the dataset's order."""
    import tensorflow_datasets as tfds  # noqa: PLC0415

    builder = _builder(settings["tfds_name"], settings["tfds_data_dir"])
    for example in tfds.as_numpy(builder.as_dataset(split=settings["splits"][split], shuffle_files=False)):
      value = example[settings["text_feature"]]
      yield value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)

  def split_bytes(self, settings: dict[str, Any], split: str) -> Iterator[bytes]:
    for index, text in enumerate(self._texts(settings, split)):
      yield (b"\n" if index else b"") + text.encode()

  def split_lines(self, settings: dict[str, Any], split: str) -> Iterator[str]:
    for text in self._texts(settings, split):
      yield from text.split("\n")

  def sample_lines(self, settings: dict[str, Any]) -> Iterator[str]:
    """The first `tokenizer.SAMPLE_BYTES` of the train split's text (TFDS splits are usually shuffled already)."""
    budget = tokenizer_lib.SAMPLE_BYTES
    for line in self.split_lines(settings, "train"):
      if budget <= 0:
        return
      budget -= len(line.encode()) + 1
      yield line


def _num_bytes(builder: Any, split: str) -> int:
  """The split's size as TFDS recorded it (serialized, so above the text's); 0 when unknown."""
  try:
    return int(builder.info.splits[split].num_bytes)
  except (KeyError, ValueError, TypeError, AttributeError):
    return 0


base.register(Tfds())
