"""The models: one (V, D) table read twice (tied) or two tables (untied), and what happens between the two uses.

`TiedEmbed`'s one table `embedding` is read by `embed` (the lookup, `E[ids]`) and `attend` (the projection, `x @ E.T`);
`UntiedEmbed` is the ablation with two tables. Between the uses a model may put a function of the looked-up rows:
`WithHiddenMap`'s (D, D) W (`E[ids] · W · Eᵀ`: W's antisymmetric part lets a tied model score (a, b) and (b, a)
differently), `WithSymmetricMap`'s S = (W + Wᵀ)/2 (the control without it), or a causal context mixer over a window,
`ContextMLP` or `ContextTransformer`. `WithOutputBias` adds a learned score b_j per next token (`h · Eᵀ + b`).

A model variant is one class answering two questions, all the step and the speed paths ask (core/paths.py):
`table_params()`, which (V, D) Params the lookup and the projection read (the same one when tied), and
`hidden(rows)`, the hidden vectors (..., D) from the looked-up rows (..., D). A model that adds to the scores also
gives `score_operands`, its logits as one product H · Bᵀ, which every loss of (hidden, table) scores unchanged.

Beside its class, a variant is declared once (`declare(Variant(...))`): the value of `model.<family>` that picks it,
how it wraps the model inside it, the model.* fields it reads with their defaults and bounds, and its own check of a
config. Config validation, the dead-value rule, the docs' field table and the tests read these declarations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

if TYPE_CHECKING:  # only for the annotations: the story imports no config machinery
  import ml_collections

# Logical axis names of a table's dimensions. `tied_embed.train.mesh.LOGICAL_AXIS_RULES` maps them to mesh axes;
# the optimizer's moments inherit them from the Param, so the whole train state is laid out from these annotations.
TABLE_AXES = ("vocab", "embed")

MLP_WIDTH = 4  # a context mixer's hidden layer is MLP_WIDTH · D wide


class Setting(NamedTuple):
  """A model.* config field a variant reads: `model.<name>`, its default (its type: int or float), its meaning, and
  the values allowed, low ≤ value ≤ high (or < high where `high_open`; high None: as large as the type holds)."""

  name: str
  default: int | float
  doc: str
  low: int | float = 0
  high: int | float | None = None
  high_open: bool = False


class Variant(NamedTuple):
  """One value of a model family, `model.<family> = name`: how it wraps the model built so far, the fields it reads.

  `build(inner, config, rngs)` → the model (`inner` itself for "none"); `check(config)` → None where the config fits
  the variant, else (field, value, what is allowed) for a one-line refusal."""

  family: str  # "context" or "hidden": the config field model.<family>
  name: str
  doc: str  # what the variant puts between the table's two uses
  build: Callable[[Any, Any, nnx.Rngs], Any]
  settings: tuple[Setting, ...] = ()
  check: Callable[[Any], tuple[str, Any, str] | None] | None = None
  saved_names: tuple[str, ...] = ()  # other names a saved config may give it (built from, never accepted anew)
  # memory(config) → [(what, bytes, the config fields it grows with)]: its own Params (with their gradient and two
  # Adam moments) and the activations a train step keeps for the backward pass, for the check before a run
  memory: Callable[[Any], list[tuple[str, int, tuple[str, ...]]]] | None = None


# The families in the order they wrap the tables (the context mixer reads the rows first, then the hidden map).
VARIANTS: dict[str, dict[str, Variant]] = {"context": {}, "hidden": {}}


def declare(variant: Variant) -> Variant:
  """Registers `variant` under model.<family> = name; its settings' names must not clash with another family's."""
  VARIANTS[variant.family][variant.name] = variant
  return variant


def setting(config: ml_collections.ConfigDict, name: str, default: Any) -> Any:
  """config.model.<name>, or `default` where a saved config predates the field."""
  return config.model.get(name, default)


def family_settings(family: str) -> dict[str, Setting]:
  """Every setting the variants of `family` read, by name, in declaration order (one Setting may serve several)."""
  return {setting.name: setting for variant in VARIANTS[family].values() for setting in variant.settings}


def table_param(table: jax.Array) -> nnx.Param:
  """A (V, D) table as an nnx.Param annotated with TABLE_AXES (applied on a mesh, not at creation)."""
  return nnx.Param(table, out_sharding=TABLE_AXES, eager_sharding=False)


def init_table(key: jax.Array, vocab_size: int, d_model: int) -> jax.Array:
  """One normal draw scaled by 1/sqrt(D): key → (V, D) float32 with entry variance 1/D.

  Under jit, XLA would fold the 1/sqrt(D) into `normal`'s own constant scale and change last bits; the
  optimization barrier keeps the jitted table bitwise equal to the literal eager `normal(...) / sqrt(D)`."""
  draw = jax.random.normal(key, (vocab_size, d_model), dtype=jnp.float32)
  return jax.lax.optimization_barrier(draw) / math.sqrt(d_model)


class LanguageModel(nnx.Module):
  """logits = attend(hidden(embed(ids))); subclasses give `table_params` and may override `hidden`, `penalty` (a
  regulariser), `hidden_stats` (logged scalars) and, for inspection, `scoring_tables` and `scores_in_words`."""

  def __call__(self, ids: jax.Array) -> jax.Array:
    """ids (B,) or (B, L) int → (..., V) float32 logits."""
    return self.attend(self.hidden(self.embed(ids)))

  def embed(self, ids: jax.Array) -> jax.Array:
    """Lookup: (...,) int → (..., D) float32, rows of the lookup table."""
    return self.table_params()[0][...][ids]

  def attend(self, x: jax.Array) -> jax.Array:
    """Projection: (..., D) → (..., V) raw scores against every row of the projection table."""
    return x @ self.table_params()[1][...].T

  def score_operands(self, hidden: jax.Array, projection_table: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(hidden (T, D), table (V, D)) → (H (T, D'), B (V, D')), logits = H · Bᵀ: here themselves (a bias widens)."""
    return hidden, projection_table

  def tables(self) -> tuple[jax.Array, jax.Array]:
    """(lookup table, projection table), each (V, D) (tied: the one table, twice)."""
    lookup, projection = self.table_params()
    return lookup[...], projection[...]

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """(A, B), each (V, D) (D + 1 with an output bias): a context-free model's logits(ids) = A[ids] · Bᵀ."""
    return self.tables()

  def scores_in_words(self) -> str | None:
    """What `scoring_tables`' A · Bᵀ is, where it is more than the tables alone: None here."""
    return None

  def hidden(self, rows: jax.Array) -> jax.Array:
    """The identity: the looked-up rows (..., D) are the hidden vectors."""
    return rows

  def penalty(self) -> jax.Array | None:
    return None

  def hidden_stats(self) -> dict[str, jax.Array]:
    return {}

  def train_at(self, step: jax.Array) -> None:
    """Called by the train step, on its own copy of the model, before the loss: a model that draws randomness
    (dropout) takes its keys from (seed, `step`), so a resumed run draws what an uninterrupted one would. Outside a
    train step nothing calls it, and the model is deterministic."""


