"""The base embedder: a WordPiece tokenizer and a static token table distilled from a teacher.

- :mod:`~evermind.embedder.wordpiece`: BERT's uncased WordPiece in pure Python (browser-safe);
- :mod:`~evermind.embedder.static`: the embedder itself (a weighted mean of token vectors,
  L2-normalised), numpy and pure-Python paths, and its file (browser-safe);
- :mod:`~evermind.embedder.build`: the distillation from the teacher and the whole build,
  :mod:`~evermind.embedder.finetune` the fine-tune, :mod:`~evermind.embedder.corpus` its
  texts, :mod:`~evermind.embedder.unicode_table` the tokenizer's character table (all
  native-only).

See docs/embedder.md.
"""
