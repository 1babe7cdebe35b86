#include "policy/dense_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>

namespace moerl::policy {

void linear_forward(const float* x, const float* w, int64_t n, int64_t d_in, int64_t d_out,
                    float* y) {
  if (n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d_out, d_in, 1.0f, x, d_in, w, d_out,
              0.0f, y, d_out);
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t d_in,
                     int64_t d_out, float* dx, float* dw) {
  if (n == 0) return;
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d_in, d_out, 1.0f, dy, d_out, w, d_out,
                0.0f, dx, d_in);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_in, d_out, n, 1.0f, x, d_in, dy, d_out,
              1.0f, dw, d_out);
}

void rmsnorm_forward(const float* x, const float* g, int64_t n, int64_t d, float* y,
                     float* inv_rms) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    float inv = 1.0f / std::sqrt(float(ss / d) + rmsnorm_eps);
    inv_rms[r] = inv;
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = xr[i] * inv * g[i];
  }
}

void rmsnorm_backward(const float* x, const float* g, const float* inv_rms, const float* dy,
                      int64_t n, int64_t d, float* dx, float* dg) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float inv = inv_rms[r];
    double dot = 0;  // sum_j g_j dy_j x_j
    for (int64_t i = 0; i < d; ++i) {
      dot += double(g[i]) * dyr[i] * xr[i];
      dg[i] += dyr[i] * xr[i] * inv;
    }
    const float c = float(dot) * inv * inv * inv / float(d);
    for (int64_t i = 0; i < d; ++i) dx[r * d + i] += g[i] * dyr[i] * inv - xr[i] * c;
  }
}

void attention_forward(const float* qkv, int64_t b, int64_t t, int num_heads, int d_head,
                       float* probs, float* out) {
  const int64_t d = int64_t(num_heads) * d_head, row = 3 * d;
  const float scale = 1.0f / std::sqrt(float(d_head));
  for (int64_t s = 0; s < b; ++s)
    for (int h = 0; h < num_heads; ++h) {
      float* p = probs + ((s * num_heads + h) * t) * t;
      for (int64_t i = 0; i < t; ++i) {
        const float* q = qkv + (s * t + i) * row + h * d_head;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv + (s * t + j) * row + d + h * d_head;
          float dot = 0;
          for (int c = 0; c < d_head; ++c) dot += q[c] * k[c];
          p[i * t + j] = dot * scale;
          mx = std::max(mx, p[i * t + j]);
        }
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (p[i * t + j] = std::exp(p[i * t + j] - mx));
        for (int64_t j = 0; j <= i; ++j) p[i * t + j] /= sum;
        for (int64_t j = i + 1; j < t; ++j) p[i * t + j] = 0;
        float* o = out + (s * t + i) * d + h * d_head;
        std::fill(o, o + d_head, 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
          const float* v = qkv + (s * t + j) * row + 2 * d + h * d_head;
          for (int c = 0; c < d_head; ++c) o[c] += p[i * t + j] * v[c];
        }
      }
    }
}

void attention_backward(const float* qkv, const float* probs, const float* dout, int64_t b,
                        int64_t t, int num_heads, int d_head, float* dqkv) {
  const int64_t d = int64_t(num_heads) * d_head, row = 3 * d;
  const float scale = 1.0f / std::sqrt(float(d_head));
  std::fill(dqkv, dqkv + b * t * row, 0.0f);
  std::vector<float> dp(t);
  for (int64_t s = 0; s < b; ++s)
    for (int h = 0; h < num_heads; ++h) {
      const float* p = probs + ((s * num_heads + h) * t) * t;
      for (int64_t i = 0; i < t; ++i) {
        const float* go = dout + (s * t + i) * d + h * d_head;
        // dP_ij = dO_i . V_j ; dV_j += P_ij dO_i
        float rowdot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const float* v = qkv + (s * t + j) * row + 2 * d + h * d_head;
          float* dv = dqkv + (s * t + j) * row + 2 * d + h * d_head;
          float acc = 0;
          for (int c = 0; c < d_head; ++c) {
            acc += go[c] * v[c];
            dv[c] += p[i * t + j] * go[c];
          }
          dp[j] = acc;
          rowdot += acc * p[i * t + j];
        }
        // softmax backward: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik), then S = scale q.k
        const float* q = qkv + (s * t + i) * row + h * d_head;
        float* dq = dqkv + (s * t + i) * row + h * d_head;
        for (int64_t j = 0; j <= i; ++j) {
          const float ds = p[i * t + j] * (dp[j] - rowdot) * scale;
          const float* k = qkv + (s * t + j) * row + d + h * d_head;
          float* dk = dqkv + (s * t + j) * row + d + h * d_head;
          for (int c = 0; c < d_head; ++c) {
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
    }
}

void attention_decode(const float* q, const float* k_cache, const float* v_cache, int64_t b,
                      int64_t max_len, int64_t pos, int num_heads, int d_head, float* out) {
  const int64_t d = int64_t(num_heads) * d_head;
  const float scale = 1.0f / std::sqrt(float(d_head));
  std::vector<float> p(pos + 1);
  for (int64_t s = 0; s < b; ++s)
    for (int h = 0; h < num_heads; ++h) {
      const float* qs = q + s * d + h * d_head;
      float mx = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        const float* k = k_cache + (s * max_len + j) * d + h * d_head;
        float dot = 0;
        for (int c = 0; c < d_head; ++c) dot += qs[c] * k[c];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j <= pos; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* o = out + s * d + h * d_head;
      std::fill(o, o + d_head, 0.0f);
      for (int64_t j = 0; j <= pos; ++j) {
        const float* v = v_cache + (s * max_len + j) * d + h * d_head;
        const float w = p[j] / sum;
        for (int c = 0; c < d_head; ++c) o[c] += w * v[c];
      }
    }
}

void embed_forward(const float* tok_emb, const float* pos_emb, const token_id* tokens, int64_t n,
                   int64_t t, int64_t pos0, int64_t d, float* x) {
  for (int64_t i = 0; i < n; ++i) {
    const float* te = tok_emb + int64_t(tokens[i]) * d;
    const float* pe = pos_emb + (pos0 + i % t) * d;
    for (int64_t c = 0; c < d; ++c) x[i * d + c] = te[c] + pe[c];
  }
}

void embed_backward(const token_id* tokens, const float* dx, int64_t n, int64_t t, int64_t d,
                    float* g_tok, float* g_pos) {
  for (int64_t i = 0; i < n; ++i) {
    float* gt = g_tok + int64_t(tokens[i]) * d;
    float* gp = g_pos + (i % t) * d;
    for (int64_t c = 0; c < d; ++c) {
      gt[c] += dx[i * d + c];
      gp[c] += dx[i * d + c];
    }
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void set_blas_threads(int num_threads) { openblas_set_num_threads(num_threads); }

void log_softmax_row(const float* logits, int n, float temperature, float* out) {
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, logits[i] / temperature);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i] / temperature - mx));
  const float lse = mx + float(std::log(sum));
  for (int i = 0; i < n; ++i) out[i] = logits[i] / temperature - lse;
}

}  // namespace moerl::policy