class TiedEmbed(LanguageModel):
  """One table, `embedding`, a (V, D) float32 Param and the only one: the lookup and, transposed, the projection."""

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size, self.d_model = vocab_size, d_model
    self.embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def table_params(self) -> tuple[nnx.Param, nnx.Param]:
    """The one table, read by both uses."""
    return self.embedding, self.embedding


class UntiedEmbed(LanguageModel):
  """The ablation: independent (V, D) Params `input_embedding` (read by `embed`) and `output_embedding` (`attend`)."""

  def __init__(self, vocab_size: int, d_model: int, *, rngs: nnx.Rngs):
    self.vocab_size, self.d_model = vocab_size, d_model
    self.input_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))
    self.output_embedding = table_param(init_table(rngs.params(), vocab_size, d_model))

  def table_params(self) -> tuple[nnx.Param, nnx.Param]:
    return self.input_embedding, self.output_embedding


declare(Variant("context", "none", "nothing: a bigram model, each position reads its own row alone",
                lambda inner, config, rngs: inner))
declare(Variant("hidden", "none", "nothing: the hidden vector is the looked-up row", lambda inner, config, rngs: inner))


class _Around(LanguageModel):
  """A model around `embedder`: its tables, hidden function (first), scores, penalty and scalars unless added to."""

  def __init__(self, embedder: LanguageModel):
    self.embedder = embedder
    self.vocab_size, self.d_model = embedder.vocab_size, embedder.d_model

  def table_params(self) -> tuple[nnx.Param, nnx.Param]:
    return self.embedder.table_params()

  def hidden(self, rows: jax.Array) -> jax.Array:
    return self.embedder.hidden(rows)

  def attend(self, x: jax.Array) -> jax.Array:
    return self.embedder.attend(x)

  def score_operands(self, hidden: jax.Array, projection_table: jax.Array) -> tuple[jax.Array, jax.Array]:
    return self.embedder.score_operands(hidden, projection_table)

  def penalty(self) -> jax.Array | None:
    return self.embedder.penalty()

  def hidden_stats(self) -> dict[str, jax.Array]:
    return self.embedder.hidden_stats()

  def scores_in_words(self) -> str | None:
    return self.embedder.scores_in_words()

  def train_at(self, step: jax.Array) -> None:
    self.embedder.train_at(step)


