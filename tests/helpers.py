"""What several test modules share: configs with one field changed, event-file readers, subprocess environments,
and the session's compilation cache."""

from __future__ import annotations

import os
import pathlib
import socket
import threading
import time

import numpy as np

# Values config validation must refuse, each with the field path its message must name.
BAD_VALUES = [
    ("model.vocab_size", 0),
    ("model.vocab_size", -3),
    ("model.d_model", 0),
    ("model.dtype", "float16"),
    ("train.batch_size", 0),
    ("train.num_steps", -1),
    ("train.learning_rate", 0.0),
    ("train.learning_rate", float("nan")),
    ("train.learning_rate", float("inf")),
    ("train.log_every", 0),
    ("train.eval_every", -5),
    ("train.checkpoint_every", 0),
    ("train.optimizer", "adagrad"),
    ("data.source", "wikipedia"),
    ("mesh.data", 2),  # one CPU device in the test process
    ("mesh.model", 0),
]

# Scalars a sharded run must log like the 1-device run: to float32 rounding, and the counts exactly.
METRICS = ("train/loss", "eval/loss", "grad/lookup_norm", "grad/projection_norm", "grad/total_norm", "grad/cosine",
           "eval/loss_rare_inputs", "eval/loss_middle_inputs", "eval/loss_frequent_inputs")
COUNTS = ("grad/rows_looked_up", "grad/rows_projection_only")


def make_config(**data_fields):
  """A small planted-bigram config (V=16, D=4, 5000 train pairs) with the given data.* fields changed."""
  import ml_collections  # noqa: PLC0415

  fields = dict(source="planted", text_path="", data_dir="", task_seed=3, task_d_model=4, train_fraction=1.0,
                num_train_pairs=5000, num_eval_pairs=3000, logit_scale=6.0, zipf_exponent=1.0)
  fields.update(data_fields)
  vocab_size = 256 if fields["source"] == "text" else 16
  return ml_collections.ConfigDict(
      {"seed": 0, "model": {"vocab_size": vocab_size, "d_model": 4, "tied": True}, "data": fields})


def smoke_with(path: str, value):
  """configs/smoke.py with the field at dotted `path` set to `value` (any type)."""
  from configs import smoke  # noqa: PLC0415
  from tied_embed.train import config_file  # noqa: PLC0415

  config = smoke.get_config()
  config_file.set_unchecked(config, path, value)
  return config


HIDDEN_STEPS = 20  # tests/core/test_hidden_map.py and tests/sharded_run.py train it this long


def hidden_smoke_config():
  """configs/smoke.py with a hidden map W and its penalty, for HIDDEN_STEPS steps."""
  config = smoke_with("model.hidden", "linear")
  config.model.hidden_l2 = 0.01
  config.train.num_steps = HIDDEN_STEPS
  config.train.checkpoint_every = 10
  config.train.log_every = 10
  config.train.eval_every = 10
  return config


