"""A tiny deterministic embedder for tests, so CI needs no model: ``PIMEM_EMBEDDER=tests.embedder_stub:load``.

Each word is hashed to one of 64 dimensions; a few synonyms share their word's dimension, so a paraphrase
with no word in common with a message ("automobile" for "car") is near it, as a real model's would be.
``PIMEM_STUB_DELAY`` seconds are spent on every call with more than one text (a slow model, for the tests
that prove a search never waits for embedding).
"""

from __future__ import annotations

import os
import re
import time
import zlib

import numpy as np

SYNONYMS = {"automobile": "car", "vehicle": "car", "sedan": "car", "physician": "doctor", "medic": "doctor",
            "feline": "cat", "kitten": "cat"}


class Stub:
    name = "stub-64"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        if len(texts) > 1:
            time.sleep(float(os.environ.get("PIMEM_STUB_DELAY") or 0))
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, zlib.crc32(SYNONYMS.get(word, word).encode()) % self.dim] += 1
        out[:, 0] += 1e-3  # no zero vectors
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def load() -> Stub:
    return Stub()
