"""Packed documents: attention over document-masked packs follows Σ lᵢ², not the pack's s².

Training data is packed: documents laid end to end into sequences of s tokens. With document
masking (FlashAttention's variable-length kernels over ``cu_seqlens``, Transformer Engine's
``thd`` format, PyTorch's flex attention with a document mask) a token attends only within its
own document, so a pack of documents l₁, l₂, … computes Σᵢ P(lᵢ) (query, key) pairs, P the pairs
of one sequence (:func:`model.attention.attended_pairs`: lᵢ(lᵢ + 1)/2 causal, lᵢ² with the full
score matrix), instead of P(s). The matmuls, norms and every other token-linear term are
unchanged (they follow Σ lᵢ = s).

Megatron-LM counts the FLOPs so since it tracks packed batches (``megatron/training/
training.py``: ``update_seqlen_stats_from_cu_seqlens`` accumulates Σ Lᵢ and Σ Lᵢ² from the
real ``cu_seqlens``; ``num_floating_point_operations(…, seqlen_squared_sum_in_batch)`` puts
Σ Lᵢ² into the core-attention term ``2·Σ Lᵢ²·h·p`` where the unpacked formula has
``batch·s²``). A counter that treats the pack as one sequence reports the s² figure: MFU is
then overstated by the attention pairs the mask skipped. The planner reports both
(:func:`pack_pair_ratio` gives the factor).

The input is the document-length distribution (:class:`Documents`): a histogram of lengths with
weights (document counts), or a mean and a spread, read as the two-point histogram μ ± σ (equal
weights), which has exactly that mean and standard deviation. The expected pairs per pack are
``s · E[P(l)] / E[l]`` (:func:`packed_pairs`): a pack of s tokens holds s / E[l] documents on
average (weighting documents by count, a token lands in a document of length l with probability
l·w(l)/Σ l·w). A document longer than the pack is cut into pieces of s tokens and a remainder,
each attending only within itself (Megatron's ``GPTDataset`` cuts documents at sample
boundaries).

Exact under that model for a histogram; for global layers P depends on l and l² only, so a mean
and spread are exact too when no document exceeds s; for sliding-window and chunked layers the
two-point reading is an approximation. Not modelled: documents cut at the pack's end into a
piece and the next pack's start (the expectation over the random offset would lower Σ lᵢ²
slightly), padding at a pack's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.attention import AttentionSpan, attended_pairs
from trainplan.model.errors import InputError

__all__ = ["Documents", "document_pairs", "packed_pairs", "pack_pair_ratio"]


@dataclass(frozen=True, slots=True)
class Documents:
    """The lengths of the documents packed into each sequence, as a histogram.

    ``lengths`` — document lengths in tokens (each ≥ 1); ``weights`` — how many documents of each
    length (relative counts, each > 0; the same number of entries). Hashable, so the FLOPs
    caches can key on it.

    Raises
    ------
    InputError
        Empty, of unequal lengths, a length below 1 or a weight not above 0 (one line naming
        ``document_lengths``).
    """

    lengths: tuple[int, ...]
    weights: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        if not self.lengths or len(self.lengths) != len(self.weights):
            raise InputError(
                "document_lengths: give lengths and as many weights (a histogram), or a mean "
                "and a spread"
            )
        for n in self.lengths:
            if not isinstance(n, int) or n < 1:
                raise InputError(f"document_lengths: length {n!r} must be a whole number >= 1")
        for w in self.weights:
            if not w > 0:
                raise InputError(f"document_lengths: weight {w} must be above 0")

    @classmethod
    def histogram(cls, pairs: Sequence[tuple[int, float | int | Fraction]]) -> Documents:
        """From (length, count) pairs.

        >>> Documents.histogram([(512, 3), (2048, 1)]).mean_length
        Fraction(896, 1)
        """
        return cls(tuple(int(n) for n, _ in pairs), tuple(Fraction(w) for _, w in pairs))

    @classmethod
    def mean_spread(cls, mean: float | int, spread: float | int = 0) -> Documents:
        """The two-point histogram μ − σ, μ + σ with equal weights: mean μ, standard deviation
        σ (whole tokens). σ = 0 is every document of length μ.

        Raises
        ------
        InputError
            μ − σ below 1 (a document has at least one token).

        >>> Documents.mean_spread(1000, 400).lengths
        (600, 1400)
        """
        lo, hi = round(mean - spread), round(mean + spread)
        if lo < 1:
            raise InputError(
                f"document_lengths: mean {mean:g} minus spread {spread:g} must be at least 1 "
                "token (give a histogram for a skewed distribution)"
            )
        if lo == hi:
            return cls((lo,), (Fraction(1),))
        return cls((lo, hi), (Fraction(1), Fraction(1)))

    @property
    def mean_length(self) -> Fraction:
        """E[l], weighting documents by count (tokens)."""
        return sum(
            (w * n for n, w in zip(self.lengths, self.weights, strict=True)), Fraction(0)
        ) / sum(self.weights)


def document_pairs(
    span: AttentionSpan, length: int, seq_len: int, width: int | None, causal: bool
) -> int:
    """(query, key) pairs one document of ``length`` tokens computes in packs of ``seq_len``: cut
    into ⌊l/s⌋ pieces of s and a remainder r, each attending within itself:
    ``⌊l/s⌋·P(s) + P(r)`` (:func:`model.attention.attended_pairs`).

    >>> document_pairs(AttentionSpan.GLOBAL, 10, 4, None, causal=True)  # 2·(4·5/2) + 2·3/2
    23
    """
    q, r = divmod(length, seq_len)
    pieces = q * attended_pairs(span, seq_len, width, causal)
    return pieces + (attended_pairs(span, r, width, causal) if r else 0)


def packed_pairs(
    span: AttentionSpan, seq_len: int, width: int | None, causal: bool, docs: Documents
) -> Fraction:
    """Expected (query, key) pairs of one pack of ``seq_len`` tokens under document masking:
    ``s · Σ w·P(l) / Σ w·l`` (:func:`document_pairs`). Exact for the histogram.

    Examples
    --------
    Packs of 8,192 tokens of documents of 2,048 tokens (four per pack), causal, global:
    4 · 2,048·2,049/2 = 8,392,704 pairs, against 8,192·8,193/2 = 33,558,528 for one sequence.

    >>> packed_pairs(AttentionSpan.GLOBAL, 8192, None, True, Documents.mean_spread(2048))
    Fraction(8392704, 1)

    Half the documents 1,024 and half 3,072 tokens (mean 2,048, spread 1,024): the full score
    matrix's count is s·E[l²]/E[l] = 8,192 · (1,024² + 3,072²)/2 / 2,048 = 20,971,520.

    >>> packed_pairs(AttentionSpan.GLOBAL, 8192, None, False, Documents.mean_spread(2048, 1024))
    Fraction(20971520, 1)
    """
    pairs = sum(
        (
            w * document_pairs(span, n, seq_len, width, causal)
            for n, w in zip(docs.lengths, docs.weights, strict=True)
        ),
        Fraction(0),
    )
    tokens = sum((w * n for n, w in zip(docs.lengths, docs.weights, strict=True)), Fraction(0))
    return seq_len * pairs / tokens


def pack_pair_ratio(
    span: AttentionSpan, seq_len: int, width: int | None, causal: bool, docs: Documents
) -> Fraction:
    """:func:`packed_pairs` ÷ the pairs of the pack as one sequence: the share of a layer's
    attention-core FLOPs and time that document masking keeps (1 for documents at least as long
    as the pack).

    >>> pack_pair_ratio(AttentionSpan.GLOBAL, 8192, None, False, Documents.mean_spread(2048))
    Fraction(1, 4)
    """
    return packed_pairs(span, seq_len, width, causal, docs) / attended_pairs(
        span, seq_len, width, causal
    )


def kernel_length(seq_len: int, docs: Documents | None) -> float:
    """The length a variable-length attention kernel's published rate is read at for packs of
    ``seq_len`` tokens: ``seq_len`` without documents; with them, each document's pieces
    (at most ``seq_len`` long) weighted by the causal pairs they compute, ``Σ w·P(l)·l / Σ
    w·P(l)`` with ``P(l) = l(l + 1)/2`` — the length where the kernel's work sits (the kernel
    runs each document as its own sequence; FlashAttention's ``flash_attn_varlen_func``).

    >>> kernel_length(8192, Documents.mean_spread(2048))
    2048.0
    >>> kernel_length(8192, None)
    8192.0

    Half 1,024 and half 3,072 tokens: P = 524,800 and 4,720,128 pairs, so
    (524,800·1,024 + 4,720,128·3,072) / 5,244,928 = 2,867.08 tokens (the long documents hold
    nine tenths of the work).

    >>> round(kernel_length(8192, Documents.mean_spread(2048, 1024)), 2)
    2867.08
    """
    if docs is None:
        return float(seq_len)
    work = length_work = Fraction(0)
    for n, w in zip(docs.lengths, docs.weights, strict=True):
        q, r = divmod(n, seq_len)  # the pieces document_pairs cuts
        for piece, count in ((seq_len, q), (r, 1 if r else 0)):
            pairs = w * count * attended_pairs(AttentionSpan.GLOBAL, piece, None, True)
            work += pairs
            length_work += pairs * piece
    return float(length_work / work)
