"""paraforge from Python: the sentence encoders it trains, the corpus's pair
scores, its beam-search translator and its finished outputs.

Every call runs the same Rust code as the ``paraforge`` command line (the
GIL is released while it works), so the numbers are the CLI's: an encoder's
cosine is the corpus's ``para_score``, :func:`score_pairs` gives the columns
a worker writes, :class:`Translator` the lines ``paraforge translate``
prints, and :func:`open_corpus` reads only what the CLI's readers accept.

Errors are Python exceptions that name what and where:
:class:`ParaforgeError` for a model, corpus or input paraforge refuses,
``FileNotFoundError`` for a path that does not exist, ``TypeError`` or
``ValueError`` for arguments.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np


def _find_onnxruntime() -> None:
    """Points ONNX Runtime's loader (``ORT_DYLIB_PATH``) at the library of
    an installed ``onnxruntime`` or ``onnxruntime-gpu`` wheel, unless the
    caller set it. Only the translator and the transformer scorer need it;
    the library is loaded on their first use, so setting it here, before
    any, is enough."""
    if os.environ.get("ORT_DYLIB_PATH"):
        return
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        libs = sorted((Path(root) / "capi").glob("libonnxruntime.so*"))
        if libs:
            os.environ["ORT_DYLIB_PATH"] = str(libs[-1])
            return


_find_onnxruntime()

from . import _native  # noqa: E402  (after ORT_DYLIB_PATH is set)
from ._native import ParaforgeError  # noqa: E402

__version__: str = _native.__version__
__all__ = [
    "Encoder",
    "ParaforgeError",
    "Translator",
    "cosine",
    "open_corpus",
    "score_pairs",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


def _existing(path: PathLike, what: str) -> str:
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{what} {p}: no such file or directory")
    return p


def _sentences(sentences: Union[str, Iterable[str]]) -> Tuple[List[str], bool]:
    if isinstance(sentences, str):
        return [sentences], True
    if isinstance(sentences, (bytes, bytearray)):
        raise TypeError("sentences: a list of str, not bytes (decode them first)")
    return list(sentences), False


class Encoder:
    """A sentence encoder: any model ``paraforge train`` writes (WORD,
    TRIGRAM and their combination as ``.pfe``; LSTM, BLSTM, GRAN, RNN, the
    Gaussian encoders as a directory), the transformer scorer's directory,
    or GloVe-format word vectors averaged.

    ``encode`` has sentence-transformers' signature, so evaluation harnesses
    that take such a model take this one.
    """

    def __init__(self, native: Any) -> None:
        # Built by Encoder.load; a path here is a mistake worth naming.
        if isinstance(native, (str, os.PathLike)):
            raise TypeError("use Encoder.load(path) to load an encoder")
        self._native = native

    @classmethod
    def load(
        cls, path: Optional[PathLike] = None, *, vectors: Optional[PathLike] = None
    ) -> "Encoder":
        """Loads a trained model (``path``) or word vectors (``vectors=``)."""
        if (path is None) == (vectors is None):
            raise ValueError("Encoder.load: give a model path or vectors= (one of the two)")
        if path is not None:
            return cls(_native.Encoder.load(model=_existing(path, "model")))
        return cls(_native.Encoder.load(vectors=_existing(vectors, "vectors")))

    @property
    def dim(self) -> int:
        """Embedding size."""
        return self._native.dim

    def get_sentence_embedding_dimension(self) -> int:
        """sentence-transformers' name for :attr:`dim`."""
        return self._native.dim

    def __repr__(self) -> str:
        return f"Encoder({str(self._native.path)!r}: {self._native.describe()})"

    def encode(
        self,
        sentences: Union[str, Sequence[str]],
        batch_size: int = 1024,
        show_progress_bar: Optional[bool] = None,
        convert_to_numpy: bool = True,
        normalize_embeddings: bool = False,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embeddings as a ``float32`` array of shape ``(len(sentences), dim)``
        (``(dim,)`` for one string). A sentence with no word or trigram the
        model knows gets a row of NaN, as ``paraforge embed`` writes it and as
        its ``para_score`` is null in a corpus. A trained averaging model
        returns the mean of its rows, word vectors (``vectors=``) their sum
        over known words, as ``paraforge embed`` writes them; cosines are what
        ``eval-sts`` and ``para_score`` compute. A model run that fails
        raises :class:`ParaforgeError`. ``batch_size`` bounds how many sentences are tokenized and
        embedded at once. Other keyword arguments of sentence-transformers
        (``device``, ``prompt_name``, ...) are accepted and have no effect.
        """
        if not convert_to_numpy or kwargs.get("convert_to_tensor"):
            raise ValueError("Encoder.encode returns numpy arrays only")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be at least 1")
        texts, single = _sentences(sentences)
        d = self._native.dim
        out = np.empty((len(texts), d), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            try:
                raw = self._native.encode(chunk)
            except (TypeError, ValueError) as e:
                raise type(e)(_shift_index(str(e), start)) from None
            out[start : start + len(chunk)] = np.frombuffer(raw, dtype="<f4").reshape(
                len(chunk), d
            )
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                out = out / norms
        return out[0] if single else out


def _shift_index(message: str, offset: int) -> str:
    """Renumbers ``sentences[i]`` in a batch's error as the caller's index."""
    if offset == 0 or not message.startswith("sentences["):
        return message
    i, rest = message[len("sentences[") :].split("]", 1)
    return f"sentences[{int(i) + offset}]{rest}"


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two embeddings (NaN when either has none), computed in
    float64; ``para_score`` is this cosine."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a64) * np.linalg.norm(b64)
    if not np.isfinite(denom) or denom == 0.0:
        return float("nan")
    return float(a64 @ b64 / denom)


def score_pairs(
    references: Sequence[str],
    translations: Sequence[str],
    model: Optional[PathLike] = None,
    *,
    vectors: Optional[PathLike] = None,
    lm: Optional[PathLike] = None,
    bleu: str = "sacrebleu",
) -> Dict[str, np.ndarray]:
    """The score columns a worker writes for each (reference, translation)
    pair, as ``{column: numpy array}``: ``para_score`` (with ``model=`` or
    ``vectors=``; NaN where the corpus has null), ``unigram_overlap``,
    ``bigram_overlap``, ``trigram_overlap``, ``sentence_bleu`` (``bleu=
    "sacrebleu"`` or ``"nakov"``), ``translation_perplexity`` (with ``lm=``,
    an ARPA file; else NaN), ``reference_len`` and ``translation_len``.
    """
    refs, _ = _sentences(references)
    hyps, _ = _sentences(translations)
    kw: Dict[str, Any] = {"bleu": bleu}
    if model is not None:
        kw["model"] = _existing(model, "model")
    if vectors is not None:
        kw["vectors"] = _existing(vectors, "vectors")
    if lm is not None:
        kw["lm"] = _existing(lm, "lm")
    columns = _native.score_pairs(refs, hyps, **kw)
    out: Dict[str, np.ndarray] = {}
    for name, values in columns.items():
        if name.endswith("_len"):
            out[name] = np.asarray(values, dtype=np.int32)
        else:
            out[name] = np.asarray(
                [np.nan if v is None else v for v in values], dtype=np.float32
            )
    return out


class Translator:
    """The beam-search engine of ``paraforge translate`` on a MarianMT model
    in Optimum's ONNX layout (a directory with only int8 graphs, as
    ``models/demo-cs-en``, runs those; ``quantized=True`` picks them where
    both are). ``device`` is ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (with
    ``onnxruntime-gpu`` installed). ``beam`` and ``batch_size`` are bounded
    as the CLI bounds them (256 and 1024); ``batch_size`` and ``streams``
    default as the CLI's do (16 and 1 on the CPU, 64 and 4 on CUDA).
    ``no_repeat_ngram_size``, ``repetition_penalty`` and ``length_penalty``
    are transformers' ``generate`` controls, token-exact with it (unset: the
    model's generation config; off by default)."""

    def __init__(
        self,
        model_dir: PathLike,
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
    ) -> None:
        self._native = _native.Translator(
            _existing(model_dir, "model directory"),
            device=device,
            beam=beam,
            batch_size=batch_size,
            threads=threads,
            quantized=quantized,
            max_new_tokens=max_new_tokens,
            streams=streams,
            no_repeat_ngram_size=no_repeat_ngram_size,
            repetition_penalty=repetition_penalty,
            length_penalty=length_penalty,
        )

    def translate(self, sentences: Union[str, Sequence[str]]) -> Union[str, List[str]]:
        """Translations in input order (one string for one string); an empty
        sentence translates to ``""``."""
        texts, single = _sentences(sentences)
        out = [t for t, _ in self._native.translate(texts)]
        return out[0] if single else out

    def translate_with_scores(self, sentences: Sequence[str]) -> List[Tuple[str, float]]:
        """(translation, score) per sentence: the score is the corpus's
        ``translation_score`` (length-normalised log-probability)."""
        texts, _ = _sentences(sentences)
        return list(self._native.translate(texts))


