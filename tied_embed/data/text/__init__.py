"""What the text source uses: corpora and their splits, tokenizers, sparse pair counts."""