def event_series(path: str | pathlib.Path) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} from one event file, scalars and histograms (their sum), in the order written.

  Reads with TensorBoard's own loader, independently of `tied_embed.train.metrics`, which it also checks.
  """
  from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: PLC0415
  from tensorboard.util.tensor_util import make_ndarray  # noqa: PLC0415

  series: dict[str, dict[int, float]] = {}
  for event in EventFileLoader(str(path)).Load():
    for value in event.summary.value:
      if value.HasField("tensor"):
        series.setdefault(value.tag, {})[event.step] = float(np.sum(make_ndarray(value.tensor)))
  return series


def all_series(workdir: pathlib.Path) -> dict[str, dict[int, float]]:
  """`event_series` of every event file in `workdir`, merged in file-name (creation) order."""
  merged: dict[str, dict[int, float]] = {}
  for path in sorted(workdir.glob("events.out.tfevents.*")):
    for tag, by_step in event_series(path).items():
      merged.setdefault(tag, {}).update(by_step)
  return merged


def compilation_cache_options(directory: str | pathlib.Path) -> dict[str, object]:
  """JAX's persistent compilation cache in `directory`: {jax.config option: value}.

  The suite trains the same tiny configs in dozens of processes and in-process runs, and each fresh jit compiles
  its programs again (about 5 s of CPU per smoke run on 2 cores, against about 1 s with its programs loaded from
  the cache). Only compiles of 0.3 s or more are written, the train steps and evals: writing every one of the
  hundreds of tiny programs the unit tests compile once costs more than it saves. A size limit turns on the
  cache's file lock, so a process never reads an entry another is still writing (two hosts of one run).
  """
  return {
      "jax_compilation_cache_dir": str(directory),
      "jax_persistent_cache_min_compile_time_secs": 0.3,
      "jax_persistent_cache_min_entry_size_bytes": -1,
      "jax_compilation_cache_max_size": 8 << 30,
  }


def compilation_cache_env(directory: str | pathlib.Path) -> dict[str, str]:
  """`compilation_cache_options` as the environment variables a starting JAX reads them from."""
  return {option.upper(): str(value) for option, value in compilation_cache_options(directory).items()}


# How the suite's own compiles run (conftest.py puts these in XLA_FLAGS before JAX starts). The suite compiles a
# few hundred tiny programs and runs each for a few steps, so compiling is most of its CPU time: LLVM at -O0 saves
# about a fifth of it, XLA:CPU's elemental emitters in place of its MLIR fusion emitters about a third of the rest.
# The graph passes (fusion, layout, sharding, the collectives) are the same and the arithmetic is float32 either way,
# so the tolerances against float64 and every bit-for-bit comparison within the suite hold; elementwise functions
# (exp, log) may round differently in the last place than in a user's run. The users' shape on 8 devices
# (tests/train/test_sharding.py) compiles with XLA's defaults, as `make train` does.
SUITE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def with_suite_xla_flags(flags: str) -> str:
  """`flags` (XLA_FLAGS) with the suite's `SUITE_XLA_FLAGS` in front, each once."""
  given = [flag for flag in flags.split() if flag not in SUITE_XLA_FLAGS]
  return " ".join([*SUITE_XLA_FLAGS, *given])


def subprocess_env(*, optimized: bool = False, **extra: str) -> dict[str, str]:
  """This environment for a subprocess, minus any JAX_* settings (e.g. a JAX_NUM_PROCESSES of the caller's) other
  than the session's compilation cache (conftest.py puts it in os.environ). An XLA_FLAGS in `extra` replaces this
  process's, after the suite's; `optimized` drops the suite's, so the subprocess compiles at XLA's default level, as
  a user's run does."""
  cache = compilation_cache_env("")
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") or k in cache}
  flags = " ".join(flag for flag in extra.pop("XLA_FLAGS", env.get("XLA_FLAGS", "")).split()
                   if flag not in SUITE_XLA_FLAGS)
  flags = flags if optimized else with_suite_xla_flags(flags)
  env = {k: v for k, v in env.items() if k != "XLA_FLAGS"} | ({"XLA_FLAGS": flags} if flags else {})
  return env | {"TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"} | extra  # simulated devices are CPU ones


def free_port() -> int:
  with socket.socket() as probe:
    probe.bind(("localhost", 0))
    return probe.getsockname()[1]


def assert_close(got, want) -> None:
  """float32 results of different meshes: equal to rounding (atol for the few entries near zero)."""
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def hand_path_gradients(table_in, table_out, ids, next_ids) -> tuple[np.ndarray, np.ndarray]:
  """Mean cross-entropy of softmax(E_in[ids] @ E_out.T) against next_ids, differentiated by hand in float64.

  (V, D), (V, D), (T,), (T,) → (lookup-path gradient (V, D), projection-path gradient (V, D)); pass the same table
  twice for a tied model.
  """
  table_in, table_out = np.asarray(table_in, np.float64), np.asarray(table_out, np.float64)
  x = table_in[ids]
  logits = x @ table_out.T
  probs = np.exp(logits - logits.max(axis=1, keepdims=True))
  probs /= probs.sum(axis=1, keepdims=True)
  dlogits = probs.copy()
  dlogits[np.arange(len(ids)), next_ids] -= 1.0
  dlogits /= len(ids)
  lookup = np.zeros_like(table_in)
  np.add.at(lookup, ids, dlogits @ table_out)
  return lookup, dlogits.T @ x

def small_problem(seed=0, vocab_size=10, d_model=4, tokens=12):
  """A float32 table (V, D) and a batch: ids (T,) with repeats, the last row among them, and next_ids (T,)."""
  rng = np.random.default_rng(seed)
  table = rng.standard_normal((vocab_size, d_model)).astype(np.float32)
  ids = rng.integers(0, vocab_size, tokens).astype(np.int32)
  ids[-1] = vocab_size - 1  # the last row is looked up too
  return table, ids, rng.integers(0, vocab_size, tokens).astype(np.int32)


