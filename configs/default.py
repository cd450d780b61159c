"""The tied model on the planted bigram task, which a tied table can represent exactly.

  python train.py --config configs/default.py --workdir runs/default

About 15 s on 2 CPU cores (well within the minute it is meant for); the final eval loss ends 0.34% above the
printed loss floor (the target is 2%).
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0  # model initialisation and the order of training batches (batch s depends only on (seed, s))

  config.model = ml_collections.ConfigDict()
  config.model.vocab_size = 1024  # V, rows of the table; must match the source (text: 256 byte values)
  config.model.d_model = 32  # D, width of each row
  config.model.tied = True  # one (V, D) table for lookup and projection; False: separate input/output tables
  # compute dtype of the loss's matmuls: float32 | bfloat16 (float32 accumulation and logsumexp; parameters and
  # optimizer state stay float32). On XLA:CPU bfloat16 is ~10% slower, not faster: it widens the operands to float32
  # before each dot (measured at V=8192, D=256, T=4096)
  config.model.dtype = "float32"
  # none | linear: h = E[ids]·W, a (D, D) W between lookup and projection, from I | symmetric: h = E[ids]·S with
  # S = (W + Wᵀ)/2 (logits E·S·Eᵀ)
  config.model.hidden = "none"
  config.model.hidden_l2 = 0.0  # λ: the training loss adds λ·‖W − I‖²_F (model.hidden=linear or symmetric); 0 = off
  config.model.output_bias = False  # logits = h·Eᵀ + b, a learned score b (V,) of each next token, from 0
  # none | mlp | transformer: what mixes a window's rows before the projection (none: a bigram model)
  config.model.context = "none"
  config.model.context_k = 3  # context=mlp: rows concatenated at each position (its own and the k - 1 before it)
  config.model.layers = 2  # context=transformer: pre-norm causal blocks
  config.model.heads = 4  # context=transformer: attention heads of each block (dividing d_model)

  config.data = ml_collections.ConfigDict()
  config.data.source = "planted"  # planted | directed | text (see tied_embed/data/sources/)
  # L, tokens per training window: 1 = (current, next) pairs; L > 1 = windows of L tokens within one document
  config.data.context_length = 1
  # source=text: a file, a directory (recursive) or a glob ('' = Python's pydoc_data/topics.py, ~750 KB of English)
  config.data.text_path = ""
  config.data.tokenizer = "bytes"  # text: bytes (V=256) | sentencepiece (trained, V pieces) | a .model path
  config.data.data_dir = ""  # where the TFDS dataset is generated and cached ('' = <workdir>/data)
  config.data.train_fraction = 1.0  # the share of the train split trained on (of what selection leaves), in (0, 1]
  # the last share of the train split, held out for selection (select/loss, the best checkpoint), in [0, 0.5)
  config.data.selection_fraction = 0.0
  # text: a corpus of several files split as their bytes in sorted order (contiguous) or by whole files, shuffled
  config.data.split = "contiguous"  # contiguous | by_document (docs/data.md)
  config.data.task_d_model = 32  # planted/directed: width of the hidden table e* (model.d_model is the model's)
  config.data.task_seed = 0  # hidden table e* and sampled pairs of the synthetic tasks (model init uses seed)
  config.data.num_train_pairs = 2_000_000  # synthetic train split size; smaller lets the untied model overfit
  config.data.num_eval_pairs = 50_000  # synthetic validation split size (evaluated whole at every eval)
  config.data.logit_scale = 8.0  # E|e*_i|²: the typical self (planted) / next (directed) logit
  config.data.zipf_exponent = 1.0  # current tokens follow p_i ∝ (i + 1)^-s, so rare rows learn mostly via projection

  config.train = ml_collections.ConfigDict()
  config.train.num_steps = 3000  # optimizer updates in the whole run
  config.train.batch_size = 1024  # (current, next) token pairs per step (windows with data.context_length > 1)
  config.train.eval_batch_size = 8192  # pairs per evaluation batch; evaluation covers the whole validation split
  config.train.learning_rate = 0.05  # peak learning rate, reached after the warmup
  config.train.warmup_steps = 100  # linear warmup from 0, then cosine decay to 0 at num_steps
  config.train.optimizer = "adamw"  # adamw | adam | sgd
  config.train.weight_decay = 0.0  # adamw: decoupled decay; adam/sgd: L2 term added to the gradient; 0 = off
  config.train.grad_clip_norm = 1.0  # clip the gradient's global norm to this; 0 = no clipping
  config.train.lookup_grad_scale = 1.0  # a: the update uses a·g_lookup + b·g_projection; 1 = the exact gradient
  config.train.projection_grad_scale = 1.0  # b: weights the output-projection path (clipping sees the weighted sum)
  config.train.log_every = 100  # steps between train/* and grad/* scalars and provenance histograms
  config.train.eval_every = 500  # steps between evaluations on the validation split (and at the last step)
  config.train.checkpoint_every = 1000  # steps between checkpoints (and at the last step)
  config.train.keep_checkpoints = 3  # newest checkpoints kept in <workdir>/checkpoints (and the best by select/loss)
  config.train.early_stopping_patience = 0  # evals without a new best select/loss before stopping; 0 = off
  config.train.min_delta = 0.0  # nats select/loss must fall below the best to count as a new best

  config.loss = ml_collections.ConfigDict()
  config.loss.chunk_size = 256  # tokens per chunk: at most (256, V) logits at once, and faster than full logits at
  # every size measured (benchmarks/README.md); 0 = full (B, V) logits

  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = 1  # devices the batch is split over; -1 = all the devices model doesn't use
  config.mesh.model = 1  # devices the table is split over along V; -1 = all the devices data doesn't use
  return config
