// This CPU's float32 FMA peak: 12 independent chains of AVX-512 FMAs per thread, kept in registers, no memory.
//   gcc -O2 -mavx512f -fopenmp benchmarks/probes/fma_peak.c -o /tmp/fma_peak && OMP_NUM_THREADS=2 /tmp/fma_peak
// A GEMM can run at most this fast; docs/performance.md compares the step's dots with it.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define FMA(a) a = _mm512_fmadd_ps(a, b, c);

int main(void) {
  const long iterations = 100000000;
  double best = 0.0;
  float sink = 0.0f;
  for (int round = 0; round < 5; round++) {
    const double start = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
    {
      const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
      __m512 a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b, a8 = b, a9 = b, a10 = b, a11 = b;
      for (long i = 0; i < iterations; i++) {
        FMA(a0) FMA(a1) FMA(a2) FMA(a3) FMA(a4) FMA(a5) FMA(a6) FMA(a7) FMA(a8) FMA(a9) FMA(a10) FMA(a11)
        // Without this the compiler may fold the loop: the chains must stay twelve register FMAs an iteration.
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                         "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
      }
      __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
      sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
      sink += _mm512_reduce_add_ps(sum);
    }
    const double seconds = omp_get_wtime() - start;
    const double gflops = omp_get_max_threads() * (double)iterations * 12 * 16 * 2 / seconds / 1e9;
    if (gflops > best) best = gflops;
  }
  printf("%d threads: %.0f GFLOP/s float32 FMA peak (checksum %g)\n", omp_get_max_threads(), best, sink);
  return 0;
}