class LinearMap(nnx.Module):
  """h = x · W, W = `kernel` (D, D) from the identity, so a model starts as it would without it."""

  def __init__(self, d_model: int):
    self.kernel = nnx.Param(jnp.eye(d_model, dtype=jnp.float32))

  def __call__(self, x: jax.Array) -> jax.Array:
    """(..., D) → (..., D)."""
    return x @ self.kernel[...]


class WithHiddenMap(_Around):
  """`embedder` with `hidden_map` W after its hidden function; the training loss adds `l2 · ‖W − I‖²_F`."""

  def __init__(self, embedder: LanguageModel, l2: float = 0.0):
    super().__init__(embedder)
    self.hidden_map = LinearMap(embedder.d_model)
    self.l2 = float(l2)

  def hidden(self, rows: jax.Array) -> jax.Array:
    """The embedder's hidden vectors (..., D) · W → (..., D)."""
    return self.hidden_map(self.embedder.hidden(rows))

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """(A · W, B) from the embedder's (A, B), each (V, D): logits(ids) = (A · W)[ids] · Bᵀ, for inspection."""
    lookup_table, projection_table = self.embedder.scoring_tables()
    return lookup_table @ self.hidden_map.kernel[...], projection_table

  def scores_in_words(self) -> str:
    lookup, projection = self.table_params()
    if lookup is projection:
      return "E·W·Eᵀ (tied table with a hidden map W: W's antisymmetric part lets S differ from Sᵀ)"
    return "input·W·outputᵀ (untied model with a hidden map W)"

  def penalty(self) -> jax.Array | None:
    """l2 · ‖W − I‖²_F, a scalar; None (nothing to add) at l2 = 0."""
    if self.l2 == 0.0:
      return None
    kernel = self.hidden_map.kernel[...]
    return self.l2 * jnp.sum(jnp.square(kernel - jnp.eye(kernel.shape[0], dtype=kernel.dtype)))

  def hidden_stats(self) -> dict[str, jax.Array]:
    """‖W − I‖_F, and W's antisymmetric share ‖(W − Wᵀ)/2‖_F / ‖W‖_F: the part that breaks the symmetry of E·Eᵀ."""
    kernel = self.hidden_map.kernel[...]
    identity_distance = jnp.linalg.norm(kernel - jnp.eye(kernel.shape[0], dtype=kernel.dtype))
    antisymmetric = jnp.linalg.norm((kernel - kernel.T) / 2) / jnp.maximum(jnp.linalg.norm(kernel), 1e-30)
    return {"identity_distance": identity_distance, "antisymmetric_share": antisymmetric}


HIDDEN_L2 = Setting("hidden_l2", 0.0, "λ: the training loss adds λ·‖W − I‖²_F (the eval loss is the cross-entropy "
                    "alone)")
declare(Variant("hidden", "linear", "h = x·W, W (D, D) from the identity", settings=(HIDDEN_L2,), saved_names=("full",),
                build=lambda inner, config, rngs: WithHiddenMap(inner, float(setting(config, "hidden_l2", 0.0)))))


