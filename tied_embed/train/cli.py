"""The training command line (`train.py`, `tied-embed-train`): flags, the console, and one line per failure.

  tied-embed-train --config configs/default.py --workdir runs/default [--config.train.learning_rate=0.05 ...]

A bad flag, config or value, or a busy workdir, is one line `error: ...` on stderr and exit status 2, before anything is
written or TFDS, Orbax and TensorBoard are imported. The run's result (RESULT_LINES) goes to stdout, progress and
diagnostics to stderr; kernels in use and the libraries' own logs only with --verbose."""

from __future__ import annotations

import difflib
import logging
import os
import re
import shlex
import signal
import sys
import warnings

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from tied_embed.util import (RunStopped, UsageError, first_line, is_utf8, printable, refuse_if_held, require,
                             require_path_fits, shown_path)

# TensorFlow is chatty should a library load it where a venv holds it (the project needs none).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Directory for checkpoints, TensorBoard events and the generated dataset.")
config_flags.DEFINE_config_file("config", None, "Training config file, e.g. configs/default.py.", lock_config=True)
flags.DEFINE_bool("verbose", False, "Also log every scalar and histogram, and the libraries' own log lines.")
flags.mark_flags_as_required(["config", "workdir"])


class _ConfigFileParser(flags.ArgumentParser):
  """Reads `--config` with `config_file.load_config_file` (a broken file is one UsageError); keeps the config."""

  loaded = None

  def parse(self, argument: str):
    from tied_embed.train.config_file import load_config_file  # noqa: PLC0415 (jax: after --help)

    self.loaded = load_config_file(argument)
    self.loaded.lock()  # an override of a field the file doesn't have is an error, not a new field
    return self.loaded

  def flag_type(self) -> str:
    return "config object"


FLAGS["config"].parser = _CONFIG_PARSER = _ConfigFileParser()


# The lines that are a run's result (its final losses, where its checkpoints are): on stdout, so that
# `train.py ... > result.txt` keeps them and the progress and diagnostics stay on the terminal (stderr).
RESULT_LINES = ("Step %d: eval loss ", "Checkpoints in %s ")


def is_result(record: logging.LogRecord) -> bool:
  """Whether a log record is one of the run's RESULT_LINES (by its message template)."""
  return isinstance(record.msg, str) and record.msg.startswith(RESULT_LINES)


def _not_result(record: logging.LogRecord) -> bool:
  return not is_result(record)


class ConsoleFormatter(logging.Formatter):
  """A log record as the console shows it: the message alone, `warning: ` or `error: ` before the others."""

  def format(self, record: logging.LogRecord) -> str:
    level, message = record.levelno, printable(record.getMessage(), keep="\n")  # a path's ESC is shown, not obeyed
    return ("error: " if level >= logging.ERROR else "warning: " if level >= logging.WARNING else "") + message


_RESULTS = logging.StreamHandler(sys.stdout)  # RESULT_LINES, in the console's format
_RESULTS.setFormatter(ConsoleFormatter())
_RESULTS.addFilter(is_result)


def unknown_override(config, argv: list[str]) -> str:
  """The first `--config.<path>=...` in `argv` whose path is not a field of `config`: → its one-line error."""
  from tied_embed.train.config import known_fields  # noqa: PLC0415

  for arg in (arg for arg in argv[1:] if arg.startswith("--config.")):
    path, node = arg.split("=", 1)[0].removeprefix("--config."), config
    for key in path.split("."):
      if not hasattr(node, "keys") or key not in node:
        guess = difflib.get_close_matches(path, known_fields(), n=1)
        return f"{path} is not a config field" + (f"; did you mean {guess[0]}?" if guess else "")
      node = node[key]
  return "a --config.<field> override names no config field"


def _command(argv0: str) -> str:
  """How to start this command again as pasted: '.venv/bin/python train.py' for a script, else the path given."""
  if argv0.endswith(".py"):
    return f"{shown_path(sys.executable)} {shlex.quote(argv0)}"
  return shown_path(argv0) if os.sep in argv0 else shlex.quote(argv0)