# The Hive partition columns paraforge's outputs carry, typed as polars and
# DuckDB type them (shard=N and fold=N as 64-bit integers).
_PARTITION_TYPES = {"shard": "int64", "fold": "int64", "para_range": "string"}


def open_corpus(path: PathLike) -> Any:
    """A finished paraforge output as a ``pyarrow.dataset.Dataset``: a corpus
    directory, a bins partition (``bins/train``) or a filter/rescore output.
    The manifest is checked as the CLI's readers check it (``_SUCCESS``
    present, every listed file's SHA-256 and row count), and only the files
    it lists are read; an unfinished or altered output raises
    :class:`ParaforgeError`. Folders named ``key=value`` below ``path``
    become columns: ``shard`` and ``fold`` as int64, ``para_range`` as a
    string, as polars and DuckDB read them. Needs ``pyarrow`` (``pip install
    paraforge-corpus[arrow]``)."""
    try:
        import pyarrow as pa
        import pyarrow.dataset as ds
    except ImportError as e:
        raise ImportError("open_corpus needs pyarrow: pip install 'paraforge-corpus[arrow]'") from e
    root = _existing(path, "output")
    files, _rows = _native.verified_files(root)
    files = [os.fspath(f) for f in files]
    keys: List[str] = []
    if os.path.isdir(root):
        for f in files:
            for part in Path(os.path.relpath(f, root)).parts[:-1]:
                key = part.split("=", 1)[0]
                if "=" in part and key not in keys:
                    keys.append(key)
    if not keys:
        return ds.dataset(files, format="parquet")
    schema = pa.schema([(k, _PARTITION_TYPES.get(k, "string")) for k in keys])
    return ds.dataset(files, format="parquet", partition_base_dir=root,
                      partitioning=ds.partitioning(schema, flavor="hive"))
