"""Integrity of saved state: a layout-independent fingerprint of every array and a checksum of a config, recorded
in a checkpoint's manifest and compared at every read, so bytes that changed on disk are found, not trained on."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _bits(array: jax.Array) -> jax.Array:
  """The raw bits of `array` as uint32 (one or two words per element): (...) → (N,) uint32."""
  if array.dtype.itemsize in (4, 8):  # 8: (..., 2) words
    return jax.lax.bitcast_convert_type(array, jnp.uint32).reshape(-1)
  unsigned = {1: jnp.uint8, 2: jnp.uint16}[array.dtype.itemsize]
  return jax.lax.bitcast_convert_type(array, unsigned).astype(jnp.uint32).reshape(-1)


@jax.jit
def _fingerprints(arrays: list[jax.Array]) -> list[jax.Array]:
  """Two order-sensitive 32-bit sums per array: Σ bits_i · w_i (mod 2³²) with odd weights w_i, for two weightings.
  Exact and associative, so the same on any sharding; changing one element changes both (odd weights invert)."""
  prints = []
  for array in arrays:
    bits = _bits(array)
    index = jnp.arange(bits.shape[0], dtype=jnp.uint32)
    for multiplier in (jnp.uint32(2654435761), jnp.uint32(2246822519)):
      weights = index * multiplier * jnp.uint32(2) + jnp.uint32(1)
      prints.append(jnp.sum(bits * weights, dtype=jnp.uint32))
  return prints


def fingerprint(state: nnx.State) -> dict[str, str]:
  """{'model/embedding': '<16 hex digits>', ...}: a fingerprint of every array of `state`, layout-independent."""
  flat = jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(state))
  values = np.asarray(jax.device_get(_fingerprints([leaf for _, leaf in flat])), np.uint32).reshape(-1, 2)
  return {"/".join(str(getattr(key, "key", key)) for key in path): f"{int(a):08x}{int(b):08x}"
          for (path, _), (a, b) in zip(flat, values, strict=True)}


def config_checksum(config: dict) -> str:
  """sha256 of the config's canonical JSON (sorted keys)."""
  return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


class Damaged(Exception):
  """A checkpoint whose items read back but do not match its manifest."""


def check_config(config: dict, manifest: dict) -> None:
  """Damaged unless `config` has the checksum `manifest` recorded."""
  if config_checksum(config) != manifest.get("config_sha256"):
    raise Damaged("its config does not match the checksum in its manifest")


def check_arrays(state: nnx.State, manifest: dict) -> None:
  """Damaged unless every array of `state` has the fingerprint `manifest` recorded, and none is missing."""
  saved, found = manifest.get("arrays", {}), fingerprint(state)
  if bad := sorted(path for path in set(saved) | set(found) if saved.get(path) != found.get(path)):
    raise Damaged(f"{len(bad)} array(s) do not match their fingerprints in the manifest, e.g. {bad[0]}")


def check_metrics(step: int, metrics: dict, manifest: dict) -> None:
  """Damaged unless the Orbax metrics of checkpoint `step` are {'step': step}, with the select_loss `manifest`
  recorded where it recorded one (and its selection's best_select_loss where it ran with a min_delta)."""
  expected = {"step": step}
  if manifest.get("select_loss") is not None:
    expected["select_loss"] = manifest["select_loss"]
    if manifest.get("min_delta"):
      expected["best_select_loss"] = manifest["selection"]["best_select_loss"]
  if metrics != expected:
    raise Damaged(f"its metrics {metrics} are not its manifest's {expected}")
