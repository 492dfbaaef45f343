// Fused ReLU attention for the CPU: the sums of relu_former/relu_attention/kernels/tiled.py
// (equations there; ReLUFormer, arXiv 2302.06461), computed tile by tile in compiled code.
//
// With s_ij = ReLU(scale q_i . k_j) over the keys j visible to query i, and keep_ij the
// dropout multiplier (1 without dropout; 0 or 1/(1-p), replayed from a hash of
// (seed, head, i, j)):
//
//   forward   U_i = sum_j keep_ij s_ij v_j   S_i = sum_j s_ij
//             T_i = sum_j s_ij log s_ij      P_i = #{j: s_ij > 0}       (the last three on request)
//   backward  g_ij = keep_ij gU_i . v_j + gS_i + gT_i (log s_ij + 1)   where s_ij > 0, else s_ij
//             dq_i = scale sum_j g_ij k_j   dk_j = scale sum_i g_ij q_i   dv_j = sum_i keep_ij s_ij gU_i
//
// NaN is a value here, never a zero: ReLU keeps a NaN score (max(x, 0) and a `> 0` mask would
// turn it into 0), which then counts in U, S, T and P and sets g_ij to NaN, as in the
// reference backend, so a model that diverged shows it on every backend. Each test is written
// so that NaN falls on the propagating side of one compare-and-select, which keeps the loops
// branch-free.
//
// Like the CPU flash kernel of torch's scaled_dot_product_attention, a tile of scores lives
// only in a per-thread buffer (bq x bk, in the caches) between two matrix products (torch's
// own BLAS), so nothing Tq x Tk is written to memory. Unlike
// softmax it needs no running maximum, exponential or rescaling. Threads share out
// (head, query block) pairs in the forward pass and heads in the backward pass, so every
// gradient row has one writer. Tiles whose keys are all hidden are skipped.
//
// An optional row scale f_i > 0 (the variance factor 1/(gamma sqrt(n_i/2)) of ReLUFormer) is
// applied inside the tile, s_ij -> f_i s_ij, since ReLU(f x) = f ReLU(x) for f > 0: U comes out
// already scaled, with no pass over it, and the backward pass takes g_ij times f_i. Not with
// the statistics, which are those of the unscaled scores.
//
// Layout: q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), float32 or float64, each with
// its last dimension contiguous and any other strides: the heads of fairseq's (T, B, E)
// projections are read where they lie (a head's rows are a BLAS matrix whose leading dimension
// is the row stride), and U and the gradients are written in that (T, B, H, D) layout, so
// nothing is copied on the way in or out. ``padding`` (B, Tk) uint8, 1 = padding key, or
// empty; ``blocked`` (Bm, Hm, Tq, Tk) uint8, 1 = hidden, Bm in {1, B} and Hm in {1, H}, or
// empty. Per-row tensors (statistics, row scale) are (B * H, Tq), head row bh = b * H + h.

#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace {

// Measured (two threads, forward + backward against SDPA, head dims 16 and 64, n = 1,024 and
// 4,096): 128 x 512 tiles within noise of the best of 64-256 x 256-512 (64 x 512 was 6% slower
// at head dim 64, n = 4,096); a tile of scores is then 256 KiB in float32.
constexpr int64_t kQueryBlock = 128;
constexpr int64_t kKeyBlock = 512;

// The Fortran BLAS entry points of the BLAS torch links (MKL in torch's x86 CPU wheels).
// torch's own C++ wrappers around them (at::native::cpublas::gemm) are not exported.
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b,
            const int* ldb, const double* beta, double* c, const int* ldc);
}

