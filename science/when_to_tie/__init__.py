"""When does tying help? Tied, untied and tied + W, each tuned and scored at its best step, across train data sizes.

  .venv/bin/python -m science.when_to_tie                  # the whole sweep into runs/when_to_tie/
  .venv/bin/python -m science.when_to_tie --write-docs     # and docs/when_to_tie.*, docs/results.md's picks
  .venv/bin/python -m science.when_to_tie --quick --corpora=bytes --out=runs/when_to_tie_quick  # seconds
  .venv/bin/python -m science.when_to_tie --from-json docs/when_to_tie.json --add-convergence --write-docs
                                           # only the convergence check, added to an existing sweep's JSON

Three models: tied (logits E[i]·Eᵀ), untied (A[i]·Bᵀ) and tied + W (E[i]·W·Eᵀ, model.hidden="linear", W a D×D
matrix that starts at the identity, with the penalty λ·‖W − I‖², model.hidden_l2 = λ, whose grid holds 0). Each
trains on the first 1%, 3%, 10%, 30% and 100% of what the selection split leaves of the train split
(data.train_fraction), on two corpora: (a) `bytes`, byte bigrams of the default text corpus (configs/text.py:
Python's pydoc topics, ~750 KB); (b) `subword`, SentencePiece bigrams with V = SUBWORD_VOCAB (configs/subword.py)
of Vim's help files (/usr/share/vim/vim*/doc/*.txt, ~9.5 MB, the largest real English text on the build machine),
split by whole files in a seeded shuffled order (data.split="by_document"), so every size draws from one mix of files.

Every model gets the same care. The last share of the train split (`Plan.selection_share`) is the selection split
(data.selection_fraction), never trained on; every run scores it at every eval (select/loss), keeps the checkpoint
with the lowest select/loss, runs its whole schedule (PATIENCE = 0: early stopping off, see there) and is scored
at that best step: its eval loss, its loss on rare inputs, and (from the restored best checkpoint, in NumPy float64)
how often its likeliest next token is the current token itself. Each model's regulariser is chosen on the selection
split, never on eval: on seed 0, for each data size, by a coordinate search over its `GRIDS` (weight decay for
all three; then λ for tied + W at the chosen weight decay); the chosen setting's seed-0 run is that model's seed-0
run, and seed 1 reruns it. Where the two best models' spreads overlap, both get a third seed.

Beside the models, at every size, the count-bigram reference: add-k counts of exactly the pairs the models train
on, k chosen from count_bigram.K_GRID on the selection split; each model is reported as its distance from it.
The floor (the validation split's own bigram entropy, unreachable) stays beside it.

The convergence check (--convergence-factor F, default CONVERGENCE_FACTOR; 0: off): at the largest data size (100%),
each model at the settings chosen there reruns seed 0 with F times the steps, the same schedule shape (warmup, then
cosine decay to 0 over the longer run) and as many evals, scored at its best step as every run is. It says whether
the best step comes before the end once the schedule is long enough, or how far the loss still moves; the ranking
uses the 1× runs. --from-json with --add-convergence trains only these runs and adds them to that JSON.

Compiled programs are cached on disk (JAX's persistent compilation cache, under <out>/jax_cache): runs that differ
only in seed or data size share their step and eval programs. The sweep prints each run and its own wall and CPU
time. It writes <out>/when_to_tie.{md,json,png}; --write-docs also copies them to docs/when_to_tie.* (keeping the
hand-written notes between the NOTES markers there) and rewrites the picks in docs/results.md's when-to-tie block.
The datasets are built once per corpus under <out>/data/; each run's workdir under <out>/runs/ is deleted
once its numbers are taken, unless --keep-runs.

The package: `plan` (models, corpora, grids, schedules, run configs), `sweep` (the runs, the tuning, the
convergence check and the NumPy references they are scored against), `report` (markdown, figure, docs and README),
`cli` (the command line; `__main__` runs it).
"""

import os

# Set when the package loads, so before anything imports TensorFlow (TFDS does): its oneDNN banner and C++ log
# lines would reach stderr.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
