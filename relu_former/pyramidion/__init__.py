"""Transpooler and Pyramidion (Pietruszka et al., ACL 2022, arXiv:2009.05169): the
successive-halving soft top-k (``successive_halving``, torch only), the pooling layer and
blockwise attention, and the ``pyramidion`` model."""