inline void blas_gemm(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b,
                      const int* ldb, const float* beta, float* c, const int* ldc) {
  sgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void blas_gemm(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                      const double* alpha, const double* a, const int* lda, const double* b,
                      const int* ldb, const double* beta, double* c, const int* ldc) {
  dgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Row-major C (m x n) = alpha op(A) op(B) + beta C, through column-major BLAS: C^T = op(B)^T op(A)^T.
template <typename T>
void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
            const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  const int mm = static_cast<int>(n), nn = static_cast<int>(m), kk = static_cast<int>(k);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  blas_gemm(&ta, &tb, &mm, &nn, &kk, &alpha, b, &la, a, &lb, &beta, c, &lc);
}

// Where head bh = b * H + h of a (B, H, T, D) tensor starts, and its row stride.
template <typename T>
struct Heads {
  T* data;
  int64_t heads, batch_stride, head_stride, row;

  Heads(const at::Tensor& x, int64_t heads_)
      : data(const_cast<T*>(x.data_ptr<std::remove_const_t<T>>())), heads(heads_),
        batch_stride(x.stride(0)), head_stride(x.stride(1)), row(x.stride(2)) {}
  T* head(int64_t bh) const {
    return data + (bh / heads) * batch_stride + (bh % heads) * head_stride;
  }
};

// rows [r0, r1) of a head set to 0
template <typename T>
void zero_rows(T* head, int64_t row, int64_t r0, int64_t r1, int64_t width) {
  for (int64_t i = r0; i < r1; ++i) std::fill(head + i * row, head + i * row + width, T(0));
}

// splitmix64: a stateless hash, so backward draws exactly the forward's dropout decisions.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

struct Dropout {
  double p = 0.0;
  uint64_t seed = 0;
  uint64_t threshold = 0;  // keep when the hash's top 32 bits are >= threshold
  double scale = 1.0;

  Dropout(double p_, int64_t seed_) : p(p_), seed(static_cast<uint64_t>(seed_)) {
    threshold = static_cast<uint64_t>(p * 4294967296.0);
    scale = p > 0 ? 1.0 / (1.0 - p) : 1.0;
  }
  bool active() const { return p > 0; }
  // the multiplier of score (bh, i, j): 0 or 1/(1-p)
  template <typename T>
  T keep(int64_t bh, int64_t i, int64_t j, int64_t tq, int64_t tk) const {
    uint64_t index = (static_cast<uint64_t>(bh) * tq + i) * tk + j;
    return (mix(seed ^ mix(index)) >> 32) >= threshold ? static_cast<T>(scale) : T(0);
  }
};

// How much of a tile the masks hide, from two small tables made once per call (one pass over
// each mask) instead of a scan of the tile's mask entries for every head.
enum TileState : uint8_t { kHidden = 0, kPartial = 1, kVisible = 2 };

inline uint8_t state_of(int64_t hidden, int64_t total) {
  return hidden == total ? kHidden : (hidden == 0 ? kVisible : kPartial);
}

// Which keys each tile of queries may see.
struct Visibility {
  const uint8_t* padding;  // (B, Tk) or nullptr
  const uint8_t* blocked;  // (Bm, Hm, Tq, Tk) or nullptr
  int64_t heads, tq, tk, mask_batch, mask_heads, q_tiles, k_tiles;
  std::vector<uint8_t> padding_states;  // (B, k_tiles)
  std::vector<uint8_t> blocked_states;  // (Bm, Hm, q_tiles, k_tiles)

  void make_states(int64_t batch) {
    q_tiles = (tq + kQueryBlock - 1) / kQueryBlock;
    k_tiles = (tk + kKeyBlock - 1) / kKeyBlock;
    if (padding) {
      padding_states.resize(batch * k_tiles);
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t kt = 0; kt < k_tiles; ++kt) {
          const int64_t k0 = kt * kKeyBlock, k1 = std::min(k0 + kKeyBlock, tk);
          int64_t hidden = 0;
          for (int64_t j = k0; j < k1; ++j) hidden += padding[b * tk + j] != 0;
          padding_states[b * k_tiles + kt] = state_of(hidden, k1 - k0);
        }
      }
    }
    if (blocked) {
      blocked_states.resize(mask_batch * mask_heads * q_tiles * k_tiles);
      for (int64_t m = 0; m < mask_batch * mask_heads; ++m) {
        for (int64_t qt = 0; qt < q_tiles; ++qt) {
          const int64_t q0 = qt * kQueryBlock, q1 = std::min(q0 + kQueryBlock, tq);
          for (int64_t kt = 0; kt < k_tiles; ++kt) {
            const int64_t k0 = kt * kKeyBlock, k1 = std::min(k0 + kKeyBlock, tk);
            int64_t hidden = 0;
            for (int64_t i = q0; i < q1; ++i) {
              const uint8_t* row = blocked + (m * tq + i) * tk;
              for (int64_t j = k0; j < k1; ++j) hidden += row[j] != 0;
            }
            blocked_states[(m * q_tiles + qt) * k_tiles + kt] =
                state_of(hidden, (q1 - q0) * (k1 - k0));
          }
        }
      }
    }
  }

  const uint8_t* padding_row(int64_t bh) const {
    return padding ? padding + (bh / heads) * tk : nullptr;
  }
  int64_t mask_index(int64_t bh) const {
    const int64_t b = mask_batch > 1 ? bh / heads : 0;
    const int64_t h = mask_heads > 1 ? bh % heads : 0;
    return b * mask_heads + h;
  }
  const uint8_t* blocked_rows(int64_t bh) const {
    return blocked ? blocked + mask_index(bh) * tq * tk : nullptr;
  }
  // kHidden: skip the tile; kVisible: no mask to apply; kPartial: apply the masks
  uint8_t tile_state(int64_t bh, int64_t q0, int64_t k0) const {
    const int64_t qt = q0 / kQueryBlock, kt = k0 / kKeyBlock;
    const uint8_t pad = padding ? padding_states[(bh / heads) * k_tiles + kt] : kVisible;
    const uint8_t blk =
        blocked ? blocked_states[(mask_index(bh) * q_tiles + qt) * k_tiles + kt] : kVisible;
    if (pad == kHidden || blk == kHidden) return kHidden;
    return (pad == kVisible && blk == kVisible) ? kVisible : kPartial;
  }
};

