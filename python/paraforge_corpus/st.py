"""A sentence-transformers module that runs a paraforge encoder, so that
``SentenceTransformer(DIR)`` gives paraforge's vectors on raw text.

``paraforge export --format sentence-transformers --model MODEL.pfe --out
DIR`` writes DIR with the model and a ``modules.json`` naming
:class:`ParaforgeEncoder`; ``SentenceTransformer(DIR,
trust_remote_code=True)`` imports it from this installed package (the
library asks for the flag before importing any module class of its own
package's; the directory holds no code) and calls
:meth:`ParaforgeEncoder.load`. Tokenizing, trigrams, lowercasing and the
unknown-word row are paraforge's own code (the wheel's Rust), so nothing
about them has to be re-expressed in sentence-transformers' modules.
Needs ``torch`` (sentence-transformers brings it).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from . import Encoder

#: The file the exported directory holds the model in.
MODEL_FILE = "model.pfe"


class ParaforgeEncoder(torch.nn.Module):
    """The first and only module of an exported model: ``tokenize`` passes
    the raw sentences through, ``forward`` embeds them with paraforge. A
    sentence with no word or trigram the model knows gets a row of NaN (its
    ``para_score`` would be null), as ``paraforge embed`` writes it."""

    def __init__(self, model_path: str) -> None:
        super().__init__()
        self.model_path = os.fspath(model_path)
        self.encoder = Encoder.load(self.model_path)

    def tokenize(self, texts: List[Any], **kwargs: Any) -> Dict[str, Any]:
        # paraforge tokenizes inside the encoder; the text goes through as is.
        return {"texts": [t if isinstance(t, str) else str(t) for t in texts]}

    def forward(self, features: Dict[str, Any], **kwargs: Any) -> Dict[str, Any]:
        emb = self.encoder.encode(features["texts"])
        features["sentence_embedding"] = torch.from_numpy(np.ascontiguousarray(emb))
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.encoder.dim

    def get_max_seq_length(self) -> Optional[int]:
        # No limit: paraforge embeds a sentence whole.
        return None

    def get_config_dict(self) -> Dict[str, Any]:
        return {"model": MODEL_FILE}

    def save(self, save_dir: str, **kwargs: Any) -> None:
        target = os.path.join(save_dir, MODEL_FILE)
        if os.path.abspath(target) != os.path.abspath(self.model_path):
            shutil.copyfile(self.model_path, target)

    @staticmethod
    def load(load_dir: str, **kwargs: Any) -> "ParaforgeEncoder":
        return ParaforgeEncoder(os.path.join(load_dir, MODEL_FILE))

    def __repr__(self) -> str:
        return f"ParaforgeEncoder({self.encoder!r})"