class WithSymmetricMap(WithHiddenMap):
  """The control for `WithHiddenMap`: its W read as S = (W + Wᵀ)/2, logits = E[ids] · S · Eᵀ. S may be indefinite
  (no self-score advantage) but cannot score (a, b) and (b, a) differently; W's gradient is symmetric, so W stays S."""

  def symmetric(self) -> jax.Array:
    """S = (W + Wᵀ)/2, (D, D)."""
    kernel = self.hidden_map.kernel[...]
    return (kernel + kernel.T) / 2

  def hidden(self, rows: jax.Array) -> jax.Array:
    """The embedder's hidden vectors (..., D) · S → (..., D)."""
    return self.embedder.hidden(rows) @ self.symmetric()

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """(A · S, B) from the embedder's (A, B), for inspection."""
    lookup_table, projection_table = self.embedder.scoring_tables()
    return lookup_table @ self.symmetric(), projection_table

  def scores_in_words(self) -> str:
    tied = self.table_params()[0] is self.table_params()[1]
    return (f"{'E·S·Eᵀ (tied table' if tied else 'input·S·outputᵀ (untied model'} with a symmetric map "
            "S = (W + Wᵀ)/2: S = Sᵀ, so no direction, but indefinite)")

  def hidden_stats(self) -> dict[str, jax.Array]:
    """‖S − I‖_F, and S's smallest eigenvalue (below 0: S is indefinite)."""
    symmetric = self.symmetric()
    identity_distance = jnp.linalg.norm(symmetric - jnp.eye(symmetric.shape[0], dtype=symmetric.dtype))
    return {"identity_distance": identity_distance, "min_eigenvalue": jnp.linalg.eigvalsh(symmetric)[0]}


declare(Variant("hidden", "symmetric", "h = x·S, S = (W + Wᵀ)/2 (logits E·S·Eᵀ, a symmetric, possibly indefinite form)",
                settings=(HIDDEN_L2,),
                build=lambda inner, config, rngs: WithSymmetricMap(inner, float(setting(config, "hidden_l2", 0.0)))))


class WithOutputBias(_Around):
  """`embedder` with `bias` (V,) from 0, split along V on a mesh: logits = attend(h) + b at every position."""

  def __init__(self, embedder: LanguageModel):
    super().__init__(embedder)
    self.bias = nnx.Param(jnp.zeros((embedder.vocab_size,), jnp.float32), out_sharding=TABLE_AXES[:1],
                          eager_sharding=False)

  def attend(self, x: jax.Array) -> jax.Array:
    """(..., D) → (..., V): the embedder's scores + b."""
    return self.embedder.attend(x) + self.bias[...]

  def score_operands(self, hidden: jax.Array, projection_table: jax.Array) -> tuple[jax.Array, jax.Array]:
    """([H, 1] (T, D' + 1), [B, b] (V, D' + 1)) from the embedder's (H, B): H · Bᵀ + b as one product."""
    hidden, projection_table = self.embedder.score_operands(hidden, projection_table)
    ones = jnp.ones(hidden.shape[:-1], hidden.dtype)
    return _with_column(hidden, ones), _with_column(projection_table, self.bias[...])

  def scoring_tables(self) -> tuple[jax.Array, jax.Array]:
    """([A, 1], [B, b]), each (V, D + 1): logits(ids) = A[ids] · Bᵀ + b, for inspection."""
    lookup_table, projection_table = self.embedder.scoring_tables()
    return (_with_column(lookup_table, jnp.ones(lookup_table.shape[:1], lookup_table.dtype)),
            _with_column(projection_table, self.bias[...]))

  def scores_in_words(self) -> str:
    tied = self.table_params()[0] is self.table_params()[1]
    inner = self.embedder.scores_in_words() or ("E·Eᵀ (tied table)" if tied else "input·outputᵀ (untied model)")
    return f"{inner} + b (an output bias: one learned score per next token)"

  def hidden_stats(self) -> dict[str, jax.Array]:
    """The embedder's, and b's standard deviation over the vocabulary (its mean changes no probability)."""
    return {**self.embedder.hidden_stats(), "bias_spread": jnp.std(self.bias[...])}


def _with_column(matrix: jax.Array, column: jax.Array) -> jax.Array:
  """(N, K), (N,) → (N, K + 1): `column` appended as the last column."""
  return jnp.concatenate([matrix, column[:, None].astype(matrix.dtype)], axis=-1)