// s = f ReLU(scale q k^T) of one tile into buf (bq x bk, leading dim bk), hidden keys
// zeroed, NaN kept; f the rows' scale (``rows``, from row q0 on) or 1. Branch-free loops, so
// that the compiler vectorises them.
template <typename T>
void tile_scores(const T* q, int64_t sq, const T* k, int64_t sk, int64_t d, T scale,
                 int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t state,
                 const uint8_t* pad, const uint8_t* blk, int64_t tk, const T* rows, T* buf) {
  const int64_t bq = q1 - q0, bk = k1 - k0;
  matmul<T>(false, true, bq, bk, d, scale, q + q0 * sq, sq, k + k0 * sk, sk, T(0), buf, bk);
  const uint8_t* prow = (state == kPartial && pad) ? pad + k0 : nullptr;
  for (int64_t i = 0; i < bq; ++i) {
    T* row = buf + i * bk;
    const T f = rows ? rows[i] : T(1);
    for (int64_t j = 0; j < bk; ++j) row[j] = row[j] < T(0) ? T(0) : row[j] * f;
    if (prow) {
      for (int64_t j = 0; j < bk; ++j) row[j] = prow[j] ? T(0) : row[j];
    }
    if (state == kPartial && blk) {
      const uint8_t* brow = blk + (q0 + i) * tk + k0;
      for (int64_t j = 0; j < bk; ++j) row[j] = brow[j] ? T(0) : row[j];
    }
  }
}

