"""What the text sources share: corpora, tokenizers, the token stream and its references, sparse pair counts."""
