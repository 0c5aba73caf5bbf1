# Type stubs of the native module (python/src/lib.rs); the public API and
# its documentation are in __init__.py.
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

_Path = Union[str, os.PathLike[str]]

__version__: str

class ParaforgeError(Exception):
    """A model, corpus or input that paraforge refuses; the message names what and where."""

class Encoder:
    @staticmethod
    def load(model: Optional[_Path] = None, vectors: Optional[_Path] = None) -> Encoder: ...
    @property
    def dim(self) -> int: ...
    @property
    def path(self) -> Path: ...
    def describe(self) -> str: ...
    def encode(self, sentences: Sequence[str]) -> bytes: ...

class Translator:
    def __init__(
        self,
        model_dir: _Path,
        device: str = "cpu",
        beam: int = 12,
        batch_size: Optional[int] = None,
        threads: int = 0,
        quantized: bool = False,
        max_new_tokens: Optional[int] = None,
        streams: Optional[int] = None,
        no_repeat_ngram_size: Optional[int] = None,
        repetition_penalty: Optional[float] = None,
        length_penalty: Optional[float] = None,
    ) -> None: ...
    def translate(self, sentences: Sequence[str]) -> List[Tuple[str, float]]: ...

def score_pairs(
    references: Sequence[str],
    translations: Sequence[str],
    model: Optional[_Path] = None,
    vectors: Optional[_Path] = None,
    lm: Optional[_Path] = None,
    bleu: str = "sacrebleu",
) -> Dict[str, List[Optional[float]]]: ...
def verified_files(path: _Path) -> Tuple[List[Path], int]: ...
