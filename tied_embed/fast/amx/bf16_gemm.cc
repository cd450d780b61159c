// A bfloat16 GEMM with float32 accumulation for XLA:CPU, through oneMKL's cblas_gemm_bf16bf16f32 (AMX tiles on
// CPUs that have them). XLA:CPU widens bfloat16 dot operands to float32 before every dot, so a bfloat16 dot
// written in JAX runs at float32 speed; this handler is called from the chunked loss (tied_embed/fast/chunked_loss.py)
// through jax.ffi instead.
//
//   out (M, N) float32 = op(a) · op(b) [+ c]
//   a: (M, K) bfloat16, or (K, M) with trans_a;  b: (K, N) bfloat16, or (N, K) with trans_b;  all row-major.
// The accumulating form takes c (M, N) float32 and XLA aliases it to the output, so `d_table += exp · x` is added
// in place: MKL's beta = 1, no (V, D) product written and reread.
#include <cstdint>

#include "mkl_cblas.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// (rows, cols) of a rank-2 buffer; an error for any other rank.
bool Matrix(ffi::Span<const int64_t> dims, int64_t& rows, int64_t& cols) {
  if (dims.size() != 2) return false;
  rows = dims[0];
  cols = dims[1];
  return true;
}

ffi::Error Gemm(ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b, const float* c, bool trans_a, bool trans_b,
                ffi::ResultBuffer<ffi::F32> out) {
  int64_t a_rows, a_cols, b_rows, b_cols, out_rows, out_cols;
  if (!Matrix(a.dimensions(), a_rows, a_cols) || !Matrix(b.dimensions(), b_rows, b_cols) ||
      !Matrix(out->dimensions(), out_rows, out_cols)) {
    return ffi::Error::InvalidArgument("bf16_gemm: every operand must be a matrix");
  }
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t n = trans_b ? b_rows : b_cols, k_b = trans_b ? b_cols : b_rows;
  if (k != k_b || out_rows != m || out_cols != n) {
    return ffi::Error::InvalidArgument("bf16_gemm: operand shapes do not match");
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
  cblas_gemm_bf16bf16f32(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                         m, n, k, 1.0f, reinterpret_cast<const MKL_BF16*>(a.typed_data()), a_cols,
                         reinterpret_cast<const MKL_BF16*>(b.typed_data()), b_cols, c == nullptr ? 0.0f : 1.0f,
                         result, n);
  return ffi::Error::Success();
}

ffi::Error GemmImpl(ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b, bool trans_a, bool trans_b,
                    ffi::ResultBuffer<ffi::F32> out) {
  return Gemm(a, b, nullptr, trans_a, trans_b, out);
}

ffi::Error GemmAccumulateImpl(ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b, ffi::Buffer<ffi::F32> c,
                              bool trans_a, bool trans_b, ffi::ResultBuffer<ffi::F32> out) {
  if (c.element_count() != out->element_count()) {
    return ffi::Error::InvalidArgument("bf16_gemm_accumulate: the addend must have the output's shape");
  }
  return Gemm(a, b, c.typed_data(), trans_a, trans_b, out);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Bf16Gemm, GemmImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Attr<bool>("trans_a")
                                  .Attr<bool>("trans_b")
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(Bf16GemmAccumulate, GemmAccumulateImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Attr<bool>("trans_a")
                                  .Attr<bool>("trans_b")
                                  .Ret<ffi::Buffer<ffi::F32>>());
