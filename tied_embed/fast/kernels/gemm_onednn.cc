// oneDNN's matmul for XLA:CPU, with float32 accumulation: bfloat16 on the AMX tiles of CPUs that have them (the
// chunked loss's (V, C) logits E·xᵀ, which oneMKL's bfloat16 GEMM runs slowest: oneDNN runs them 1.4-2.3x faster), and
// all three dots, bfloat16 or float32, on a CPU with AVX-512 but no AMX (an AMD EPYC of the Zen 4 kind), where oneDNN
// runs bfloat16 on `avx512_bf16` at about twice oneMKL's rate (docs/performance.md). A library of its own, loaded
// only where the kernel takes its route: oneDNN's relocations alone make 17 MiB resident. Shapes: gemm.h.
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

// The matmul primitives, one per (type, m, n, k, trans_a, trans_b, accumulate), created on first use and kept (a step
// has three shapes). One call at a time: the primitives share one stream and oneDNN's scratchpad.
class Matmuls {
 public:
  static Matmuls& Get() {
    static Matmuls instance;
    return instance;
  }

  // out (m, n) = op(a) · op(b), plus out itself where `accumulate` (oneDNN's sum post-op: beta = 1).
  void Multiply(dnnl::memory::data_type type, const void* a, const void* b, float* out, bool trans_a, bool trans_b,
                int64_t m, int64_t n, int64_t k, bool accumulate) {
    using dnnl::memory;
    std::lock_guard<std::mutex> lock(mutex_);
    const memory::desc a_desc({m, k}, type, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_desc({k, n}, type, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc out_desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
    const auto key = std::make_tuple(static_cast<int>(type), m, n, k, trans_a, trans_b, accumulate);
    auto found = primitives_.find(key);
    if (found == primitives_.end()) {
      dnnl::primitive_attr attributes;
      if (accumulate) {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        attributes.set_post_ops(sum);
      }
      found = primitives_.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(engine_, a_desc, b_desc, out_desc,
                                                                                   attributes)))
                  .first;
    }
    memory a_memory(a_desc, engine_, const_cast<void*>(a)), b_memory(b_desc, engine_, const_cast<void*>(b));
    memory out_memory(out_desc, engine_, out);
    found->second.execute(stream_, {{DNNL_ARG_SRC, a_memory}, {DNNL_ARG_WEIGHTS, b_memory}, {DNNL_ARG_DST, out_memory}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<std::tuple<int, int64_t, int64_t, int64_t, bool, bool, bool>, dnnl::matmul> primitives_;
  std::mutex mutex_;
};

template <typename Operand>
ffi::Error Multiply(const Operand* a, const Operand* b, float* out, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, int64_t /*lda*/, int64_t /*ldb*/, float beta) {
  const auto type = sizeof(Operand) == 2 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  try {
    Matmuls::Get().Multiply(type, a, b, out, trans_a, trans_b, m, n, k, beta != 0.0f);
  } catch (const dnnl::error& error) {
    return ffi::Error::Internal(std::string("onednn matmul: ") + error.what());
  }
  return ffi::Error::Success();
}

}  // namespace

TIED_EMBED_GEMM_HANDLERS()
