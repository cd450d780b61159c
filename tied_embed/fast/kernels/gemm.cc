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

template <ffi::DataType T>
ffi::Error GemmImpl(ffi::Buffer<T> a, ffi::Buffer<T> b, bool trans_a, bool trans_b,
                    ffi::ResultBuffer<ffi::F32> out) {
  return tied_embed::Gemm<T>(a, b, nullptr, trans_a, trans_b, out, [](auto... args) { return Multiply(args...); });
}

template <ffi::DataType T>
ffi::Error GemmAccumulateImpl(ffi::Buffer<T> a, ffi::Buffer<T> b, ffi::Buffer<ffi::F32> c, bool trans_a,
                              bool trans_b, ffi::ResultBuffer<ffi::F32> out) {
  if (c.element_count() != out->element_count()) {
    return ffi::Error::InvalidArgument("mkl gemm_accumulate: the addend must have the output's shape");
  }
  return tied_embed::Gemm<T>(a, b, c.typed_data(), trans_a, trans_b, out,
                             [](auto... args) { return Multiply(args...); });
}

}  // namespace

#define PLAIN_HANDLER(NAME, DTYPE)                                   \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, GemmImpl<DTYPE>,               \
                                ffi::Ffi::Bind()                     \
                                    .Arg<ffi::Buffer<DTYPE>>()       \
                                    .Arg<ffi::Buffer<DTYPE>>()       \
                                    .Attr<bool>("trans_a")           \
                                    .Attr<bool>("trans_b")           \
                                    .Ret<ffi::Buffer<ffi::F32>>());
#define ACCUMULATE_HANDLER(NAME, DTYPE)                              \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, GemmAccumulateImpl<DTYPE>,     \
                                ffi::Ffi::Bind()                     \
                                    .Arg<ffi::Buffer<DTYPE>>()       \
                                    .Arg<ffi::Buffer<DTYPE>>()       \
                                    .Arg<ffi::Buffer<ffi::F32>>()    \
                                    .Attr<bool>("trans_a")           \
                                    .Attr<bool>("trans_b")           \
                                    .Ret<ffi::Buffer<ffi::F32>>());

PLAIN_HANDLER(F32Gemm, ffi::F32)
ACCUMULATE_HANDLER(F32GemmAccumulate, ffi::F32)
PLAIN_HANDLER(Bf16Gemm, ffi::BF16)
ACCUMULATE_HANDLER(Bf16GemmAccumulate, ffi::BF16)
