"""The step's C++ kernels for XLA:CPU (jax.ffi): the chunked loss's GEMMs (gemm.py), AdamW's update (fused_adamw.py)."""
