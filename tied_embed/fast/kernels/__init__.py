"""The step's C++ kernels for XLA:CPU (jax.ffi): the chunked loss's GEMMs on oneMKL and oneDNN (gemm.py) and AdamW's
one-pass update (fused_adamw.py), built by `make kernels` (build.py) and loaded only once checked (library.py).
Without them the step runs XLA's own code; `in_use.kernel_set` names those a run uses."""
