// oneMKL's GEMMs for XLA:CPU: float32 (cblas_sgemm, AVX-512) and bfloat16 with float32 accumulation
// (cblas_gemm_bf16bf16f32, AMX tiles on CPUs that have them). The chunked loss (tied_embed/fast/chunked_loss.py)
// calls them through jax.ffi for its three dots: XLA:CPU widens bfloat16 dots to float32, and its own float32 dot
// runs at about two thirds of oneMKL's sgemm on the chunk's shapes (benchmarks/README.md). The bfloat16 logits
// E·xᵀ, where oneMKL's bfloat16 GEMM is slowest, run on oneDNN instead (gemm_onednn.cc). Shapes and aliasing:
// gemm.h.
#include <cstdint>

#include "gemm.h"
#include "mkl_cblas.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error Multiply(const float* a, const float* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, int64_t lda, int64_t ldb, float beta) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              1.0f, a, lda, b, ldb, beta, out, n);
  return ffi::Error::Success();
}

ffi::Error Multiply(const uint16_t* a, const uint16_t* b, float* out, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, int64_t lda, int64_t ldb, float beta) {
  cblas_gemm_bf16bf16f32(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                         m, n, k, 1.0f, reinterpret_cast<const MKL_BF16*>(a), lda,
                         reinterpret_cast<const MKL_BF16*>(b), ldb, beta, out, n);
  return ffi::Error::Success();
}

}  // namespace

TIED_EMBED_GEMM_HANDLERS()
