"""Sparse-softmax (Sun et al., ACL 2022, arXiv:2112.12433): the top-k softmax and its loss
(``sparse_softmax``, torch only) and top-k decoding for fairseq-generate (``decoding``)."""