def hand_tied_loss(table, ids, next_ids) -> float:
  """Mean softmax cross-entropy of table[ids] @ table.T in float64."""
  table = np.asarray(table, np.float64)
  logits = table[ids] @ table.T
  top = logits.max(axis=1, keepdims=True)
  log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
  return float(np.mean(log_z - logits[np.arange(len(ids)), next_ids]))


def random_problem(num_tokens: int, vocab_size: int, d_model: int, seed: int = 0, scale: float = 1.0):
  """Standard-normal hidden rows (times `scale`) x (T, D) and table (V, D), float32, and targets (T,) int32."""
  rng = np.random.default_rng(seed)
  x = (scale * rng.standard_normal((num_tokens, d_model))).astype(np.float32)
  table = rng.standard_normal((vocab_size, d_model)).astype(np.float32)
  targets = rng.integers(0, vocab_size, num_tokens).astype(np.int32)
  return x, table, targets


def numpy_loss_and_grads(x: np.ndarray, table: np.ndarray, targets: np.ndarray):
  """Float64 reference from the closed form: p = softmax(x Eᵀ), dx = (pE − E[y])/T, dE = (pᵀx − Yᵀx)/T."""
  x, table = x.astype(np.float64), table.astype(np.float64)
  num_tokens = x.shape[0]
  logits = x @ table.T
  top = logits.max(axis=1, keepdims=True)
  lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
  loss = np.mean(lse - logits[np.arange(num_tokens), targets])
  probs = np.exp(logits - lse[:, None])
  one_hot = np.eye(table.shape[0])[targets]
  return loss, (probs - one_hot) @ table / num_tokens, (probs - one_hot).T @ x / num_tokens


def model_with_tables(lookup_table, projection_table=None):
  """A TiedEmbed whose table is `lookup_table`, or, with `projection_table`, an UntiedEmbed holding both."""
  import jax.numpy as jnp  # noqa: PLC0415
  from flax import nnx  # noqa: PLC0415

  from tied_embed import TiedEmbed, UntiedEmbed  # noqa: PLC0415

  vocab_size, d_model = lookup_table.shape
  if projection_table is None:
    model = TiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(0))
    model.embedding[...] = jnp.asarray(lookup_table, jnp.float32)
    return model
  model = UntiedEmbed(vocab_size, d_model, rngs=nnx.Rngs(0))
  model.input_embedding[...] = jnp.asarray(lookup_table, jnp.float32)
  model.output_embedding[...] = jnp.asarray(projection_table, jnp.float32)
  return model


def loss_and_path_gradients(table_in, table_out, ids, loss_fn):
  """The sparse path split of `loss_fn(x (T, D), table (V, D))` over tables read as E_in[ids] and E_out: dense.

  The same object twice is a tied table. → (loss, lookup-path gradient (V, D), projection-path gradient (V, D)).
  """
  import jax.numpy as jnp  # noqa: PLC0415

  from tied_embed.fast import sparse_paths  # noqa: PLC0415

  model = model_with_tables(table_in, None if table_out is table_in else table_out)
  paths = sparse_paths.path_gradients(model, jnp.asarray(ids), None, lambda x, table, _: loss_fn(x, table))
  return paths.loss, lookup_dense(paths), paths.projection


def lookup_dense(paths):
  """A sparse_paths.PathGradients' lookup-path gradient as one (V, D) array: its rows added into zeros."""
  import jax.numpy as jnp  # noqa: PLC0415

  return paths.add_lookup(jnp.zeros_like(paths.projection))


def hand_hidden_gradients(table_in, table_out, kernel, ids, next_ids, l2=0.0):
  """softmax(E_in[ids] · W · E_outᵀ) cross-entropy (+ l2·‖W − I‖²) differentiated by hand in float64.

  → (loss, lookup-path gradient (V, D), projection-path gradient (V, D), dW (D, D)).
  """
  table_in, table_out = np.asarray(table_in, np.float64), np.asarray(table_out, np.float64)
  kernel = np.asarray(kernel, np.float64)
  rows = table_in[ids]
  hidden = rows @ kernel
  logits = hidden @ table_out.T
  logits = logits - logits.max(axis=1, keepdims=True)
  log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  eye = np.eye(kernel.shape[0])
  loss = -np.mean(log_probs[np.arange(len(ids)), next_ids]) + l2 * np.sum((kernel - eye) ** 2)
  dlogits = np.exp(log_probs)
  dlogits[np.arange(len(ids)), next_ids] -= 1.0
  dlogits /= len(ids)
  dhidden = dlogits @ table_out
  lookup = np.zeros_like(table_in)
  np.add.at(lookup, ids, dhidden @ kernel.T)
  return loss, lookup, dlogits.T @ hidden, rows.T @ dhidden + 2 * l2 * (kernel - eye)


