// oneDNN's bfloat16 matmul for XLA:CPU, on the AMX tiles of CPUs that have them, with float32 accumulation: the
// chunked loss's (V, C) logits E·xᵀ, the product oneMKL's bfloat16 GEMM runs slowest, which oneDNN's AMX kernels
// run 1.4-2.3x faster (benchmarks/README.md). A library of its own, loaded only where bfloat16 runs on the kernel:
// oneDNN's relocations alone make 17 MiB resident. Shapes: gemm.h.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "gemm.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The matmul primitives, one per (m, n, k, trans_a, trans_b), created on first use and kept (a step has three
// shapes). One call at a time: the primitives share one stream and oneDNN's scratchpad.
class Matmuls {
 public:
  static Matmuls& Get() {
    static Matmuls instance;
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

ffi::Error Multiply(const uint16_t* a, const uint16_t* b, float* out, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, int64_t /*lda*/, int64_t /*ldb*/, float /*beta: always 0 here*/) {
  try {
    Matmuls::Get().Multiply(a, b, out, trans_a, trans_b, m, n, k);
  } catch (const dnnl::error& error) {
    return ffi::Error::Internal(std::string("onednn matmul: ") + error.what());
  }
  return ffi::Error::Success();
}

ffi::Error GemmImpl(ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b, bool trans_a, bool trans_b,
                    ffi::ResultBuffer<ffi::F32> out) {
  return tied_embed::Gemm<ffi::BF16>(a, b, nullptr, trans_a, trans_b, out, Multiply);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Bf16Gemm, GemmImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Attr<bool>("trans_a")
                                  .Attr<bool>("trans_b")
                                  .Ret<ffi::Buffer<ffi::F32>>());
