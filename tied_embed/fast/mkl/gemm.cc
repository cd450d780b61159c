// oneMKL GEMMs for XLA:CPU: float32 (cblas_sgemm, AVX-512) and bfloat16 with float32 accumulation
// (cblas_gemm_bf16bf16f32, AMX tiles on CPUs that have them). The chunked loss (tied_embed/fast/chunked_loss.py)
// calls them through jax.ffi for its three dots: XLA:CPU widens bfloat16 dots to float32, and its own float32 dot
// runs at about two thirds of oneMKL's sgemm on the chunk's shapes (benchmarks/README.md).
//
//   out (M, N) float32 = op(a) · op(b) [+ c]
//   a: (M, K), or (K, M) with trans_a;  b: (K, N), or (N, K) with trans_b;  all row-major, both float32 or both
//   bfloat16.
// The accumulating form takes c (M, N) float32 and XLA aliases it to the output, so `d_table += exp · x` is added
// in place: MKL's beta = 1, no (V, D) product written and reread.
#include <cstdint>

#include "mkl_cblas.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// (rows, cols) of a rank-2 buffer; false for any other rank.
bool Matrix(ffi::Span<const int64_t> dims, int64_t& rows, int64_t& cols) {
  if (dims.size() != 2) return false;
  rows = dims[0];
  cols = dims[1];
  return true;
}

void Multiply(const float* a, const float* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
              int64_t k, int64_t lda, int64_t ldb, float beta) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              1.0f, a, lda, b, ldb, beta, out, n);
}

void Multiply(const uint16_t* a, const uint16_t* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
              int64_t k, int64_t lda, int64_t ldb, float beta) {
  cblas_gemm_bf16bf16f32(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                         m, n, k, 1.0f, reinterpret_cast<const MKL_BF16*>(a), lda,
                         reinterpret_cast<const MKL_BF16*>(b), ldb, beta, out, n);
}

template <ffi::DataType T>
ffi::Error Gemm(ffi::Buffer<T> a, ffi::Buffer<T> b, const float* c, bool trans_a, bool trans_b,
                ffi::ResultBuffer<ffi::F32> out) {
  int64_t a_rows, a_cols, b_rows, b_cols, out_rows, out_cols;
  if (!Matrix(a.dimensions(), a_rows, a_cols) || !Matrix(b.dimensions(), b_rows, b_cols) ||
      !Matrix(out->dimensions(), out_rows, out_cols)) {
    return ffi::Error::InvalidArgument("mkl gemm: every operand must be a matrix");
  }
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t n = trans_b ? b_rows : b_cols, k_b = trans_b ? b_cols : b_rows;
  if (k != k_b || out_rows != m || out_cols != n) {
    return ffi::Error::InvalidArgument("mkl gemm: operand shapes do not match");
  }
  float* result = out->typed_data();
  if (c != nullptr && c != result) {  // not aliased: copy the addend into the output first
    for (int64_t i = 0; i < m * n; ++i) result[i] = c[i];
  }
  if (m == 0 || n == 0) return ffi::Error::Success();
  if (k == 0) {
    if (c == nullptr) for (int64_t i = 0; i < m * n; ++i) result[i] = 0.0f;
    return ffi::Error::Success();
  }
  Multiply(a.typed_data(), b.typed_data(), result, trans_a, trans_b, m, n, k, a_cols, b_cols,
           c == nullptr ? 0.0f : 1.0f);
  return ffi::Error::Success();
}

template <ffi::DataType T>
ffi::Error GemmImpl(ffi::Buffer<T> a, ffi::Buffer<T> b, bool trans_a, bool trans_b,
                    ffi::ResultBuffer<ffi::F32> out) {
  return Gemm<T>(a, b, nullptr, trans_a, trans_b, out);
}

template <ffi::DataType T>
ffi::Error GemmAccumulateImpl(ffi::Buffer<T> a, ffi::Buffer<T> b, ffi::Buffer<ffi::F32> c, bool trans_a,
                              bool trans_b, ffi::ResultBuffer<ffi::F32> out) {
  if (c.element_count() != out->element_count()) {
    return ffi::Error::InvalidArgument("mkl gemm_accumulate: the addend must have the output's shape");
  }
  return Gemm<T>(a, b, c.typed_data(), trans_a, trans_b, out);
}

}  // namespace

#define GEMM_HANDLERS(NAME, DTYPE)                                                                      \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, GemmImpl<DTYPE>,                                                  \
                                ffi::Ffi::Bind()                                                        \
                                    .Arg<ffi::Buffer<DTYPE>>()                                          \
                                    .Arg<ffi::Buffer<DTYPE>>()                                          \
                                    .Attr<bool>("trans_a")                                              \
                                    .Attr<bool>("trans_b")                                              \
                                    .Ret<ffi::Buffer<ffi::F32>>());                                     \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME##Accumulate, GemmAccumulateImpl<DTYPE>,                            \
                                ffi::Ffi::Bind()                                                        \
                                    .Arg<ffi::Buffer<DTYPE>>()                                          \
                                    .Arg<ffi::Buffer<DTYPE>>()                                          \
                                    .Arg<ffi::Buffer<ffi::F32>>()                                       \
                                    .Attr<bool>("trans_a")                                              \
                                    .Attr<bool>("trans_b")                                              \
                                    .Ret<ffi::Buffer<ffi::F32>>());

GEMM_HANDLERS(F32Gemm, ffi::F32)
GEMM_HANDLERS(Bf16Gemm, ffi::BF16)
