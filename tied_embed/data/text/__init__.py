"""Text for the text sources: reading a corpus (`corpus`), tokenizers (`tokenizer`), the token stream and its
references (`tokenized`), and sparse pair counts (`count_bigram`)."""
