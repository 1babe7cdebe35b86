/* mpi_alltoallv: the exchange of bench/python_ep written as a plain MPI program, for the
 * bench's MPI rows (ep_vs_all_to_all.py compiles it with mpicc and runs it under mpirun).
 *
 * Every rank makes `tokens` bf16 rows of `hidden` and routes each to top-k distinct experts
 * of `experts` (Zipf popularity, exponent 1.2, over a permutation of the experts shared by
 * every rank; or uniform), experts split evenly over the ranks. Per iteration, after a
 * barrier:
 *   plain     dispatch: MPI_Alltoall of the per-rank row counts, each token packed once per
 *             destination rank (hidden bytes, then its top-k ids and weights), MPI_Alltoallv
 *             of the rows; combine: MPI_Alltoallv of the received rows' hidden bytes back
 *             (identity experts). What an MPI user writes for the exchange.
 *   semantic  the same, plus what moerl's dispatch/combine also do: the received rows fanned
 *             out expert-major (one copy per (row, local expert)), and in combine each row's
 *             local expert outputs reduced (weighted, fp32, one rounding) before going back,
 *             and the source's sum of every rank's partial per token (fp32, rank order).
 * The iteration's time is the slowest rank's (MPI_Allreduce MAX, outside the timed region).
 * Rank 0 prints one JSON object on stdout.
 *
 * Usage: mpirun -np N mpi_alltoallv TOKENS HIDDEN EXPERTS TOPK ITERATIONS WARMUP
 *                                    plain|semantic zipf|uniform SEED */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static uint64_t next_u64(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}
static double next_unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

