"""ReLUFormer (Shen et al., arXiv:2302.06461): ReLU attention with variance reduction, its
regularisers, the FFN-as-memory variants, and the ``relu_former`` model.

``kernels/`` and ``activations`` import with torch alone; ``attention``, ``memory_ffn`` and
``model`` are the fairseq glue that calls them.
"""