class ContextMLP(_Around):
  """Bengio-style: h_t = x_t + MLP([x_t, ..., x_t-k+1]), tanh, MLP_WIDTH · D wide, zeros before the window."""

  def __init__(self, embedder: LanguageModel, k: int, *, rngs: nnx.Rngs):
    super().__init__(embedder)
    self.k, width = k, MLP_WIDTH * embedder.d_model
    self.layer = nnx.Linear(k * embedder.d_model, width, rngs=rngs)
    self.out = nnx.Linear(width, embedder.d_model, rngs=rngs)

  def hidden(self, rows: jax.Array) -> jax.Array:
    """rows (B, L, D) → (B, L, D), position t reading positions ≤ t; (B, D) are windows of one token."""
    if rows.ndim == 2:
      return self.hidden(rows[:, None])[:, 0]
    rows = self.embedder.hidden(rows)
    length = rows.shape[-2]
    padded = jnp.pad(rows, [(0, 0)] * (rows.ndim - 2) + [(self.k - 1, 0), (0, 0)])
    context = jnp.concatenate([padded[..., self.k - 1 - j:self.k - 1 - j + length, :] for j in range(self.k)], -1)
    return rows + self.out(jnp.tanh(self.layer(context)))


F32_STATE = 4 * 4  # bytes a float32 Param costs in training: itself, its gradient and two Adam moments
WINDOW_FIELDS = ("train.batch_size", "data.context_length")


def _tokens(config: ml_collections.ConfigDict) -> int:
  """Tokens in a train step: B windows of L."""
  return int(config.train.batch_size) * int(config.data.context_length)


def _mlp_memory(config: ml_collections.ConfigDict) -> list[tuple[str, int, tuple[str, ...]]]:
  """ContextMLP: its two layers' Params; per token the k·D concatenation and the 4·D hidden layer, kept twice."""
  d, k = int(config.model.d_model), int(config.model.context_k)
  params = k * d * MLP_WIDTH * d + MLP_WIDTH * d + MLP_WIDTH * d * d + d
  return [("the context MLP's Params", params * F32_STATE, ("model.context_k", "model.d_model")),
          ("the context MLP's activations", _tokens(config) * (k + 2 * MLP_WIDTH) * d * 4 * 2,
           (*WINDOW_FIELDS, "model.context_k", "model.d_model"))]


def needs_windows(config: ml_collections.ConfigDict) -> tuple[str, Any, str] | None:
  """A context mixer's check: it reads windows of at least two tokens."""
  length = config.data.context_length
  if length >= 2:
    return None
  return ("data.context_length", length,
          f"at least 2 with model.context={config.model.context!r} (a window of one token has no context to mix)")


declare(Variant("context", "mlp", "the previous model.context_k rows through one hidden layer", check=needs_windows,
                settings=(Setting("context_k", 3, "rows concatenated at each position (the token's own and the k - 1 "
                                  "before it in the window)", low=1, high=256),),
                build=lambda inner, config, rngs: ContextMLP(inner, int(setting(config, "context_k", 3)), rngs=rngs),
                memory=_mlp_memory))


class ContextConv(_Around):
  """A causal convolution: h_t = x_t + Σ_j x_(t−j) · K_j over the `width` rows up to t (zeros before the window),
  one (D, D) kernel K_j per offset j, then a bias: the plainest context mixer, linear in the rows."""

  def __init__(self, embedder: LanguageModel, width: int, *, rngs: nnx.Rngs):
    super().__init__(embedder)
    self.width = width
    self.conv = nnx.Conv(embedder.d_model, embedder.d_model, kernel_size=(width,), padding=((width - 1, 0),),
                         rngs=rngs)

  def hidden(self, rows: jax.Array) -> jax.Array:
    """rows (B, L, D) → (B, L, D), position t reading positions ≤ t; (B, D) are windows of one token."""
    if rows.ndim == 2:
      return self.hidden(rows[:, None])[:, 0]
    rows = self.embedder.hidden(rows)
    return rows + self.conv(rows)


declare(Variant("context", "conv", "a causal convolution over the previous model.conv_width rows", check=needs_windows,
                settings=(Setting("conv_width", 3, "rows each position's convolution reads (its own and the width - "
                                  "1 before it)", low=1, high=256),),
                build=lambda inner, config, rngs: ContextConv(inner, int(setting(config, "conv_width", 3)),
                                                              rngs=rngs),
                memory=lambda config: [
                    ("the convolution's Params", (int(config.model.conv_width) + 1) * int(config.model.d_model) ** 2
                     * F32_STATE, ("model.conv_width", "model.d_model")),
                    ("the convolution's activations", _tokens(config) * (int(config.model.conv_width) + 2)
                     * int(config.model.d_model) * 4 * 2, (*WINDOW_FIELDS, "model.conv_width", "model.d_model"))]))