static float bf16_to_f32(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f32_to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void* must_alloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "mpi_alltoallv: cannot allocate %zu bytes\n", n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 10) {
    if (rank == 0) fprintf(stderr, "usage: %s TOKENS HIDDEN EXPERTS TOPK ITERATIONS WARMUP plain|semantic zipf|uniform SEED\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const long T = atol(argv[1]), H = atol(argv[2]);
  const int E = atoi(argv[3]), K = atoi(argv[4]), iterations = atoi(argv[5]), warmup = atoi(argv[6]);
  const int semantic = strcmp(argv[7], "semantic") == 0, zipf = strcmp(argv[8], "zipf") == 0;
  const uint64_t seed = strtoull(argv[9], NULL, 10);
  if (E % world != 0 || K > E || K < 1 || K > 64 || T < 0 || H < 1) {
    if (rank == 0) fprintf(stderr, "mpi_alltoallv: experts must divide by ranks, 1 <= topk <= min(experts, 64)\n");
    MPI_Finalize();
    return 2;
  }
  const int local = E / world;
  const size_t hidden_bytes = (size_t)H * 2, meta_bytes = (size_t)K * 12, row_bytes = hidden_bytes + meta_bytes;

  /* Routing: popularity over a permutation shared by every rank, then per-rank draws. */
  double* cdf = must_alloc(sizeof(double) * E);
  int* perm = must_alloc(sizeof(int) * E);
  rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (int e = 0; e < E; ++e) perm[e] = e;
  for (int e = E - 1; e > 0; --e) {
    int j = (int)(next_u64() % (uint64_t)(e + 1)), t = perm[e];
    perm[e] = perm[j];
    perm[j] = t;
  }
  double total = 0;
  for (int i = 0; i < E; ++i) cdf[perm[i]] = zipf ? 1.0 / pow(i + 1.0, 1.2) : 1.0;
  for (int e = 0; e < E; ++e) total += cdf[e], cdf[e] = total;
  rng_state = (seed + 1000003ULL * (uint64_t)(rank + 1)) * 0x9E3779B97F4A7C15ULL + 7;
  int64_t* idx = must_alloc(sizeof(int64_t) * (size_t)(T * K));
  float* w = must_alloc(sizeof(float) * (size_t)(T * K));
  uint16_t* x = must_alloc(hidden_bytes * (size_t)T);
  for (long t = 0; t < T; ++t) {
    for (int k = 0; k < K;) {
      double u = next_unit() * total;
      int lo = 0, hi = E - 1;
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u) hi = mid; else lo = mid + 1;
      }
      int dup = 0;
      for (int j = 0; j < k; ++j) dup |= idx[t * K + j] == lo;
      if (!dup) idx[t * K + k] = lo, w[t * K + k] = (float)(0.1 + 0.9 * next_unit()), ++k;
    }
    for (long h = 0; h < H; ++h) x[t * H + h] = f32_to_bf16((float)((next_unit() - 0.5) * 4));
  }

  /* Destinations: each token once per rank that holds one of its experts (rank-major). */
  int* send_rows = calloc((size_t)world, sizeof(int));
  int* recv_rows = calloc((size_t)world, sizeof(int));
  unsigned char* dest = calloc((size_t)(T * world), 1);
  for (long t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) dest[t * world + idx[t * K + k] / local] = 1;
  for (long t = 0; t < T; ++t)
    for (int r = 0; r < world; ++r) send_rows[r] += dest[t * world + r];
  long sent = 0;
  for (int r = 0; r < world; ++r) sent += send_rows[r];
  int* order = must_alloc(sizeof(int) * (size_t)(sent ? sent : 1)); /* token of each packed row */
  {
    long n = 0;
    for (int r = 0; r < world; ++r)
      for (long t = 0; t < T; ++t)
        if (dest[t * world + r]) order[n++] = (int)t;
  }
  MPI_Alltoall(send_rows, 1, MPI_INT, recv_rows, 1, MPI_INT, MPI_COMM_WORLD);
  long received = 0;
  for (int r = 0; r < world; ++r) received += recv_rows[r];
  int *scount = must_alloc(sizeof(int) * world), *sdisp = must_alloc(sizeof(int) * world);
  int *rcount = must_alloc(sizeof(int) * world), *rdisp = must_alloc(sizeof(int) * world);
  int *scount_h = must_alloc(sizeof(int) * world), *sdisp_h = must_alloc(sizeof(int) * world);
  int *rcount_h = must_alloc(sizeof(int) * world), *rdisp_h = must_alloc(sizeof(int) * world);
  for (int r = 0, so = 0, ro = 0; r < world; ++r) {
    if ((double)send_rows[r] * row_bytes > 2147483647.0 || (double)received * row_bytes > 2147483647.0) {
      fprintf(stderr, "mpi_alltoallv: more than 2 GiB in one exchange; use fewer tokens\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    scount[r] = (int)(send_rows[r] * row_bytes), sdisp[r] = (int)(so * row_bytes);
    rcount[r] = (int)(recv_rows[r] * row_bytes), rdisp[r] = (int)(ro * row_bytes);
    scount_h[r] = (int)(send_rows[r] * hidden_bytes), sdisp_h[r] = (int)(so * hidden_bytes);
    rcount_h[r] = (int)(recv_rows[r] * hidden_bytes), rdisp_h[r] = (int)(ro * hidden_bytes);
    so += send_rows[r], ro += recv_rows[r];
  }
  unsigned char* send_buf = must_alloc(row_bytes * (size_t)sent);
  unsigned char* recv_buf = must_alloc(row_bytes * (size_t)received);
  unsigned char* back_send = must_alloc(hidden_bytes * (size_t)received);
  unsigned char* back_recv = must_alloc(hidden_bytes * (size_t)sent);
  /* Semantic: expert-major rows (at most K per received row) and the combined tokens. */
  size_t fan_cap = semantic ? (size_t)received * (size_t)K : 0;
  uint16_t* expert_rows = must_alloc(hidden_bytes * (fan_cap ? fan_cap : 1));
  long* slot = must_alloc(sizeof(long) * (size_t)(received * K + 1)); /* row,k -> expert-major slot */
  long* expert_fill = must_alloc(sizeof(long) * (size_t)(local + 1));
  float* acc = must_alloc(sizeof(float) * (size_t)H);
  float* y32 = must_alloc(sizeof(float) * (size_t)H * (size_t)(T ? T : 1));
  uint16_t* y = must_alloc(hidden_bytes * (size_t)(T ? T : 1));

  double* times = must_alloc(sizeof(double) * (size_t)(iterations + 1));
  for (int it = 0; it < warmup + iterations; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    /* dispatch */
    int* counts_now = must_alloc(sizeof(int) * world);
    MPI_Alltoall(send_rows, 1, MPI_INT, counts_now, 1, MPI_INT, MPI_COMM_WORLD);
    free(counts_now);
    for (long n = 0; n < sent; ++n) {
      const long t = order[n];
      unsigned char* row = send_buf + (size_t)n * row_bytes;
      memcpy(row, x + t * H, hidden_bytes);
      memcpy(row + hidden_bytes, idx + t * K, (size_t)K * 8);
      memcpy(row + hidden_bytes + (size_t)K * 8, w + t * K, (size_t)K * 4);
    }
    MPI_Alltoallv(send_buf, scount, sdisp, MPI_BYTE, recv_buf, rcount, rdisp, MPI_BYTE, MPI_COMM_WORLD);
    if (semantic) { /* fan out expert-major: count, offsets, copy */
      memset(expert_fill, 0, sizeof(long) * (size_t)(local + 1));
      for (long n = 0; n < received; ++n) {
        const int64_t* ids = (const int64_t*)(recv_buf + (size_t)n * row_bytes + hidden_bytes);
        for (int k = 0; k < K; ++k)
          if (ids[k] / local == rank) expert_fill[ids[k] % local + 1]++;
      }
      for (int j = 0; j < local; ++j) expert_fill[j + 1] += expert_fill[j];
      for (long n = 0; n < received; ++n) {
        const unsigned char* row = recv_buf + (size_t)n * row_bytes;
        int64_t ids[64];
        memcpy(ids, row + hidden_bytes, (size_t)K * 8);
        for (int k = 0; k < K; ++k) {
          slot[n * K + k] = -1;
          if (ids[k] / local != rank) continue;
          const long s = expert_fill[ids[k] % local]++;
          slot[n * K + k] = s;
          memcpy(expert_rows + (size_t)s * H, row, hidden_bytes);
        }
      }
    }
    /* combine (identity experts) */
    if (semantic) {
      for (long n = 0; n < received; ++n) {
        const unsigned char* row = recv_buf + (size_t)n * row_bytes;
        float wk[64];
        memcpy(wk, row + hidden_bytes + (size_t)K * 8, (size_t)K * 4);
        for (long h = 0; h < H; ++h) acc[h] = 0;
        for (int k = 0; k < K; ++k) {
          const long s = slot[n * K + k];
          if (s < 0) continue;
          const uint16_t* e = expert_rows + (size_t)s * H;
          for (long h = 0; h < H; ++h) acc[h] += wk[k] * bf16_to_f32(e[h]);
        }
        uint16_t* out = (uint16_t*)(back_send + (size_t)n * hidden_bytes);
        for (long h = 0; h < H; ++h) out[h] = f32_to_bf16(acc[h]);
      }
    } else {
      for (long n = 0; n < received; ++n)
        memcpy(back_send + (size_t)n * hidden_bytes, recv_buf + (size_t)n * row_bytes, hidden_bytes);
    }
    MPI_Alltoallv(back_send, rcount_h, rdisp_h, MPI_BYTE, back_recv, scount_h, sdisp_h, MPI_BYTE, MPI_COMM_WORLD);
    if (semantic) { /* the source's sum of the partials, rank order (rows are rank-major) */
      memset(y32, 0, sizeof(float) * (size_t)H * (size_t)T);
      for (long n = 0; n < sent; ++n) {
        const uint16_t* part = (const uint16_t*)(back_recv + (size_t)n * hidden_bytes);
        float* dst = y32 + (size_t)order[n] * H;
        for (long h = 0; h < H; ++h) dst[h] += bf16_to_f32(part[h]);
      }
      for (long i = 0; i < T * H; ++i) y[i] = f32_to_bf16(y32[i]);
    }
    double mine = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= warmup) times[it - warmup] = slowest * 1e3;
  }

  /* Check the last iteration: plain gets back the rows it sent; semantic gets each token
   * times the sum of its weights (identity experts), within bf16 rounding. */
  int bad = 0;
  for (long n = 0; n < sent && !bad; ++n) {
    const long t = order[n];
    if (!semantic) bad = memcmp(back_recv + (size_t)n * hidden_bytes, x + t * H, hidden_bytes) != 0;
  }
  if (semantic)
    for (long t = 0; t < T && !bad; ++t) {
      float ws = 0;
      for (int k = 0; k < K; ++k) ws += w[t * K + k];
      for (long h = 0; h < H && !bad; ++h) {
        const float want = bf16_to_f32(x[t * H + h]) * ws, got = bf16_to_f32(y[t * H + h]);
        bad = fabsf(got - want) > 0.02f * fabsf(want) + 1e-6f;
      }
    }
  int any_bad = 0;
  MPI_Reduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);

  long long logical = (long long)sent * (long long)hidden_bytes, logical_all = 0;
  MPI_Reduce(&logical, &logical_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    for (int i = 0; i < len; ++i)
      if (lib[i] == '"' || lib[i] == '\\' || lib[i] == '\n') lib[i] = ' ';
    while (len > 0 && lib[len - 1] == ' ') lib[--len] = 0;
    double* sorted = must_alloc(sizeof(double) * (size_t)(iterations + 1));
    memcpy(sorted, times, sizeof(double) * (size_t)iterations);
    qsort(sorted, (size_t)iterations, sizeof(double), cmp_double);
    const double p50 = iterations == 0 ? 0
                       : iterations % 2 ? sorted[iterations / 2]
                                        : 0.5 * (sorted[iterations / 2 - 1] + sorted[iterations / 2]);
    printf("{\"variant\": \"%s\", \"ranks\": %d, \"tokens\": %ld, \"hidden\": %ld, \"experts\": %d, \"topk\": %d, "
           "\"routing\": \"%s\", \"logical_bytes\": %lld, \"check\": \"%s\", \"p50_ms\": %.4f, \"max_ms\": %.4f, \"all_ms\": [",
           semantic ? "semantic" : "plain", world, T, H, E, K, zipf ? "zipf" : "uniform", logical_all, any_bad ? "fail" : "pass", p50,
           iterations ? sorted[iterations - 1] : 0.0);
    for (int i = 0; i < iterations; ++i) printf("%s%.3f", i ? ", " : "", times[i]);
    printf("], \"mpi_library\": \"%s\"}\n", lib);
    free(sorted);
  }
  MPI_Finalize();
  return any_bad ? 1 : 0;
}
