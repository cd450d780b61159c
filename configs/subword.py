"""A trained subword vocabulary on a local corpus: SentencePiece, V = 8192, D = 64, the chunked loss.

  python train.py --config configs/subword.py --workdir runs/subword --config.data.text_path=/path/to/corpus/
  python train.py --config configs/subword.py --workdir runs/subword_untied --config.model.tied=False \
      --config.data.text_path=/path/to/corpus/
  python -m tied_embed.inspection --workdir runs/subword --next "the"

The corpus is a file, a directory (read recursively) or a glob of UTF-8 text. A corpus of several files is split by
whole files in a fixed shuffled order (data.split='by_document'), so every train prefix, the selection split and the
validation split draw from the same mix of files; one file is split as its first 90% and last 10%. SentencePiece is
trained on a sample of the train split with exactly model.vocab_size pieces and cached under the data dir, as are
the tokens.
eval/loss_floor is the validation text's own bigram entropy (unreachable); eval/count_bigram_loss is the add-k
count model fitted on train, what a full-rank untied table can approach. The source is tied_embed/data/sources/text.py.
"""

import ml_collections

from configs import default


def get_config() -> ml_collections.ConfigDict:
  config = default.get_config()
  config.data.source = "text"  # a local corpus
  # set with --config.data.text_path: a file, a directory or a glob ('' = Python's pydoc_data/topics.py)
  config.data.text_path = ""
  # whole files, shuffled: in a corpus sorted by name the last 10% can be another kind of text than the first 1%
  config.data.split = "by_document"
  config.data.tokenizer = "sentencepiece"  # a unigram vocabulary of model.vocab_size pieces trained on train text
  config.model.vocab_size = 8192  # pieces: here the table is most of the parameters and most rows are rare
  config.model.d_model = 64  # width of each row
  config.data.task_d_model = 64  # read by the synthetic tasks only; kept equal to the model's width
  config.loss.chunk_size = 256  # at most (256, V) logits at once; faster than 1024 here (benchmarks/README.md)
  config.train.num_steps = 2000  # a few minutes on 2 CPU cores
  config.train.batch_size = 1024  # (current, next) token pairs per step
  config.train.eval_batch_size = 8192  # pairs per evaluation batch; evaluation covers the whole validation split
  config.train.learning_rate = 0.02  # peak learning rate
  config.train.eval_every = 500  # evaluations of the whole validation split
  config.train.checkpoint_every = 1000  # checkpoints
  return config
