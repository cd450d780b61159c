// AdamW's update of one float32 parameter in one pass over memory, for XLA:CPU through jax.ffi
// (tied_embed/fast/kernels/fused_adamw.py has the arithmetic, and why).
//
//   inputs:  g, mu, nu, p (n,) float32; scalars (10,) float32 = clip scale, b1, 1 - b1, b2, 1 - b2,
//            1 / (1 - b1^t), 1 / (1 - b2^t), eps, weight decay, -learning rate
//   outputs: mu, nu, p (aliased to the inputs: updated in place), and check () float32: 0 if every value written
//            is finite, else NaN. Each written x adds x - x to it, exactly 0 for a finite x and NaN for an
//            infinite or NaN one, so it cannot overflow the way a sum of |x| can.
// The work is split into parts on XLA's own intra-op threads; the calling thread claims parts too, and waits only
// for parts another thread has started, so a busy pool never blocks it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kLanes = 16;     // one AVX-512 register of floats: the inner loop's width
constexpr int64_t kMaxParts = 64;  // parts of the array handed out to threads
constexpr int64_t kMinPart = 1 << 16;

struct Scalars {
  float scale, b1, one_minus_b1, b2, one_minus_b2, mu_correction, nu_correction, eps, weight_decay, neg_lr;
};

// The update of element i; returns x - x summed over the three values written.
template <bool kDecay>
inline float UpdateOne(const float* __restrict__ g, float* __restrict__ mu, float* __restrict__ nu,
                       float* __restrict__ p, int64_t i, const Scalars& s) {
  const float grad = g[i] * s.scale;
  const float m = s.one_minus_b1 * grad + s.b1 * mu[i];
  const float v = s.one_minus_b2 * (grad * grad) + s.b2 * nu[i];
  float step = (m * s.mu_correction) / (std::sqrt(v * s.nu_correction) + s.eps);
  if (kDecay) step = step + s.weight_decay * p[i];
  const float q = p[i] + s.neg_lr * step;
  mu[i] = m;
  nu[i] = v;
  p[i] = q;
  return (m - m) + (v - v) + (q - q);
}

template <bool kDecay>
float UpdateRange(const float* __restrict__ g, float* __restrict__ mu, float* __restrict__ nu,
                  float* __restrict__ p, int64_t begin, int64_t end, const Scalars& s) {
  float check[kLanes] = {0};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) check[j] += UpdateOne<kDecay>(g, mu, nu, p, i + j, s);
  }
  float total = 0.0f;
  for (; i < end; ++i) total += UpdateOne<kDecay>(g, mu, nu, p, i, s);
  for (int64_t j = 0; j < kLanes; ++j) total += check[j];
  return total;
}

struct Work {
  const float* g;
  float *mu, *nu, *p;
  int64_t size, parts, per_part;
  Scalars scalars;
  std::atomic<int64_t> next{0}, done{0};
  float checks[kMaxParts] = {0};

  void Run() {
    for (int64_t k; (k = next.fetch_add(1)) < parts;) {
      const int64_t begin = std::min(size, k * per_part), end = std::min(size, begin + per_part);
      checks[k] = scalars.weight_decay != 0.0f ? UpdateRange<true>(g, mu, nu, p, begin, end, scalars)
                                               : UpdateRange<false>(g, mu, nu, p, begin, end, scalars);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

ffi::Error AdamWImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> mu,
                     ffi::Buffer<ffi::F32> nu, ffi::Buffer<ffi::F32> p, ffi::Buffer<ffi::F32> scalars,
                     ffi::ResultBuffer<ffi::F32> mu_out, ffi::ResultBuffer<ffi::F32> nu_out,
                     ffi::ResultBuffer<ffi::F32> p_out, ffi::ResultBuffer<ffi::F32> check) {
  const int64_t size = g.element_count();
  if (mu.element_count() != size || nu.element_count() != size || p.element_count() != size) {
    return ffi::Error::InvalidArgument("fused adamw: g, mu, nu and p must have the same size");
  }
  if (scalars.element_count() != 10) {
    return ffi::Error::InvalidArgument("fused adamw: expected 10 scalars");
  }
  if (mu_out->typed_data() != mu.typed_data() || nu_out->typed_data() != nu.typed_data() ||
      p_out->typed_data() != p.typed_data()) {
    return ffi::Error::InvalidArgument("fused adamw: mu, nu and p must be aliased to their outputs");
  }
  const float* s = scalars.typed_data();
  auto work = std::make_shared<Work>();
  work->g = g.typed_data();
  work->mu = mu_out->typed_data();
  work->nu = nu_out->typed_data();
  work->p = p_out->typed_data();
  work->size = size;
  work->scalars = Scalars{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]};
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  work->parts = std::clamp<int64_t>(size / kMinPart, 1, std::min(kMaxParts, 4 * threads));
  const int64_t share = (size + work->parts - 1) / work->parts;
  work->per_part = (share + kLanes - 1) / kLanes * kLanes;  // whole registers; the last part may be shorter
  for (int64_t t = 1; t < std::min(threads, work->parts); ++t) pool.Schedule([work] { work->Run(); });
  work->Run();
  while (work->done.load(std::memory_order_acquire) < work->parts) std::this_thread::yield();
  float total = 0.0f;
  for (int64_t k = 0; k < work->parts; ++k) total += work->checks[k];
  *check->typed_data() = total;
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FusedAdamW, AdamWImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // g
                                  .Arg<ffi::Buffer<ffi::F32>>()  // mu
                                  .Arg<ffi::Buffer<ffi::F32>>()  // nu
                                  .Arg<ffi::Buffer<ffi::F32>>()  // p
                                  .Arg<ffi::Buffer<ffi::F32>>()  // scalars
                                  .Ret<ffi::Buffer<ffi::F32>>()  // mu
                                  .Ret<ffi::Buffer<ffi::F32>>()  // nu
                                  .Ret<ffi::Buffer<ffi::F32>>()  // p
                                  .Ret<ffi::Buffer<ffi::F32>>());  // check
