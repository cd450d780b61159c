// What the two GEMM libraries of the kernel share: gemm.cc (oneMKL) and gemm_onednn.cc (oneDNN) each give a
// Multiply for their operand types, and Gemm below checks the FFI buffers' shapes around it.
//
//   out (M, N) float32 = op(a) · op(b) [+ c]
//   a: (M, K), or (K, M) with trans_a;  b: (K, N), or (N, K) with trans_b;  all row-major, both float32 or both
//   bfloat16.
// The accumulating form takes c (M, N) float32 and XLA aliases it to the output, so `d_table += exp · x` is added
// in place (beta = 1), no (V, D) product written and reread.
#pragma once

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace tied_embed {

namespace ffi = xla::ffi;

// (rows, cols) of a rank-2 buffer; false for any other rank.
inline bool Matrix(ffi::Span<const int64_t> dims, int64_t& rows, int64_t& cols) {
  if (dims.size() != 2) return false;
  rows = dims[0];
  cols = dims[1];
  return true;
}

// multiply(a, b, out, trans_a, trans_b, m, n, k, lda, ldb, beta): out = op(a) · op(b) + beta · out, m, n, k ≥ 1.
template <ffi::DataType T, typename Multiply>
ffi::Error Gemm(ffi::Buffer<T> a, ffi::Buffer<T> b, const float* c, bool trans_a, bool trans_b,
                ffi::ResultBuffer<ffi::F32> out, Multiply multiply) {
  int64_t a_rows, a_cols, b_rows, b_cols, out_rows, out_cols;
  if (!Matrix(a.dimensions(), a_rows, a_cols) || !Matrix(b.dimensions(), b_rows, b_cols) ||
      !Matrix(out->dimensions(), out_rows, out_cols)) {
    return ffi::Error::InvalidArgument("gemm: every operand must be a matrix");
  }
  const int64_t m = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t n = trans_b ? b_rows : b_cols, k_b = trans_b ? b_cols : b_rows;
  if (k != k_b || out_rows != m || out_cols != n) {
    return ffi::Error::InvalidArgument("gemm: operand shapes do not match");
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
  return multiply(a.typed_data(), b.typed_data(), result, trans_a, trans_b, m, n, k, a_cols, b_cols,
                  c == nullptr ? 0.0f : 1.0f);
}

}  // namespace tied_embed

// Each library's FFI handlers, expanded once at the end of its file, where its `Multiply` overloads (float and
// uint16_t, i.e. bfloat16, operands; the signature above) are declared: F32Gemm, F32GemmAccumulate, Bf16Gemm and
// Bf16GemmAccumulate, the symbols tied_embed/fast/kernels/gemm.py registers.
#define TIED_EMBED_GEMM_HANDLERS()                                                                                 \
  namespace {                                                                                                      \
  template <xla::ffi::DataType T>                                                                                  \
  xla::ffi::Error GemmImpl(xla::ffi::Buffer<T> a, xla::ffi::Buffer<T> b, bool trans_a, bool trans_b,               \
                           xla::ffi::ResultBuffer<xla::ffi::F32> out) {                                            \
    return tied_embed::Gemm<T>(a, b, nullptr, trans_a, trans_b, out,                                               \
                               [](auto... args) { return Multiply(args...); });                                    \
  }                                                                                                                \
  template <xla::ffi::DataType T>                                                                                  \
  xla::ffi::Error GemmAccumulateImpl(xla::ffi::Buffer<T> a, xla::ffi::Buffer<T> b,                                 \
                                     xla::ffi::Buffer<xla::ffi::F32> c, bool trans_a, bool trans_b,                \
                                     xla::ffi::ResultBuffer<xla::ffi::F32> out) {                                  \
    if (c.element_count() != out->element_count()) {                                                               \
      return xla::ffi::Error::InvalidArgument("gemm_accumulate: the addend must have the output's shape");         \
    }                                                                                                              \
    return tied_embed::Gemm<T>(a, b, c.typed_data(), trans_a, trans_b, out,                                        \
                               [](auto... args) { return Multiply(args...); });                                    \
  }                                                                                                                \
  }                                                                                                                \
  TIED_EMBED_PLAIN_HANDLER(F32Gemm, xla::ffi::F32)                                                                 \
  TIED_EMBED_ACCUMULATE_HANDLER(F32GemmAccumulate, xla::ffi::F32)                                                  \
  TIED_EMBED_PLAIN_HANDLER(Bf16Gemm, xla::ffi::BF16)                                                               \
  TIED_EMBED_ACCUMULATE_HANDLER(Bf16GemmAccumulate, xla::ffi::BF16)

#define TIED_EMBED_PLAIN_HANDLER(NAME, DTYPE)                                                                      \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, GemmImpl<DTYPE>,                                                             \
                                xla::ffi::Ffi::Bind()                                                              \
                                    .Arg<xla::ffi::Buffer<DTYPE>>()                                                \
                                    .Arg<xla::ffi::Buffer<DTYPE>>()                                                \
                                    .Attr<bool>("trans_a")                                                         \
                                    .Attr<bool>("trans_b")                                                         \
                                    .Ret<xla::ffi::Buffer<xla::ffi::F32>>());
#define TIED_EMBED_ACCUMULATE_HANDLER(NAME, DTYPE)                                                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, GemmAccumulateImpl<DTYPE>,                                                   \
                                xla::ffi::Ffi::Bind()                                                              \
                                    .Arg<xla::ffi::Buffer<DTYPE>>()                                                \
                                    .Arg<xla::ffi::Buffer<DTYPE>>()                                                \
                                    .Arg<xla::ffi::Buffer<xla::ffi::F32>>()                                        \
                                    .Attr<bool>("trans_a")                                                         \
                                    .Attr<bool>("trans_b")                                                         \
                                    .Ret<xla::ffi::Buffer<xla::ffi::F32>>());