def markdown_table(text: str, header: str) -> dict[str, list[str]]:
  """{first cell: [the other cells]} of the markdown table in `text` whose header row starts with `header`."""
  lines = text.splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith(header))
  rows = {}
  for line in lines[start + 2:]:
    if not line.startswith("|"):
      break
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    rows[cells[0]] = cells[1:]
  return rows


# Student's t two-sided 95% quantiles from a printed table (df → t_0.975), independent of scipy.
T_TABLE = {1: 12.7062047, 2: 4.30265273, 3: 3.18244631, 4: 2.77644511, 5: 2.57058184, 6: 2.44691185,
           7: 2.36462425, 8: 2.30600414, 9: 2.26215716, 10: 2.22813885, 11: 2.20098516, 12: 2.17881283,
           13: 2.16036866, 14: 2.14478669}


def by_hand_interval(differences: dict[tuple[int, int], float]) -> tuple[float, float, float]:
  """(mean, low, high) of paired differences keyed by (seed, draw), in NumPy float64 and the printed t table: on one
  draw or one seed, the t-interval of them all; on r draws × c seeds (every seed on every draw) the crossed design's,
  its variance (MS_draw + MS_seed) / (r·c) with Satterthwaite's degrees of freedom rounded down; on an incomplete grid
  their mean ± the half-width of the t-interval of the draws' means."""
  seeds, draws = sorted({s for s, _ in differences}), sorted({d for _, d in differences})
  if len(draws) == 1 or len(seeds) == 1 or len(differences) != len(seeds) * len(draws):
    groups = [[differences[key]] for key in sorted(differences)] if len(draws) == 1 else [
        [value for (_, d), value in differences.items() if d == draw] for draw in draws]
    values = np.array([np.mean(group) for group in groups], np.float64)
    half = T_TABLE[len(values) - 1] * values.std(ddof=1) / np.sqrt(len(values))
    mean = float(np.mean(list(differences.values())))  # all the differences' mean; the draws' means give the spread
    return mean, mean - half, mean + half
  grid = np.array([[differences[s, d] for s in seeds] for d in draws], np.float64)
  r, c = grid.shape
  grand = grid.mean()
  ms_draw = c * ((grid.mean(axis=1) - grand) ** 2).sum() / (r - 1)
  ms_seed = r * ((grid.mean(axis=0) - grand) ** 2).sum() / (c - 1)
  if ms_draw + ms_seed == 0:  # every difference the same: the interval is the point
    return float(grand), float(grand), float(grand)
  dof = int((ms_draw + ms_seed) ** 2 // (ms_draw ** 2 / (r - 1) + ms_seed ** 2 / (c - 1)))
  half = T_TABLE[dof] * np.sqrt((ms_draw + ms_seed) / (r * c))
  return float(grand), float(grand - half), float(grand + half)


def within(seconds: float, call, *args, **kwargs):
  """`call(*args, **kwargs)`'s result (or its exception, raised here), failing the test if it takes over `seconds`."""
  outcome = {}

  def run() -> None:
    try:
      outcome["value"] = call(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 (passed on to the test below)
      outcome["error"] = error

  thread = threading.Thread(target=run, daemon=True)  # a thread stuck opening a FIFO must not keep pytest alive
  start = time.monotonic()
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f"{call.__name__} still running after {seconds} s (waiting on a FIFO?)"
  if "error" in outcome:
    raise outcome["error"]
  return outcome["value"], time.monotonic() - start


def results_script(monkeypatch, tmp_path, **overrides):
  """scripts/results.py loaded as a module, its RESULTS_DIR under `tmp_path` and each of `overrides` (ROOT, RUNS, ...)
  patched in, so a test reads and writes nothing of the repository's own results. It is loaded under its dotted name,
  the one `make mutate PACKAGE=scripts` switches its mutants by."""
  import importlib.util  # noqa: PLC0415

  root = pathlib.Path(__file__).resolve().parents[1]
  spec = importlib.util.spec_from_file_location("scripts.results", root / "scripts" / "results.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.setattr(module, "RESULTS_DIR", tmp_path / "results")
  for name, value in overrides.items():
    monkeypatch.setattr(module, name, value)
  return module
