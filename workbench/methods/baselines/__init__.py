"""Comparison methods without a training recipe: no retrieval, one-shot RAG, and two iterative RAG pipelines."""

from workbench.methods.base import Method
from workbench.methods.baselines.direct import Direct
from workbench.methods.baselines.rag import IRCoT, IterRetGen, VanillaRAG

DIRECT = Method(
    name="direct", title="Direct answer from parametric knowledge (no retrieval)", citation="-",
    protocol=Direct, baseline=True,
)
VANILLA_RAG = Method(
    name="vanilla_rag", title="Retrieval-Augmented Generation: retrieve once, then answer",
    citation="Lewis et al., 2020", source="arXiv:2005.11401", protocol=VanillaRAG, baseline=True,
)
ITER_RETGEN = Method(
    name="iter_retgen", title="Iter-RetGen: iterative retrieval-generation synergy",
    citation="Shao et al., 2023", source="arXiv:2305.15294", protocol=IterRetGen, baseline=True,
)
IRCOT = Method(
    name="ircot", title="IRCoT: interleaving retrieval with chain-of-thought reasoning",
    citation="Trivedi et al., 2023", source="arXiv:2212.10509", protocol=IRCoT, baseline=True,
)

METHODS = (DIRECT, VANILLA_RAG, ITER_RETGEN, IRCOT)