template <typename T>
void forward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& row_scale, const Visibility& vis, const Dropout& drop,
                  bool need_sums, at::Tensor& u,
                  at::Tensor& row_sum, at::Tensor& xlogx, at::Tensor& positives) {
  const int64_t bh_count = q.size(0) * q.size(1), tq = q.size(2), d = q.size(3),
                tk = k.size(2), dv = v.size(3);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const Heads<const T> Q(q, vis.heads), K(k, vis.heads), V(v, vis.heads);
  const Heads<T> U(u, vis.heads);
  const T* fp = row_scale.defined() ? row_scale.data_ptr<T>() : nullptr;
  T* sp = need_sums ? row_sum.data_ptr<T>() : nullptr;
  T* xp = need_sums ? xlogx.data_ptr<T>() : nullptr;
  T* pp = need_sums ? positives.data_ptr<T>() : nullptr;
  const int64_t q_blocks = (tq + kQueryBlock - 1) / kQueryBlock;
  at::parallel_for(0, bh_count * q_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> buf(kQueryBlock * std::min(kKeyBlock, tk));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks;
      const int64_t q0 = (task % q_blocks) * kQueryBlock, q1 = std::min(q0 + kQueryBlock, tq);
      const T* qh = Q.head(bh);
      const T* kh = K.head(bh);
      const T* vh = V.head(bh);
      T* uh = U.head(bh) + q0 * U.row;
      const uint8_t* pad = vis.padding_row(bh);
      const uint8_t* blk = vis.blocked_rows(bh);
      bool first = true;
      for (int64_t k0 = 0; k0 < tk; k0 += kKeyBlock) {
        const int64_t k1 = std::min(k0 + kKeyBlock, tk), bk = k1 - k0;
        const uint8_t state = vis.tile_state(bh, q0, k0);
        if (state == kHidden) continue;
        tile_scores<T>(qh, Q.row, kh, K.row, d, scale, q0, q1, k0, k1, state, pad, blk, tk,
                       fp ? fp + bh * tq + q0 : nullptr, buf.data());
        for (int64_t i = 0; i < q1 - q0; ++i) {
          T* row = buf.data() + i * bk;
          if (need_sums) {
            T s_sum = 0, t_sum = 0, p_sum = 0;
            for (int64_t j = 0; j < bk; ++j) {
              T s = row[j];
              if (s != T(0)) {  // positive or NaN
                s_sum += s;
                t_sum += s * std::log(s);
                p_sum += s == s ? T(1) : s;
              }
            }
            const int64_t r = bh * tq + q0 + i;
            sp[r] += s_sum;
            xp[r] += t_sum;
            pp[r] += p_sum;
          }
          if (drop.active()) {
            for (int64_t j = 0; j < bk; ++j) {
              if (row[j] != T(0)) row[j] *= drop.keep<T>(bh, q0 + i, k0 + j, tq, tk);
            }
          }
        }
        // U (bq x dv) += s (bq x bk) v (bk x dv); the first tile overwrites (beta 0)
        matmul<T>(false, false, q1 - q0, dv, bk, T(1), buf.data(), bk, vh + k0 * V.row,
                  V.row, first ? T(0) : T(1), uh, U.row);
        first = false;
      }
      if (first) zero_rows(uh, U.row, 0, q1 - q0, dv);
    }
  });
}