class Block(nnx.Module):
  """One pre-norm transformer block: x + attention(norm(x)) under a causal mask, then x + MLP(norm(x))."""

  def __init__(self, d_model: int, heads: int, *, rngs: nnx.Rngs):
    self.attention_norm = nnx.LayerNorm(d_model, rngs=rngs)
    self.attention = nnx.MultiHeadAttention(heads, d_model, qkv_features=d_model, out_features=d_model,
                                            decode=False, rngs=rngs)
    self.mlp_norm = nnx.LayerNorm(d_model, rngs=rngs)
    self.mlp_in = nnx.Linear(d_model, MLP_WIDTH * d_model, rngs=rngs)
    self.mlp_out = nnx.Linear(MLP_WIDTH * d_model, d_model, rngs=rngs)

  def __call__(self, x: jax.Array, drop: Callable[[jax.Array, int], jax.Array] | None = None) -> jax.Array:
    """(B, L, D) → (B, L, D), position t attending to positions ≤ t; `drop(y, i)` (training with dropout) masks the
    attention's output (i = 0) and the MLP's (i = 1) before each is added to the residual stream, as nanoGPT does."""
    drop = drop or (lambda y, i: y)
    causal = nnx.make_causal_mask(jnp.ones(x.shape[:-1], jnp.int32))  # (B, 1, L, L)
    x = x + drop(self.attention(self.attention_norm(x), mask=causal), 0)
    return x + drop(self.mlp_out(jax.nn.gelu(self.mlp_in(self.mlp_norm(x)))), 1)


class DropoutKey(nnx.Variable):
  """The raw (uint32) PRNG key of a train step's dropout masks, from (seed, step): a plain array, so a checkpoint
  holds it (Orbax saves no typed key)."""


class ContextTransformer(_Around):
  """A causal transformer over up to `length` tokens: learned positions, `layers` pre-norm blocks, a final norm."""

  def __init__(self, embedder: LanguageModel, length: int, layers: int, heads: int, *, rngs: nnx.Rngs,
               dropout: float = 0.0, seed: int = 0):
    super().__init__(embedder)
    self.positions = nnx.Param(0.02 * jax.random.normal(rngs.params(), (length, embedder.d_model), jnp.float32))
    self.blocks = nnx.List([Block(embedder.d_model, heads, rngs=rngs) for _ in range(layers)])
    self.final_norm = nnx.LayerNorm(embedder.d_model, rngs=rngs)
    # dropout: the share of the input's and every block output's entries zeroed in a train step (the rest scaled by
    # 1 / (1 − rate)); `training` is set only on a train step's own copy, so evaluation never drops
    self.dropout, self.dropout_seed, self.training = float(dropout), int(seed), False
    if self.dropout > 0:
      self.dropout_key = DropoutKey(jnp.zeros((2,), jnp.uint32))

  def train_at(self, step: jax.Array) -> None:
    """With dropout: this step's key, fold_in(key(seed), step), and the masks on."""
    super().train_at(step)
    if self.dropout > 0:
      self.training = True
      self.dropout_key[...] = jax.random.key_data(jax.random.fold_in(jax.random.key(self.dropout_seed), step))

  def _drop(self, x: jax.Array, index: int) -> jax.Array:
    """x with each entry zeroed with probability `dropout` (and the rest scaled by 1 / (1 − dropout)), the mask drawn
    from this step's key folded with `index` (one mask per place in the network)."""
    key = jax.random.fold_in(jax.random.wrap_key_data(self.dropout_key[...]), index)
    keep = jax.random.bernoulli(key, 1.0 - self.dropout, x.shape)
    return jnp.where(keep, x / (1.0 - self.dropout), jnp.zeros_like(x))

  def hidden(self, rows: jax.Array) -> jax.Array:
    """rows (B, L, D), L ≤ length → (B, L, D), position t reading positions ≤ t; (B, D) are windows of one."""
    if rows.ndim == 2:
      return self.hidden(rows[:, None])[:, 0]
    x = self.embedder.hidden(rows) + self.positions[...][:rows.shape[-2]]
    dropping = self.training and self.dropout > 0
    if dropping:
      x = self._drop(x, 0)
    for n, block in enumerate(self.blocks):
      x = block(x, (lambda y, i, n=n: self._drop(y, 1 + 2 * n + i)) if dropping else None)
    return self.final_norm(x)