def usage(program: str) -> str:
  """The command line's own help: each of its flags in one line (their absl help strings) and an example."""
  rows = [
      ("--config FILE", FLAGS["config"].help + " FILE:ARG passes ARG to its get_config()."),
      ("--config.<field>=VALUE", "Sets one config field, e.g. --config.train.learning_rate=0.1 (docs/configs.md)."),
      ("--workdir DIR", FLAGS["workdir"].help), ("--verbose", FLAGS["verbose"].help),
  ]
  width = max(len(name) for name, _ in rows)
  return "\n".join([
      f"usage: {program} --config FILE --workdir DIR [--config.<field>=VALUE ...] [--verbose]", "",
      "Trains the config in the workdir; rerunning the same command resumes from its newest checkpoint.", "",
      *(f"  {name:<{width}}  {text}" for name, text in rows), "",
      f"example: {program} --config configs/smoke.py --workdir runs/smoke --config.train.num_steps=20",
  ])


# absl's words for a --config.<field>=<value> it could not convert to the field's type
_UNPARSED_OVERRIDE = re.compile(r"flag --config\.([A-Za-z0-9_.]+)=(.*?): ")


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with every error one line; --help (-h, --helpshort) prints `usage`, before the config is read."""
  if any(arg in ("-h", "-?", "--help", "--helpshort") for arg in argv[1:]):
    print(usage(_command(argv[0])))
    sys.exit(0)
  if "--helpfull" in argv[1:]:  # the command's help, then every flag absl knows; absl's own would exit 1
    print(usage(_command(argv[0])), "", "Every flag, the libraries' included:", FLAGS.get_help(), sep="\n")
    sys.exit(0)
  if "--helpxml" in argv[1:]:  # every flag as gflags XML; absl's own would exit 1
    FLAGS.write_help_in_xml_format(sys.stdout)
    sys.exit(0)
  try:
    return FLAGS(argv)
  except KeyboardInterrupt:  # raised by the config file's own code: a Ctrl-C here ends in _stop_during_start_up
    config = next((arg.removeprefix("--config=") for arg in argv[1:] if arg.startswith("--config=")), None)
    if config is None and "--config" in argv[1:-1]:
      config = argv[argv.index("--config") + 1]
    print(f"error: --config={config!r}: interrupted (KeyboardInterrupt) while it was read; nothing was written",
          file=sys.stderr)
    sys.exit(128 + signal.SIGINT)
  except UsageError as error:
    _usage_error(str(error))
  except flags.Error as error:
    unparsed = _UNPARSED_OVERRIDE.match(str(error))
    if unparsed and _CONFIG_PARSER.loaded is not None:  # 'abc' for a number: the field's own message
      from tied_embed.train.config_file import unparsed_override  # noqa: PLC0415

      path = unparsed.group(1)
      given = [arg.split("=", 1)[1] for arg in argv[1:] if arg.startswith(f"--config.{path}=")]
      _usage_error(str(unparsed_override(_CONFIG_PARSER.loaded, path, given[-1] if given else unparsed.group(2))))
    _usage_error(str(error).replace("\n", " "))
  except (AttributeError, KeyError):  # config_flags' way of saying a --config.<path> doesn't exist
    _usage_error(unknown_override(_CONFIG_PARSER.loaded, argv))


def _usage_error(message: str) -> None:
  print(f"error: {printable(message)}", file=sys.stderr)
  sys.exit(2)


def _exit_now(status: int) -> None:
  """Flushes the console and ends the process at once (`os._exit`: an exception raised in a signal handler can land
  inside a library callback that swallows it, and the interpreter's shutdown can wait on or crash in its threads)."""
  sys.stderr.flush()
  sys.stdout.flush()
  os._exit(status)


def _stop_during_start_up(signum: int, frame: object) -> None:
  """Ctrl-C or SIGTERM before training's own handlers: nothing is written yet, so end at once."""
  print(f"error: stopped by {signal.Signals(signum).name} during start-up; nothing was written", file=sys.stderr)
  _exit_now(128 + signum)


def _completed() -> None:
  """Everything is written: from here on a Ctrl-C or SIGTERM ends the command at once with 0."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, lambda signum, frame: _exit_now(0))


def _main(argv: list[str]) -> None:
  # The project's log lines in its own format; the libraries' (through absl's logger, and JAX's) only with --verbose:
  # they report failures by raising, which is printed as one line below.
  handler = absl_logging.get_absl_handler()
  handler.setFormatter(ConsoleFormatter())
  handler.addFilter(_not_result)  # the same function object: added once however often this runs
  logging.getLogger("tied_embed").addHandler(_RESULTS)
  logging.getLogger("tied_embed").setLevel(logging.INFO)
  # Which optional C++ kernels the step runs on: the step is the same without them, so only --verbose says.
  logging.getLogger("tied_embed.fast").setLevel(logging.INFO if FLAGS.verbose else logging.WARNING)
  logging.getLogger("absl").setLevel(logging.INFO if FLAGS.verbose else logging.CRITICAL)
  logging.getLogger("jax").setLevel(logging.INFO if FLAGS.verbose else logging.WARNING)
  if len(argv) > 1:
    _usage_error(f"unexpected arguments {argv[1:]}: use --config and --workdir")
  import jax  # noqa: PLC0415 (loaded with tied_embed already)

  from tied_embed.train import config as config_lib  # noqa: PLC0415
  from tied_embed.train import mesh as mesh_lib

  try:
    require(bool(FLAGS.workdir.strip()), "--workdir", FLAGS.workdir, "a directory path")
    require(is_utf8(FLAGS.workdir), "--workdir", FLAGS.workdir, "a path that is valid UTF-8 (array_record, which "
            "stores the dataset, takes no other)")
    require_path_fits("--workdir", FLAGS.workdir)
    mesh_lib.initialize_from_environment()  # several processes (hosts) only; before anything touches a device
    if jax.process_index() == 0:  # the process that will hold the lock
      refuse_if_held(FLAGS.workdir, f"--workdir={FLAGS.workdir!r}")
    config_lib.validate(FLAGS.config)
    from tied_embed.fast import compilation  # noqa: PLC0415

    compilation.cache_compiles()
    from tied_embed.train.trainer import train_and_evaluate  # noqa: PLC0415 (TFDS, Orbax, TensorBoard: seconds)

    train_and_evaluate(FLAGS.config, FLAGS.workdir, verbose=FLAGS.verbose, checked=True, on_complete=_completed)
  except UsageError as error:
    _usage_error(str(error))
  except RunStopped as stop:  # a signal, a non-finite step, a failed write: one line and the run's exit status
    print(f"error: {printable(str(stop))}", file=sys.stderr)
    from tied_embed.train.signals import Preempted  # noqa: PLC0415 (loaded by the trainer already)

    if isinstance(stop, Preempted) and stop.step is None:  # set-up: a compile or data thread may still run
      _exit_now(stop.exit_status)
    sys.exit(stop.exit_status)
  except Exception as error:  # noqa: BLE001 (anything else, e.g. a library's own failure: still one line)
    if FLAGS.verbose:
      raise
    print(f"error: {printable(first_line(error))} (rerun with --verbose for the traceback)", file=sys.stderr)
    sys.exit(1)


def main() -> None:
  """`tied-embed-train` and `python train.py`: trains the config in the workdir (resuming), see the module doc."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _stop_during_start_up)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # train.py holds them while importing
  # A failed checkpoint write leaves Orbax's coroutines unawaited; Python would list each after the one-line error.
  warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
  app.run(_main, flags_parser=parse_flags)