template <typename T>
void backward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& grad_u, const at::Tensor& grad_row_sum,
                   const at::Tensor& grad_xlogx, const at::Tensor& row_scale,
                   const Visibility& vis, const Dropout& drop, at::Tensor& dq, at::Tensor& dk,
                   at::Tensor& dv_out) {
  const int64_t bh_count = q.size(0) * q.size(1), tq = q.size(2), d = q.size(3),
                tk = k.size(2), dv = v.size(3);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const Heads<const T> Q(q, vis.heads), K(k, vis.heads), V(v, vis.heads);
  const Heads<T> DQ(dq, vis.heads), DK(dk, vis.heads), DV(dv_out, vis.heads);
  const bool has_u = grad_u.defined(), has_s = grad_row_sum.defined(),
             has_t = grad_xlogx.defined();
  const std::optional<Heads<const T>> GU =
      has_u ? std::optional<Heads<const T>>(Heads<const T>(grad_u, vis.heads)) : std::nullopt;
  const T* gsp = has_s ? grad_row_sum.data_ptr<T>() : nullptr;
  const T* gtp = has_t ? grad_xlogx.data_ptr<T>() : nullptr;
  const T* fp = row_scale.defined() ? row_scale.data_ptr<T>() : nullptr;
  at::parallel_for(0, bh_count, 1, [&](int64_t begin, int64_t end) {
    const int64_t bk_max = std::min(kKeyBlock, tk);
    std::vector<T> s_buf(kQueryBlock * bk_max), g_buf(kQueryBlock * bk_max);
    for (int64_t bh = begin; bh < end; ++bh) {
      const T* qh = Q.head(bh);
      const T* kh = K.head(bh);
      const T* vh = V.head(bh);
      const T* guh = has_u ? GU->head(bh) : nullptr;
      const int64_t sgu = has_u ? GU->row : 0;
      T* dqh = DQ.head(bh);
      T* dkh = DK.head(bh);
      T* dvh = DV.head(bh);
      zero_rows(dqh, DQ.row, 0, tq, d);
      zero_rows(dkh, DK.row, 0, tk, d);
      zero_rows(dvh, DV.row, 0, tk, dv);
      const uint8_t* pad = vis.padding_row(bh);
      const uint8_t* blk = vis.blocked_rows(bh);
      for (int64_t q0 = 0; q0 < tq; q0 += kQueryBlock) {
        const int64_t q1 = std::min(q0 + kQueryBlock, tq), bq = q1 - q0;
        for (int64_t k0 = 0; k0 < tk; k0 += kKeyBlock) {
          const int64_t k1 = std::min(k0 + kKeyBlock, tk), bk = k1 - k0;
          const uint8_t state = vis.tile_state(bh, q0, k0);
          if (state == kHidden) continue;
          T* s = s_buf.data();
          T* g = g_buf.data();
          const T* rows = fp ? fp + bh * tq + q0 : nullptr;
          tile_scores<T>(qh, Q.row, kh, K.row, d, scale, q0, q1, k0, k1, state, pad, blk, tk,
                         rows, s);
          if (has_u) {
            // g = gU v^T (bq x bk)
            matmul<T>(false, true, bq, bk, dv, T(1), guh + q0 * sgu, sgu, vh + k0 * V.row, V.row,
                      T(0), g, bk);
          }
          for (int64_t i = 0; i < bq; ++i) {
            const int64_t r = bh * tq + q0 + i;
            const T shift = (has_s ? gsp[r] : T(0)) + (has_t ? gtp[r] : T(0));
            const T f = rows ? rows[i] : T(1);  // d(f s)/ds
            T* srow = s + i * bk;
            T* grow = g + i * bk;
            if (!has_u) std::fill(grow, grow + bk, T(0));
            if (drop.active()) {  // g times keep; s times keep afterwards, for dv
              for (int64_t j = 0; j < bk; ++j) {
                if (srow[j] > T(0)) {
                  const T keep = drop.keep<T>(bh, q0 + i, k0 + j, tq, tk);
                  grow[j] = grow[j] * keep * f + shift +
                            (has_t ? gtp[r] * std::log(srow[j]) : T(0));
                  srow[j] *= keep;
                } else {
                  grow[j] = srow[j];  // 0, or NaN
                }
              }
              continue;
            }
            if (has_t) {
              const T g_t = gtp[r];
              for (int64_t j = 0; j < bk; ++j) {
                grow[j] += g_t * std::log(std::max(srow[j], std::numeric_limits<T>::min()));
              }
            }
            // ReLU's (and the mask's) derivative: nothing flows where s = 0, NaN where s is
            // NaN; branch-free
            for (int64_t j = 0; j < bk; ++j) {
              grow[j] = srow[j] > T(0) ? grow[j] * f + shift : srow[j];
            }
          }
          if (has_u) {  // dv (bk x dv) += s^T gU
            matmul<T>(true, false, bk, dv, bq, T(1), s, bk, guh + q0 * sgu, sgu, T(1),
                      dvh + k0 * DV.row, DV.row);
          }
          // dq (bq x d) += scale g k;  dk (bk x d) += scale g^T q
          matmul<T>(false, false, bq, d, bk, scale, g, bk, kh + k0 * K.row, K.row, T(1),
                    dqh + q0 * DQ.row, DQ.row);
          matmul<T>(true, false, bk, d, bq, scale, g, bk, qh + q0 * Q.row, Q.row, T(1),
                    dkh + k0 * DK.row, DK.row);
        }
      }
    }
  });
}

Visibility visibility(const at::Tensor& padding, const at::Tensor& blocked, int64_t heads,
                      int64_t tq, int64_t tk, int64_t batch_heads) {
  Visibility vis{nullptr, nullptr, heads, tq, tk, 1, 1, 0, 0, {}, {}};
  if (padding.defined()) {
    TORCH_CHECK(padding.dim() == 2 && padding.size(1) == tk && padding.is_contiguous(),
                "padding must be a contiguous (B, Tk) uint8 tensor");
    vis.padding = padding.data_ptr<uint8_t>();
  }
  if (blocked.defined()) {
    TORCH_CHECK(blocked.dim() == 4 && blocked.size(2) == tq && blocked.size(3) == tk &&
                    blocked.is_contiguous(),
                "blocked must be a contiguous (B|1, H|1, Tq, Tk) uint8 tensor");
    vis.blocked = blocked.data_ptr<uint8_t>();
    vis.mask_batch = blocked.size(0);
    vis.mask_heads = blocked.size(1);
    TORCH_CHECK((vis.mask_batch == 1 || vis.mask_batch * heads == batch_heads) &&
                    (vis.mask_heads == 1 || vis.mask_heads == heads),
                "blocked must broadcast over (B, H)");
  }
  TORCH_CHECK(batch_heads % heads == 0, "the head rows must be batch x heads");
  TORCH_CHECK(!padding.defined() || padding.size(0) == batch_heads / heads,
              "padding must have one row per batch entry");
  vis.make_states(batch_heads / heads);
  return vis;
}