def _check_transformer(config: ml_collections.ConfigDict) -> tuple[str, Any, str] | None:
  """Windows of at least two tokens, and heads that divide D."""
  model = config.model
  if (short := needs_windows(config)) is not None:
    return short
  if model.d_model % model.heads:
    return "model.heads", model.heads, f"a divisor of model.d_model={model.d_model} (each head reads D / heads)"
  return None


def _transformer_memory(config: ml_collections.ConfigDict) -> list[tuple[str, int, tuple[str, ...]]]:
  """ContextTransformer: 12·D² + 13·D Params a block and the (L, D) positions; per token and block about 16·D kept
  activations; per block the (B, heads, L, L) attention scores and weights and their gradient."""
  d, layers, heads = int(config.model.d_model), int(config.model.layers), int(config.model.heads)
  length = int(config.data.context_length)
  params = layers * (12 * d * d + 13 * d) + length * d
  return [("the transformer's Params", params * F32_STATE, ("model.layers", "model.d_model")),
          ("the transformer's activations", _tokens(config) * layers * 16 * d * 4,
           (*WINDOW_FIELDS, "model.layers", "model.d_model")),
          ("the attention weights (B, heads, L, L) of every block",
           int(config.train.batch_size) * heads * length * length * layers * 4 * 3,
           ("data.context_length", "train.batch_size", "model.heads", "model.layers"))]


declare(Variant("context", "transformer", "a causal transformer over the window", check=_check_transformer,
                settings=(Setting("layers", 2, "pre-norm causal blocks", low=1, high=128),
                          Setting("heads", 4, "attention heads of each block (dividing model.d_model)", low=1,
                                  high=1024),
                          Setting("dropout", 0.0, "the share of the input's and each block output's entries zeroed "
                                  "in a train step, its masks from (seed, step); never in evaluation", low=0, high=1,
                                  high_open=True)),
                build=lambda inner, config, rngs: ContextTransformer(
                    inner, int(config.data.get("context_length", 1)), int(setting(config, "layers", 2)),
                    int(setting(config, "heads", 4)), rngs=rngs, dropout=float(setting(config, "dropout", 0.0)),
                    seed=int(config.seed)),
                memory=_transformer_memory))


def variant_of(config: ml_collections.ConfigDict, family: str) -> Variant:
  """The variant of `family` that `config.model` picks ("none" where the field is absent)."""
  name = config.model.get(family, "none")
  known = VARIANTS[family]
  return known.get(name) or next(variant for variant in known.values() if name in variant.saved_names)


def build_model(config: ml_collections.ConfigDict) -> LanguageModel:
  """The model `config.model` describes, from `config.seed`: tables, then each family's variant around them (the
  context mixer, the hidden map), then the output bias."""
  model, rngs = config.model, nnx.Rngs(int(config.seed))
  built = (TiedEmbed if model.tied else UntiedEmbed)(int(model.vocab_size), int(model.d_model), rngs=rngs)
  for family in VARIANTS:
    built = variant_of(config, family).build(built, config, rngs)
  if model.get("output_bias", False):
    built = WithOutputBias(built)
  return built


class ParamCounts(NamedTuple):
  """Parameters of the vocabulary matrices (+ D·D with a hidden map, + V with an output bias), tied and untied."""

  tied: int  # V*D: one shared table
  untied: int  # 2*V*D: separate input and output tables
  saved: int  # untied - tied = V*D


def param_counts(vocab_size: int, d_model: int, hidden: str = "none", output_bias: bool = False) -> ParamCounts:
  """Parameter counts of the embedding plus the output projection, tied and untied."""
  extra = (d_model * d_model if hidden != "none" else 0) + (vocab_size if output_bias else 0)
  tied = vocab_size * d_model
  return ParamCounts(tied=tied + extra, untied=2 * tied + extra, saved=tied)
