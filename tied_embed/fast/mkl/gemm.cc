// GEMMs for XLA:CPU: float32 on oneMKL (cblas_sgemm, AVX-512) and bfloat16 with float32 accumulation on the AMX
// tiles of CPUs that have them: oneDNN's matmul for a product written afresh, oneMKL's cblas_gemm_bf16bf16f32 for
// one added in place. The chunked loss (tied_embed/fast/chunked_loss.py) calls them through jax.ffi for its three
// dots: XLA:CPU widens bfloat16 dots to float32, and its own float32 dot runs at about two thirds of oneMKL's sgemm
// on the chunk's shapes. Per dot, the faster library of the two (benchmarks/README.md): oneDNN's AMX kernels run
// the logits and dx products 1.2-1.4x faster than oneMKL's at GPT-2's shape, and oneMKL's beta = 1 adds into the
// (V, D) accumulator faster than oneDNN's sum post-op.
//
//   out (M, N) float32 = op(a) · op(b) [+ c]
//   a: (M, K), or (K, M) with trans_a;  b: (K, N), or (N, K) with trans_b;  all row-major, both float32 or both
//   bfloat16.
// The accumulating form takes c (M, N) float32 and XLA aliases it to the output, so `d_table += exp · x` is added
// in place: MKL's beta = 1, no (V, D) product written and reread.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "mkl_cblas.h"
#include "oneapi/dnnl/dnnl.hpp"
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

// oneDNN's bfloat16 matmul primitives, one per (m, n, k, trans_a, trans_b), created on first use and kept (a step
// has three shapes). One call at a time: the primitives share one stream and oneDNN's scratchpad.
class DnnlMatmuls {
 public:
  static DnnlMatmuls& Get() {
    static DnnlMatmuls instance;
    return instance;
  }

  void Multiply(const uint16_t* a, const uint16_t* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
                int64_t k) {
    using dnnl::memory;
    std::lock_guard<std::mutex> lock(mutex_);
    const memory::desc a_desc({m, k}, memory::data_type::bf16, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_desc({k, n}, memory::data_type::bf16, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc out_desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
    const auto key = std::make_tuple(m, n, k, trans_a, trans_b);
    auto found = primitives_.find(key);
    if (found == primitives_.end()) {
      found = primitives_.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(engine_, a_desc, b_desc, out_desc)))
                  .first;
    }
    memory a_memory(a_desc, engine_, const_cast<uint16_t*>(a)), b_memory(b_desc, engine_, const_cast<uint16_t*>(b));
    memory out_memory(out_desc, engine_, out);
    found->second.execute(stream_, {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, out_memory}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, dnnl::matmul> primitives_;
  std::mutex mutex_;
};

void Multiply(const uint16_t* a, const uint16_t* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
              int64_t k, int64_t lda, int64_t ldb, float beta) {
  if (beta == 0.0f) {
    DnnlMatmuls::Get().Multiply(a, b, out, trans_a, trans_b, m, n, k);
    return;
  }
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
  try {
    Multiply(a.typed_data(), b.typed_data(), result, trans_a, trans_b, m, n, k, a_cols, b_cols,
             c == nullptr ? 0.0f : 1.0f);
  } catch (const dnnl::error& error) {
    return ffi::Error::Internal(std::string("onednn matmul: ") + error.what());
  }
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