at::Tensor checked_row_scale(const c10::optional<at::Tensor>& row_scale, const at::Tensor& q,
                             bool sums) {
  if (!row_scale.has_value()) return at::Tensor();
  const at::Tensor& rows = *row_scale;
  TORCH_CHECK(!sums, "a row scale cannot be combined with the statistics");
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == q.size(0) * q.size(1) &&
                  rows.size(1) == q.size(2) &&
                  rows.is_contiguous() && rows.scalar_type() == q.scalar_type(),
              "row_scale must be a contiguous (BH, Tq) tensor of q's dtype");
  return rows;
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be (B, H, T, D)");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
              "q, k, v need a contiguous last dimension");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v must share their dtype");
  TORCH_CHECK(q.size(0) == k.size(0) && k.size(0) == v.size(0) && q.size(1) == k.size(1) &&
                  k.size(1) == v.size(1) && k.size(2) == v.size(2) && q.size(3) == k.size(3),
              "q, k, v shapes disagree");
}

}  // namespace

std::vector<at::Tensor> relu_sums_forward(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v,
                                          const c10::optional<at::Tensor>& padding,
                                          const c10::optional<at::Tensor>& blocked,
                                          const c10::optional<at::Tensor>& row_scale,
                                          int64_t heads, double dropout_p, int64_t seed,
                                          bool need_sums) {
  check_inputs(q, k, v);
  const at::Tensor rows = checked_row_scale(row_scale, q, need_sums);
  Visibility vis = visibility(padding.value_or(at::Tensor()), blocked.value_or(at::Tensor()),
                              heads, q.size(2), k.size(2), q.size(0) * q.size(1));
  Dropout drop(dropout_p, seed);
  // (Tq, B, H, Dv) in memory: the (T, B, E) layout fairseq merges the heads back into
  at::Tensor u = at::empty({q.size(2), q.size(0), q.size(1), v.size(3)}, q.options())
                     .permute({1, 2, 0, 3});
  at::Tensor row_sum, xlogx, positives;
  if (need_sums) {
    row_sum = at::zeros({q.size(0) * q.size(1), q.size(2)}, q.options());
    xlogx = at::zeros_like(row_sum);
    positives = at::zeros_like(row_sum);
  }
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "relu_sums_forward", [&] {
    forward_impl<scalar_t>(q, k, v, rows, vis, drop, need_sums, u, row_sum, xlogx, positives);
  });
  return {u, row_sum, xlogx, positives};
}

std::vector<at::Tensor> relu_sums_backward(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v,
                                           const c10::optional<at::Tensor>& grad_u,
                                           const c10::optional<at::Tensor>& grad_row_sum,
                                           const c10::optional<at::Tensor>& grad_xlogx,
                                           const c10::optional<at::Tensor>& padding,
                                           const c10::optional<at::Tensor>& blocked,
                                           const c10::optional<at::Tensor>& row_scale,
                                           int64_t heads, double dropout_p, int64_t seed) {
  check_inputs(q, k, v);
  const at::Tensor rows = checked_row_scale(row_scale, q, grad_row_sum.has_value() ||
                                                              grad_xlogx.has_value());
  Visibility vis = visibility(padding.value_or(at::Tensor()), blocked.value_or(at::Tensor()),
                              heads, q.size(2), k.size(2), q.size(0) * q.size(1));
  Dropout drop(dropout_p, seed);
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "relu_sums_backward", [&] {
    backward_impl<scalar_t>(q, k, v, grad_u.value_or(at::Tensor()),
                            grad_row_sum.value_or(at::Tensor()),
                            grad_xlogx.value_or(at::Tensor()), rows, vis, drop, dq, dk, dv);
  });
  return {dq, dk, dv};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &relu_sums_forward, "U, S, T, P of fused ReLU attention (CPU)");
  m.def("backward", &relu_sums_backward, "dq, dk, dv of fused ReLU attention (CPU)");
}
