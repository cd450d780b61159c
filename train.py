"""Trains the tied (or untied) bigram embedding a config describes.

  python train.py --config configs/default.py --workdir runs/default [--config.train.learning_rate=0.05 ...]

Rerunning the same command on a workdir with checkpoints resumes from the latest one. A bad flag or config value
is one line `error: ...` on stderr and exit status 2, before anything is computed or written.
"""

import os
import signal
import sys
import warnings

# TensorFlow (imported by TFDS and the TensorBoard writer) is chatty otherwise, even before a usage error.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def _stop_during_start_up(signum: int, frame: object) -> None:
  """Ctrl-C or SIGTERM before training has set up its own handlers: nothing is written yet, so end at once.

  `os._exit`, not an exception: an exception raised here can land inside a library callback that swallows it.
  """
  print(f"error: stopped by {signal.Signals(signum).name} during start-up; nothing was written", file=sys.stderr)
  os._exit(128 + signum)


for _signum in (signal.SIGINT, signal.SIGTERM):
  signal.signal(_signum, _stop_during_start_up)
# A checkpoint write that failed leaves Orbax's pending coroutines unawaited; Python would list each at exit,
# after the one-line error that already says what happened.
warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Directory for checkpoints, TensorBoard events and the generated dataset.")
config_flags.DEFINE_config_file("config", None, "Training config file, e.g. configs/default.py.", lock_config=True)
flags.DEFINE_bool("verbose", False, "Also log every scalar and histogram (they always go to TensorBoard).")
flags.mark_flags_as_required(["config", "workdir"])


def _usage_error(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def _config_file_arg(argv: list[str]) -> str | None:
  """The value of the last `--config` (or `-config`) flag in argv, as absl reads it; None if there is none."""
  path = None
  for i, arg in enumerate(argv[1:], start=1):
    if arg == "--":
      break
    name, equals, value = arg.lstrip("-").partition("=")
    if arg.startswith("-") and name == "config":
      path = value if equals else (argv[i + 1] if i + 1 < len(argv) else None)
  return path


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with its errors (unknown flag, unknown config key, bad value) as one line and exit 2.

  The config file is run once on its own first: config_flags reports a broken file (missing, raising, without
  `get_config`, returning something else) as a traceback, or not until the config is first read.
  """
  config_path = _config_file_arg(argv)
  if config_path is not None:
    from tied_embed.run.config_schema import load_config_file  # noqa: PLC0415
    from tied_embed.run.errors import UsageError  # noqa: PLC0415

    try:
      load_config_file(config_path)
    except UsageError as error:
      _usage_error(str(error))
  try:
    return FLAGS(argv)
  except flags.Error as error:
    _usage_error(str(error).replace("\n", " "))
  except (AttributeError, KeyError) as error:  # config_flags' way of saying a --config.<path> doesn't exist
    detail = error
    while isinstance(detail, BaseException) and detail.args:
      detail = detail.args[0]
    key, _, hint = str(detail).partition("\n")  # "'learnig_rate'" and, if any, 'Did you mean ...?'
    key = key.strip("'")
    paths = [arg.split("=")[0].removeprefix("--") for arg in argv[1:] if arg.startswith("--config.")]
    path = next((p for p in paths if key in p.split(".")), key)
    _usage_error(f"{path} is not a config field. {hint}".strip())


def _keep_log_record(record: logging.logging.LogRecord) -> bool:
  """Keeps the log to progress and metrics.

  Orbax narrates every save at INFO; CLU's background writer logs a traceback when a write fails (the failure
  comes back when the writer is closed and is reported as one line then); TFDS warns on every run that the
  dataset uses a custom configuration (they all do: the builder config spells out the task); JAX says at INFO
  which accelerator backends it did not find, a line that would otherwise come before even a one-line usage
  error.
  """
  if "/orbax/" in record.pathname:
    return False
  if "/clu/asynclib.py" in record.pathname:  # a failed metrics write: reported once, as one line, at the end
    return False
  if "/tensorflow_datasets/" in record.pathname and record.levelno < logging.logging.ERROR:
    return False
  return not (record.name == "jax._src.xla_bridge" and record.levelno < logging.logging.WARNING)


def main(argv: list[str]) -> None:
  logging.get_absl_handler().addFilter(_keep_log_record)
  if len(argv) > 1:
    _usage_error(f"unexpected arguments {argv[1:]}: use --config and --workdir")
  # Imported after the flags, so --help stays fast; the trainer (TensorFlow, CLU, Orbax) only once the config is
  # known to be good, so a bad value is reported in well under a second.
  from tied_embed.run.config_validation import validate_config  # noqa: PLC0415
  from tied_embed.run.errors import RunStopped, UsageError, first_line, require  # noqa: PLC0415
  from tied_embed.run.parallel import initialize_from_environment  # noqa: PLC0415

  try:
    require(bool(FLAGS.workdir.strip()), "--workdir", FLAGS.workdir, "a directory path")
    initialize_from_environment()  # several processes (hosts) only; before anything touches a device
    validate_config(FLAGS.config)
    from tied_embed.trainer import train_and_evaluate  # noqa: PLC0415

    train_and_evaluate(FLAGS.config, FLAGS.workdir, verbose=FLAGS.verbose)
  except UsageError as error:
    _usage_error(str(error))
  except RunStopped as stop:  # a signal, a non-finite step, a failed write: one line and the run's exit status
    print(f"error: {stop}", file=sys.stderr)
    sys.exit(stop.exit_status)
  except Exception as error:  # noqa: BLE001 (anything else, e.g. a full disk under TensorFlow: still one line)
    if FLAGS.verbose:
      raise
    print(f"error: {first_line(error)} (rerun with --verbose for the traceback)", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
