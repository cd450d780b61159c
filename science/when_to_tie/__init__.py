"""When does tying help? Tied, untied and tied + W, each tuned and scored at its best step, across train data sizes.

  .venv/bin/python -m science.when_to_tie                  # the whole sweep into runs/when_to_tie/
  .venv/bin/python -m science.when_to_tie --write-docs     # and docs/when_to_tie.*, docs/results.md's picks
  .venv/bin/python -m science.when_to_tie --quick --corpora=bytes --out=runs/when_to_tie_quick  # minutes
  .venv/bin/python -m science.when_to_tie --corpora=bytes --family=controls  # one (corpus, family) block
  .venv/bin/python -m science.when_to_tie --from-json docs/when_to_tie.json --add-convergence --write-docs
                                           # only the convergence check, added to an existing sweep's JSON
  .venv/bin/python -m science.when_to_tie --asymmetry --corpora=bytes --out runs/asymmetry --write-docs
                                           # the asymmetry budget of each size's train pairs (seconds)

Three models: tied (logits E[i]·Eᵀ), untied (A[i]·Bᵀ) and tied + W (E[i]·W·Eᵀ, model.hidden="linear", W a D×D
matrix that starts at the identity, with the penalty λ·‖W − I‖², model.hidden_l2 = λ, whose grid holds 0), on two
corpora: (a) `bytes`, byte bigrams of the default text corpus (configs/text.py: Python's pydoc topics, ~750 KB);
(b) `subword`, SentencePiece bigrams with V = SUBWORD_VOCAB (configs/subword.py) of Vim's help files
(/usr/share/vim/vim*/doc/*.txt, ~9.5 MB). Each corpus is split with data.split="drawn-<draw>" (tied_embed/data/text/
draw.py): whole documents (files; ~8 KiB blocks of the one byte file) in one shuffle seeded by the draw, validation
and the selection split (`Plan.selection_share`, never trained on) drawn from that one pool, and each train size
(plan.FRACTIONS of what selection leaves, data.train_fraction) a prefix of the rest, so smaller sizes are subsets of
larger ones within a draw. plan.DRAWS draws at plan.DRAW_FRACTIONS, draw 0 elsewhere.

Every model gets the same care: the same first trials (plan.trials: learning rate × weight decay, grids ~3× apart, tied
+ W's λ spread over them as a Latin rectangle), run on plan.TUNE_SEED (never scored) and chosen by the lowest
select/loss at the best step, never by eval; then the edge rule (tuning.search), the same for every model: an axis
chosen at the edge of the values tried is tried one step beyond and the choice made again, until every choice is
interior or the axis has taken plan.EDGE_EXTENSIONS steps (the cell is then marked). Each cell records its grid, choice
and trials, and whether its best steps are shown converged (none in its last eval interval). Every run scores the
selection split at every eval, keeps the checkpoint with the lowest select/loss, runs its whole schedule (PATIENCE = 0)
and is scored at that best step: its eval loss, its loss on rare inputs, and (from the restored best checkpoint, in
NumPy float64) how often its likeliest next token is the current token. The chosen setting is then scored on plan.SEEDS
on every draw. Picks are paired differences (same seed, same draw) with 95% t-intervals, over several draws those of
draws × seeds crossed (stats.py): a model is named only where its interval against every other model excludes 0.

Beside the models, at every size and draw, two count-bigram references of exactly the pairs the models train on,
each tuned on the selection split: add-k (k from count_bigram.K_GRID) and interpolated Kneser-Ney (the discount from
kneser_ney.DISCOUNT_GRID). The floor (the validation split's own bigram entropy, unreachable) stays beside them.

The convergence check (--convergence-factor F, default CONVERGENCE_FACTOR; 0: off): at the largest data size (100%),
each model at the settings chosen there reruns seed 0 with F times the steps, the same schedule shape (warmup, then
cosine decay to 0 over the longer run) and as many evals, scored at its best step as every run is. --from-json with
--add-convergence trains only these runs and adds them to that JSON.

A sweep that fits and resumes: each finished run's numbers are written to <out>/finished_runs.json (whole, renamed into
place); the same command run again takes them from there and trains only the rest (an unfinished run resumes from its
checkpoint, and its clock from the seconds it had spent: sweep.RunClock). A run's key and workdir name its dataset,
model, settings, size, seed, draw and schedule, and a digest of its acting config fields (sweep.run_digest): another
plan is another run. The record and stopped runs' seconds are checked whole before any work (sweep.check_sitting); one
sitting holds an --out at a time (its .lock). SIGTERM or SIGINT stops it in one line (exit 128 + the signal), at the
next run or size where the signal landed in a callback (sweep.stop_point). plan.block_seconds sizes each (corpus,
model family) block to at most plan.BLOCK_SECONDS on 2 cores;
--family (the keys of plan.FAMILIES, comma-separated, default bigram) picks the block's models: the controls (output
bias, symmetric S, untied at D/2), and the model axis, `mlp` and `transformer`: the three models again reading windows
of plan.CONTEXT_LENGTH tokens (never across a document; B / L windows a step, so the bigram's tokens per step), scored
through their forward pass on the trainer's eval windows, and compared with the interpolated Kneser-Ney n-gram of their
own context (science/kneser_ney.py: the MLP's order k + 1, the transformer's best of 2..8, its order and discount chosen
on the selection split, each pair scored from the tokens its model sees). plan.unavailable says what a model the trainer
cannot build still needs (the command refuses it in one line). Nothing is written or deleted through a link under --out.

Compiled programs are cached on disk (JAX's persistent compilation cache, under <out>/jax_cache): runs that differ
only in seed or data size share their step and eval programs. The sweep prints each run and its own wall and CPU
time. It writes <out>/when_to_tie.{md,json,png}; --write-docs also copies them to docs/when_to_tie.* (keeping the
hand-written notes between the NOTES markers there) and rewrites the picks in docs/results.md's when-to-tie block.
The datasets are built once per corpus and draw under <out>/data/; each run's workdir under <out>/runs/ is deleted
once its numbers are taken, unless --keep-runs.

The mechanism (mechanism.py): with --write-docs, the controls block's JSON beside docs/when_to_tie.json is paired
with it run against run (same size, seed and draw) into the docs' notes, and so is the asymmetry budget's
(--asymmetry, budget.py: the add-k count model of each size's and draw's train pairs, tied_embed/data/asymmetry.py).
Whether the bigram's answer carries over to context (carry_over.py): each context block's JSON beside it
(docs/when_to_tie_mlp.json, _transformer.json) is paired with it the same way, tying's cost (tied − untied) compared
without and with context run by run.

The package: `plan` (models, corpora, grids, trials, blocks, schedules, run configs), `tuning` (the edge rule), `sweep`
(the runs, the tuning, the convergence check and the NumPy references they are scored against), `stats` (means, paired
intervals), `report` (markdown, figure, docs and README), `mechanism` (the controls paired across blocks, the asymmetry
table), `carry_over` (the context blocks paired with the bigram block), `budget` (the asymmetry budget of the train
pairs), `checks` (what --from-json and --out must hold), `cli` (the command line; `__main__` runs it).
"""

import os

# Set when the package loads, so before anything imports TensorFlow (TFDS does): its oneDNN banner and C++ log
# lines would reach stderr.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
