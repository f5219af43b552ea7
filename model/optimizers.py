"""Optimizers other than Adam: what each keeps per parameter, what its step moves and computes,
and which frameworks run it.

Every optimizer here keeps an FP32 master copy of the weights beside the 16-bit working copy
(mixed precision; Rajbhandari et al. 2019 §3.1), 4 B per parameter, and its own state:

* ``adam`` — two FP32 moments, 12 B/param with the master (the planner's default; the
  ``optimizer_dtype``/``master_weights`` inputs still size it).
* ``adam-8bit`` — bitsandbytes' 8-bit Adam (``bitsandbytes/optim/optimizer.py``,
  ``Optimizer2State.init_state``): both moments as ``uint8`` (1 B each) with one FP32
  ``absmax`` scale per block of 256 elements for each (``blocksize = 256``): 2 + 8/256 B; a
  tensor under ``min_8bit_size`` = 4,096 elements keeps FP32 moments. Hugging Face's
  ``Trainer`` registers every ``nn.Embedding`` for 32-bit optimizer state
  (``GlobalOptimManager.register_module_override(module, "weight", {"optim_bits": 32})`` when
  the optimizer is a bitsandbytes one), so the embeddings keep 8 B of moments.
* ``adafactor`` — Shazeer & Stern 2018 (arXiv 1804.04235) §3, as ``torch.optim.Adafactor`` and
  Hugging Face's ``Adafactor`` (``beta1=None``) run it: no first moment; a matrix keeps its second
  moment factored, a row vector and a column vector (m + n FP32 values), a vector keeps it whole.
* ``lion`` — Chen et al. 2023 (arXiv 2302.06675), Algorithm 2: one FP32 momentum.
* ``muon`` — Jordan et al. (github.com/KellerJordan/Muon ``muon.py``; Megatron-Core
  ``--optimizer muon``, ``emerging_optimizers``): one FP32 momentum per hidden matrix, whose
  update is orthogonalised by 5 Newton–Schulz iterations over the WHOLE matrix (Megatron-Core's
  default ``--muon-tp-mode duplicated``; under ``blockwise``, over each tensor-parallel block:
  :func:`model.muon.muon_tp_gathers`; that step's work and transients are :mod:`model.muon`'s);
  every other parameter (embeddings, output layer, norms, biases) is stepped by AdamW
  (Megatron-Core's ``_is_muon_excluded`` routes them to ``adam``; ``MuonWithAuxAdam``).
* ``soap`` — Vyas et al. 2024 (arXiv 2409.11321), Algorithm 1: Adam's two moments in the
  eigenbasis of Shampoo's preconditioner, plus per matrix the two preconditioners L (m × m),
  R (n × n) and their eigenbases Q_L, Q_R, all FP32. Which matrices, and whether a wide side is
  skipped, is the profile's code (:func:`soap_preconditions_every_side`): Megatron-Core's
  ``--optimizer soap`` is Emerging-Optimizers' ``SOAP`` (the version Megatron-LM pins, v0.3.0),
  which preconditions every side of every 2-D parameter as the module holds it on its tp rank
  (the fused ``linear_qkv`` one matrix); the ``textbook`` profile runs the reference
  ``soap.py``, whose ``max_precond_dim = 10000`` leaves a wider side unpreconditioned. The step's
  transients are :mod:`model.soap`'s. The embedding and output layer are counted with Adam's
  state, as under Muon.

Which parameters are matrices (:class:`ParamClass`): Megatron-Core's Muon takes every 2-D
parameter but the embedding and output layer (``is_managed_by_layer_wise_optimizer``:
``param.dim() == 2`` and not ``is_embedding_or_output_parameter``): the linear layers, the MoE
router and the routed experts. Norms and biases are vectors.

Frameworks (:func:`check_optimizer`): Megatron-LM's ``--optimizer`` choices are ``adam, sgd,
muon, dist_muon, lion, soap, adaptive_muon`` (``megatron/training/arguments.py``); DeepSpeed's
config names ``adam, adamw, lamb, onebitadam, zerooneadam, onebitlamb, muadam, muadamw, musgd,
lion, muon`` (``deepspeed/runtime/config.py``); torchtitan's optimizer builder ``Adam, AdamW,
DistMuon`` (``torchtitan/components/optimizer/optimizer.py``
``_resolve_optimizer_factory``). 8-bit Adam and Adafactor run under none of the three (Hugging
Face ``Trainer`` over DDP): the ``textbook`` profile only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from trainplan.model.errors import LayoutError
from trainplan.model.specs import Architecture, AttentionKind

__all__ = [
    "OptimizerKind",
    "ParamClass",
    "RUNS_UNDER",
    "MASTER_BYTES",
    "BNB_BLOCK",
    "BNB_MIN_8BIT_SIZE",
    "SOAP_MAX_PRECOND_DIM",
    "soap_preconditions_every_side",
    "check_optimizer",
    "element_bytes",
    "Matrix",
    "layer_matrices",
    "matrix_extra_bytes",
    "optimizer_step_bytes",
    "state_bytes",
    "stage_state_split",
    "optimizer_scale",
]

MASTER_BYTES = 4
"""The FP32 master copy every optimizer here keeps beside the 16-bit weights."""

BNB_BLOCK = 256
"""Elements per FP32 ``absmax`` scale of bitsandbytes' 8-bit state (``blocksize = 256`` in
``Optimizer2State.init_state``)."""

BNB_MIN_8BIT_SIZE = 4096
"""Tensors under this many elements keep 32-bit state (``min_8bit_size=4096``)."""

SOAP_MAX_PRECOND_DIM = 10_000
"""Under the reference SOAP (the ``textbook`` profile), a matrix dimension wider than this gets
no preconditioner on that side (Vyas et al.'s reference ``soap.py``: ``max_precond_dim=10000``;
the side keeps the identity). Megatron-Core's SOAP has no such cap
(:func:`soap_preconditions_every_side`)."""


def soap_preconditions_every_side(framework: str) -> bool:
    """Whether ``framework``'s SOAP keeps L, R, Q_L and Q_R for every side of every matrix, as
    the module holds the matrix on its tensor-parallel rank (Megatron-Core), rather than the
    reference ``soap.py``'s rule (:data:`SOAP_MAX_PRECOND_DIM`; Q, K and V as separate
    matrices, as the ``textbook`` profile lists them).

    Megatron-Core (``megatron/core/optimizer/emerging_optimizers.py``) registers
    Emerging-Optimizers' ``SOAP`` for ``--optimizer soap`` with the default parameter override
    (``_is_nonlinear_or_embedding`` → Adam: every other 2-D parameter is SOAP's) and hands it the
    module's own parameters: the tp-local shard of ``linear_qkv`` (Q, K and V fused,
    ``[(a + 2g)·d/tp, h]``; the QKV split is Muon's ``orthogonalize`` only), of ``linear_fc1``
    (gate and up fused) and of every other linear layer. Emerging-Optimizers v0.3.0 (the rev
    Megatron-LM's ``pyproject.toml`` pins) ``emerging_optimizers/soap/soap.py``
    ``SOAP._init_group``: ``exp_avg`` and ``exp_avg_sq`` FP32 like the parameter,
    ``init_kronecker_factors`` L = ``zeros(m, m)`` and R = ``zeros(n, n)``, Q_L = ``eye(m)``,
    Q_R = ``eye(n)``, all in the default dtype (FP32), for any m and n (no dimension limit).
    (Later Emerging-Optimizers, ``legacy_soap/soap.py``, also keeps ``eigvals_L`` and
    ``eigvals_R``, m + n FP32 values; Megatron-LM imports ``emerging_optimizers.soap``, the
    v0.3 path.)

    >>> soap_preconditions_every_side("megatron"), soap_preconditions_every_side("textbook")
    (True, False)
    """
    return str(framework) == "megatron"


class OptimizerKind(StrEnum):
    """The optimizer whose state and step the plan counts (module docstring)."""

    ADAM = "adam"
    ADAM_8BIT = "adam-8bit"
    ADAFACTOR = "adafactor"
    LION = "lion"
    MUON = "muon"
    SOAP = "soap"


class ParamClass(StrEnum):
    """How an optimizer treats a parameter: a hidden ``matrix`` (2-D, not the embedding or
    output layer), the ``embedding`` / output layer, or a ``vector`` (norms, biases)."""

    MATRIX = "matrix"
    EMBEDDING = "embedding"
    VECTOR = "vector"


RUNS_UNDER: dict[OptimizerKind, tuple[str, ...]] = {
    OptimizerKind.ADAM: ("megatron", "deepspeed", "fsdp2", "textbook"),
    OptimizerKind.ADAM_8BIT: ("textbook",),
    OptimizerKind.ADAFACTOR: ("textbook",),
    OptimizerKind.LION: ("megatron", "deepspeed", "textbook"),
    OptimizerKind.MUON: ("megatron", "fsdp2", "textbook"),
    OptimizerKind.SOAP: ("megatron", "textbook"),
}
"""The framework profiles that run each optimizer (the module docstring's sources). DeepSpeed
lists ``muon`` too, but its ZeRO partitions are flat, not whole matrices; how it gathers them is
not modelled, so it is refused."""


def check_optimizer(kind: OptimizerKind | str, framework: str, zero_stage: int) -> None:
    """Check that ``framework`` runs ``kind`` at ``zero_stage``.

    Megatron-Core builds Muon and SOAP through its emerging-optimizer path, which refuses
    Megatron FSDP (``NotImplementedError("MFSDP v2 with emerging optimizers …")``); under the
    distributed optimizer (ZeRO-1) it shards them layer-wise (``LayerWiseDistributedOptimizer``:
    whole parameters per data-parallel rank). Megatron-FSDP (``--zero 3``) takes Adam (or SGD)
    only (Megatron-LM d98e8a64 ``megatron/training/arguments.py`` ``validate_args``:
    ``assert args.optimizer in ('sgd', 'adam')`` under ``use_megatron_fsdp``), so Lion runs at
    ZeRO 0 or 1 there.

    Raises
    ------
    LayoutError
        One line naming ``optimizer``, the framework and who runs it.

    Examples
    --------
    >>> check_optimizer("muon", "megatron", 1)
    >>> check_optimizer("lion", "megatron", 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: optimizer: lion under megatron runs at ZeRO 0 or 1 ...
    >>> check_optimizer("adam-8bit", "megatron", 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: optimizer: adam-8bit does not run under megatron ...
    """
    k = OptimizerKind(kind)
    fw = str(framework)
    if fw not in RUNS_UNDER[k]:
        raise LayoutError(
            f"optimizer: {k} does not run under {fw} (it runs under {', '.join(RUNS_UNDER[k])})"
        )
    if fw == "megatron" and k in (OptimizerKind.MUON, OptimizerKind.SOAP) and zero_stage > 1:
        raise LayoutError(
            f"optimizer: {k} under megatron runs at ZeRO 0 or 1 (Megatron-Core's emerging "
            "optimizers refuse Megatron FSDP)"
        )
    if fw == "megatron" and zero_stage == 3 and k is not OptimizerKind.ADAM:
        raise LayoutError(
            f"optimizer: {k} under megatron runs at ZeRO 0 or 1 (Megatron-FSDP, ZeRO-3, takes "
            "adam or sgd only: Megatron-LM megatron/training/arguments.py validate_args)"
        )


def element_bytes(kind: OptimizerKind | str, cls: ParamClass, adam_bytes: int = 12) -> Fraction:
    """Optimizer-state bytes per parameter element of class ``cls`` (the FP32 master included;
    the per-matrix extras of :func:`matrix_extra_bytes` not): ``adam_bytes`` for Adam (the
    planner's ``optimizer_bytes``) and for what another optimizer steps with AdamW.

    Examples
    --------
    8-bit Adam on a matrix: 4 + 2·1 + 2·4/256 = 6.03125; on the embedding (32-bit): 12.

    >>> element_bytes("adam-8bit", ParamClass.MATRIX), element_bytes("adam-8bit", "embedding")
    (Fraction(193, 32), Fraction(12, 1))
    >>> [element_bytes(k, ParamClass.MATRIX) for k in ("lion", "muon", "adafactor", "soap")]
    [Fraction(8, 1), Fraction(8, 1), Fraction(4, 1), Fraction(12, 1)]
    """
    k, c = OptimizerKind(kind), ParamClass(cls)
    adam = Fraction(adam_bytes)
    if k is OptimizerKind.ADAM_8BIT:
        if c is ParamClass.MATRIX:
            return MASTER_BYTES + 2 + Fraction(2 * 4, BNB_BLOCK)
        return adam  # embeddings (Trainer's override) and vectors under 4,096 elements
    if k is OptimizerKind.ADAFACTOR:
        # factored second moment of a 2-D tensor: per matrix (matrix_extra_bytes)
        return Fraction(MASTER_BYTES + (4 if c is ParamClass.VECTOR else 0))
    if k is OptimizerKind.LION:
        return Fraction(MASTER_BYTES + 4)
    if k is OptimizerKind.MUON:
        return Fraction(MASTER_BYTES + 4) if c is ParamClass.MATRIX else adam
    if k is OptimizerKind.SOAP:
        return Fraction(MASTER_BYTES + 8) if c is ParamClass.MATRIX else adam
    return adam


@dataclass(frozen=True, slots=True)
class Matrix:
    """A weight matrix of ``rows`` × ``cols`` elements (output × input, PyTorch's layout),
    ``count`` of them per layer; ``split`` the dimension tensor parallelism divides (0 rows:
    column-parallel; 1 cols: row-parallel; None: held whole on every tp rank)."""

    rows: int
    cols: int
    count: int = 1
    split: int | None = 0
    expert: bool = False
    """A routed expert's matrix (divided over etp·ep, not tp)."""

    def local(self, tp: int) -> tuple[int, int]:
        """(rows, cols) on one tensor-parallel rank of ``tp`` (etp for an expert)."""
        if self.split == 0:
            return self.rows // tp, self.cols
        if self.split == 1:
            return self.rows, self.cols // tp
        return self.rows, self.cols


def _ffn(h: int, f: int, gated: bool, count: int, expert: bool) -> list[Matrix]:
    """An FFN's fc1 (Megatron-Core fuses SwiGLU's gate and up: 2f × h) and fc2 (h × f)."""
    return [
        Matrix((2 if gated else 1) * f, h, count, 0, expert),
        Matrix(h, f, count, 1, expert),
    ]


def layer_matrices(arch: Architecture, index: int, fused_qkv: bool = False) -> tuple[Matrix, ...]:
    """The weight matrices of layer ``index``, as Megatron-Core's Muon splits them
    (``--muon-split-qkv`` on by default: Q, K and V apart; fc1 fused); with ``fused_qkv``, as
    the module holds them (Megatron-Core's ``linear_qkv``, one ``(a + 2g)·d × h`` matrix,
    column-parallel: what its SOAP preconditions, :func:`soap_preconditions_every_side`).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> sum(m.rows * m.cols * m.count for m in layer_matrices(gpt, 0)) == 4 * 64 + 2 * 8 * 32
    True
    >>> layer_matrices(gpt, 0, fused_qkv=True)[0]
    Matrix(rows=24, cols=8, count=1, split=0, expert=False)
    """
    h, a = arch.hidden_size, arch.num_attention_heads
    gated = arch.mlp.gated
    out: list[Matrix] = []
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            out.append(Matrix(a * qk, h))
        else:
            out += [Matrix(m.q_lora_rank, h, split=None), Matrix(a * qk, m.q_lora_rank)]
        out += [
            Matrix(m.kv_lora_rank + m.qk_rope_head_dim, h, split=None),
            Matrix(a * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
            Matrix(h, a * m.v_head_dim, split=1),
        ]
    else:
        d, g = arch.dim_per_head, arch.kv_heads
        qkv = [Matrix((a + 2 * g) * d, h)] if fused_qkv else [Matrix(a * d, h), Matrix(g * d, h, 2)]
        out += qkv + [Matrix(h, a * d, split=1)]
    if not arch.is_moe_layer(index):
        return tuple(out + _ffn(h, arch.ffn_hidden_size, gated, 1, False))
    spec = arch.moe
    assert spec is not None
    out.append(Matrix(spec.num_experts, h, split=None))  # the router
    out += _ffn(h, spec.expert_ffn_hidden_size, gated, spec.num_experts, True)
    if spec.num_shared_experts:
        out += _ffn(h, spec.shared_ffn, gated, spec.num_shared_experts, False)
    return tuple(out)


def matrix_extra_bytes(
    kind: OptimizerKind | str, rows: int, cols: int, framework: str = "textbook"
) -> int:
    """State one matrix of ``rows`` × ``cols`` keeps beyond :func:`element_bytes` × its
    elements: Adafactor's factored second moment, one FP32 value per row and per column,
    ``4·(m + n)``; SOAP's FP32 preconditioner and eigenbasis of each side, ``8·m²`` and
    ``8·n²`` — under ``framework``'s SOAP (:func:`soap_preconditions_every_side`) every side,
    under the reference one a side no wider than :data:`SOAP_MAX_PRECOND_DIM`; 0 for the others.

    >>> matrix_extra_bytes("adafactor", 4096, 4096), matrix_extra_bytes("soap", 4096, 4096)
    (32768, 268435456)
    >>> matrix_extra_bytes("soap", 28672, 4096) == 8 * 4096**2  # the 28,672 side: identity
    True
    >>> matrix_extra_bytes("soap", 28672, 4096, "megatron") == 8 * (28672**2 + 4096**2)
    True
    """
    k = OptimizerKind(kind)
    if k is OptimizerKind.ADAFACTOR:
        return 4 * (rows + cols)
    if k is OptimizerKind.SOAP:
        every = soap_preconditions_every_side(framework)
        return sum(8 * n * n for n in (rows, cols) if every or n <= SOAP_MAX_PRECOND_DIM)
    return 0


def optimizer_step_bytes(state_bytes: Fraction | int, weight_bytes: int) -> Fraction:
    """HBM bytes one optimizer step moves per element: reads and writes its state
    (2 × ``state_bytes``, the master included), reads the FP32 gradient (4), writes the working
    weight (``weight_bytes``), and the clip's read and the zeroing's write of the gradient (8):
    :func:`model.offload.adam_step_bytes`' rule with another optimizer's state.

    >>> optimizer_step_bytes(12, 2), optimizer_step_bytes(Fraction(193, 32), 2)
    (Fraction(38, 1), Fraction(417, 16))
    """
    return 2 * Fraction(state_bytes) + 4 + weight_bytes + 8


def state_bytes(
    kind: OptimizerKind | str,
    arch: Architecture,
    layers: Iterable[int],
    tp: int = 1,
    etp: int = 1,
    ep: int = 1,
    embedding: int | Fraction = 0,
    vectors: int | Fraction = 0,
    adam_bytes: int = 12,
    framework: str = "textbook",
) -> Fraction:
    """Optimizer-state bytes (master included) of ``layers``' matrices on one tensor-parallel
    rank (others over ``tp`` along their :attr:`Matrix.split`; routed experts over ``etp``
    so, and their number over ``ep``), plus ``embedding`` and ``vectors`` elements (already divided): the
    elements × :func:`element_bytes` of their class, plus :func:`matrix_extra_bytes` of each
    local matrix, as ``framework``'s optimizer sees them (:func:`_matrices`). Before ZeRO; exact.

    Examples
    --------
    Llama 3 8B under 8-bit Adam: 32 layers of 218,103,808 matrix elements at 193/32 B, the
    embedding and output layer (2 × 128,256 × 4,096) and 266,240 norm weights at 12 B.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-8b").model.arch
    >>> state_bytes("adam-8bit", arch, range(32), embedding=1_050_673_152, vectors=266_240)
    Fraction(54705307648, 1)
    """
    k = OptimizerKind(kind)
    (d_el, d_ex), (e_el, e_ex) = _matrices(k, arch, tuple(layers), tp, etp, ep, framework)
    total = (d_el + e_el) * element_bytes(k, ParamClass.MATRIX, adam_bytes) + d_ex + e_ex
    total += embedding * element_bytes(k, ParamClass.EMBEDDING, adam_bytes)
    return total + vectors * element_bytes(k, ParamClass.VECTOR, adam_bytes)


def _matrices(
    kind: OptimizerKind,
    arch: Architecture,
    layers: Iterable[int],
    tp: int,
    etp: int,
    ep: int,
    framework: str = "textbook",
) -> tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]:
    """((dense matrix elements, their extra bytes), (expert ones)) of ``layers`` on one GPU;
    Q, K and V one matrix where ``framework``'s SOAP sees the fused module
    (:func:`soap_preconditions_every_side`)."""
    fused = kind is OptimizerKind.SOAP and soap_preconditions_every_side(framework)
    d_el = d_ex = e_el = e_ex = Fraction(0)
    for j in layers:
        for m in layer_matrices(arch, j, fused):
            rows, cols = m.local(etp if m.expert else tp)
            count = Fraction(m.count, ep) if m.expert else Fraction(m.count)
            extra = count * matrix_extra_bytes(kind, rows, cols, framework)
            if m.expert:
                e_el, e_ex = e_el + count * rows * cols, e_ex + extra
            else:
                d_el, d_ex = d_el + count * rows * cols, d_ex + extra
    return (d_el, d_ex), (e_el, e_ex)


def stage_state_split(
    kind: OptimizerKind | str,
    arch: Architecture,
    layers: Iterable[int],
    tp: int,
    etp: int,
    ep: int,
    embedding: Fraction | int,
    dense: Fraction | int,
    experts: Fraction | int,
    adam_bytes: int = 12,
    framework: str = "textbook",
) -> tuple[Fraction, Fraction]:
    """(dense, routed-expert) optimizer-state bytes on one GPU of a pipeline stage before ZeRO,
    for a stage holding ``dense`` and ``experts`` parameter elements on the GPU (after tp, etp,
    ep), of which ``embedding`` are its input-embedding / output-layer elements: the stage's
    matrices (:func:`layer_matrices` of ``layers``, as ``framework``'s optimizer sees them) by
    :func:`element_bytes` and :func:`matrix_extra_bytes`, the embedding by its class, and what is left (norms, biases) as
    vectors. Under Adam: ``adam_bytes`` × each (the planner's figure before optimizers were
    named). What ZeRO shards is this over D (dense) and D_e (experts).

    Examples
    --------
    Llama 3 8B's stage 0 of pp 4 at tp 1 (layers 0–7, the input embedding 525,336,576 and 16
    norm weights of 4,096): under Muon 8 B × 8 × 218,103,808 + 12 × (525,336,576 + 65,536).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-8b").model.arch
    >>> dense = 8 * 218_103_808 + 525_336_576 + 16 * 4096
    >>> stage_state_split("muon", arch, range(8), 1, 1, 1, 525_336_576, dense, 0)
    (Fraction(20263469056, 1), Fraction(0, 1))
    >>> stage_state_split("adam", arch, range(8), 1, 1, 1, 525_336_576, dense, 0)[0] == 12 * dense
    True
    """
    k = OptimizerKind(kind)
    if k is OptimizerKind.ADAM:
        return Fraction(adam_bytes) * dense, Fraction(adam_bytes) * experts
    (d_el, d_ex), (e_el, e_ex) = _matrices(k, arch, tuple(layers), tp, etp, ep, framework)
    mat = element_bytes(k, ParamClass.MATRIX, adam_bytes)
    vec = element_bytes(k, ParamClass.VECTOR, adam_bytes)
    emb = element_bytes(k, ParamClass.EMBEDDING, adam_bytes)
    d_vec = Fraction(dense) - d_el - embedding
    e_vec = Fraction(experts) - e_el
    return (
        d_el * mat + d_ex + embedding * emb + d_vec * vec,
        e_el * mat + e_ex + e_vec * vec,
    )


def optimizer_scale(
    kind: OptimizerKind | str,
    arch: Architecture | None,
    layers: Iterable[int],
    tp: int,
    etp: int,
    ep: int,
    embedding: Fraction | int,
    dense: Fraction | int,
    experts: Fraction | int,
    adam_bytes: int,
    framework: str = "textbook",
) -> tuple[Fraction, Fraction]:
    """(dense, expert) factors that turn Adam's ``adam_bytes`` per element of optimizer state
    into ``kind``'s as ``framework`` runs it (:func:`stage_state_split` ÷ ``adam_bytes`` ×
    elements): what
    :func:`model.memory.state_terms` multiplies its optimizer term by. (1, 1) for Adam, and for a
    model without layers (a size only, refused for other optimizers upstream) or a stage with none.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-8b").model.arch
    >>> dense = 32 * 218_103_808 + 2 * 525_336_576 + 266_240
    >>> optimizer_scale("lion", arch, range(32), 1, 1, 1, 2 * 525_336_576, dense, 0, 12)
    (Fraction(2, 3), Fraction(1, 1))
    """
    k = OptimizerKind(kind)
    if k is OptimizerKind.ADAM or arch is None or not adam_bytes:
        return Fraction(1), Fraction(1)
    d, e = stage_state_split(
        k, arch, layers, tp, etp, ep, embedding, dense, experts, adam_bytes, framework
    )
    return (
        d / (adam_bytes * Fraction(dense)) if dense else Fraction(1),
        e / (adam_bytes * Fraction(experts)) if experts else Fraction(1),
    )
