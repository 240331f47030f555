// matmul.wgsl — C = op(A) · op(B) (+ bias) (+= C), the Linear layer forward and backward.
//
// Computes, for i < M, j < N (row-major f32, sizes in Params):
//   C[i, j] (+)= sum_k A'[i, k] * B'[k, j]  (+ bias[j])
// where A' = A (stored M x K) or Aᵀ (stored K x M, TRANS_A), and B' = B (stored K x N) or
// Bᵀ (stored N x K, TRANS_B). The three uses in a Linear layer y = x·Wᵀ + b:
//   forward    Y (M,N)  = X (M,K) · W (N,K)ᵀ + b      TRANS_A=false TRANS_B=true
//   input grad dX (M,K) = dY (M,N) · W (N,K)           TRANS_A=false TRANS_B=false
//   weight grad dW (N,K) = dY (M,N)ᵀ · X (M,K)         TRANS_A=true  TRANS_B=false
// With params.accumulate = 1 the result is added to C (gradient accumulation, the tied
// embedding's two contributions); otherwise C is overwritten.
//
// Bindings (group 0):
//   0 a      storage read        M*K f32 (layout per TRANS_A)
//   1 b      storage read        K*N f32 (layout per TRANS_B)
//   2 bias   storage read        N f32 (read only when params.has_bias = 1; bind any
//                                4-byte buffer otherwise)
//   3 c      storage read_write  M*N f32
//   4 params uniform            Params
// Dispatch: (ceil(N / (WG_X*8)), ceil(M / (WG_Y*8)), 1) workgroups of WG_X x WG_Y.
// Register blocking: every invocation owns an 8 x 8 tile of C — rows row0 + r with
//   row0 = (wid.y*WG_Y + lid.y)*8, and columns col0 + WG_X*c with col0 = wid.x*WG_X*8 +
//   lid.x (r, c < 8) — and keeps its 64 sums in registers: 16 loads per 64 FMAs. 4 x 4 and
//   8 x 4 tiles measured slower on lavapipe (more loads per FMA). Columns are strided by WG_X so neighbouring invocations touch
// neighbouring columns (contiguous stores, contiguous B loads when B is not transposed).
// No workgroup memory: on the CPU adapters we test on (lavapipe, SwiftShader) tiling
// through workgroup memory measured slower than register blocking.
// Edges: loads clamp their row/column into range (the extra values are computed and
// dropped), so the inner loop has no branches; stores are guarded.
// Numerical hazards: plain f32 sums in k order (deterministic; error grows ~ sqrt(K) ulp
// for random data, K ulp worst case).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    has_bias: u32,
    accumulate: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

override WG_X: u32 = 16;
override WG_Y: u32 = 8;
override TRANS_A: bool = false;
override TRANS_B: bool = true;

// Rows and columns of C per invocation (the register tile); the launcher mirrors it.
const TILE: u32 = 8u;

// A'[i, k]
fn load_a(i: u32, k: u32) -> f32 {
    if (TRANS_A) {
        return a[k * params.m + i];
    }
    return a[i * params.k + k];
}

// B'[k, j]
fn load_b(k: u32, j: u32) -> f32 {
    if (TRANS_B) {
        return b[j * params.k + k];
    }
    return b[k * params.n + j];
}

// Loads four B' values of row k at columns j.x .. j.w.
fn load_b4(k: u32, j: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(load_b(k, j.x), load_b(k, j.y), load_b(k, j.z), load_b(k, j.w));
}

// Writes (or adds) one finished value; out-of-range coordinates are dropped.
fn store(i: u32, j: u32, value: f32) {
    if (i >= params.m || j >= params.n) {
        return;
    }
    let idx = i * params.n + j;
    if (params.accumulate == 1u) {
        c[idx] = c[idx] + value;
    } else {
        c[idx] = value;
    }
}

@compute @workgroup_size(WG_X, WG_Y)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = params.m;
    let n = params.n;
    let row0 = (wid.y * WG_Y + lid.y) * TILE;
    let col0 = wid.x * WG_X * TILE + lid.x;
    if (row0 >= m || col0 >= n) {
        return;
    }
    // Clamped coordinates: always in range, so the inner loop's loads need no guard.
    let last_row = vec4<u32>(m - 1u);
    let last_col = vec4<u32>(n - 1u);
    let rows_lo = min(vec4<u32>(row0) + vec4<u32>(0u, 1u, 2u, 3u), last_row);
    let rows_hi = min(vec4<u32>(row0) + vec4<u32>(4u, 5u, 6u, 7u), last_row);
    let cols_lo = min(vec4<u32>(col0) + WG_X * vec4<u32>(0u, 1u, 2u, 3u), last_col);
    let cols_hi = min(vec4<u32>(col0) + WG_X * vec4<u32>(4u, 5u, 6u, 7u), last_col);

    // acc<r>_lo holds C[row0 + r, columns 0..3 of the tile], acc<r>_hi columns 4..7.
    // Sixteen named vectors rather than an array: the compilers keep them in registers.
    var acc0_lo = vec4<f32>(0.0);
    var acc0_hi = vec4<f32>(0.0);
    var acc1_lo = vec4<f32>(0.0);
    var acc1_hi = vec4<f32>(0.0);
    var acc2_lo = vec4<f32>(0.0);
    var acc2_hi = vec4<f32>(0.0);
    var acc3_lo = vec4<f32>(0.0);
    var acc3_hi = vec4<f32>(0.0);
    var acc4_lo = vec4<f32>(0.0);
    var acc4_hi = vec4<f32>(0.0);
    var acc5_lo = vec4<f32>(0.0);
    var acc5_hi = vec4<f32>(0.0);
    var acc6_lo = vec4<f32>(0.0);
    var acc6_hi = vec4<f32>(0.0);
    var acc7_lo = vec4<f32>(0.0);
    var acc7_hi = vec4<f32>(0.0);
    for (var kk = 0u; kk < params.k; kk++) {
        let b_lo = load_b4(kk, cols_lo);
        let b_hi = load_b4(kk, cols_hi);
        let a0 = vec4<f32>(load_a(rows_lo.x, kk));
        acc0_lo = fma(a0, b_lo, acc0_lo);
        acc0_hi = fma(a0, b_hi, acc0_hi);
        let a1 = vec4<f32>(load_a(rows_lo.y, kk));
        acc1_lo = fma(a1, b_lo, acc1_lo);
        acc1_hi = fma(a1, b_hi, acc1_hi);
        let a2 = vec4<f32>(load_a(rows_lo.z, kk));
        acc2_lo = fma(a2, b_lo, acc2_lo);
        acc2_hi = fma(a2, b_hi, acc2_hi);
        let a3 = vec4<f32>(load_a(rows_lo.w, kk));
        acc3_lo = fma(a3, b_lo, acc3_lo);
        acc3_hi = fma(a3, b_hi, acc3_hi);
        let a4 = vec4<f32>(load_a(rows_hi.x, kk));
        acc4_lo = fma(a4, b_lo, acc4_lo);
        acc4_hi = fma(a4, b_hi, acc4_hi);
        let a5 = vec4<f32>(load_a(rows_hi.y, kk));
        acc5_lo = fma(a5, b_lo, acc5_lo);
        acc5_hi = fma(a5, b_hi, acc5_hi);
        let a6 = vec4<f32>(load_a(rows_hi.z, kk));
        acc6_lo = fma(a6, b_lo, acc6_lo);
        acc6_hi = fma(a6, b_hi, acc6_hi);
        let a7 = vec4<f32>(load_a(rows_hi.w, kk));
        acc7_lo = fma(a7, b_lo, acc7_lo);
        acc7_hi = fma(a7, b_hi, acc7_hi);
    }

    var bias_lo = vec4<f32>(0.0);
    var bias_hi = vec4<f32>(0.0);
    if (params.has_bias == 1u) {
        bias_lo = vec4<f32>(bias[cols_lo.x], bias[cols_lo.y], bias[cols_lo.z], bias[cols_lo.w]);
        bias_hi = vec4<f32>(bias[cols_hi.x], bias[cols_hi.y], bias[cols_hi.z], bias[cols_hi.w]);
    }
    let lo = array<vec4<f32>, 8>(acc0_lo, acc1_lo, acc2_lo, acc3_lo,
                                 acc4_lo, acc5_lo, acc6_lo, acc7_lo);
    let hi = array<vec4<f32>, 8>(acc0_hi, acc1_hi, acc2_hi, acc3_hi,
                                 acc4_hi, acc5_hi, acc6_hi, acc7_hi);
    for (var r = 0u; r < TILE; r++) {
        let i = row0 + r;
        let v_lo = lo[r] + bias_lo;
        let v_hi = hi[r] + bias_hi;
        for (var cc = 0u; cc < 4u; cc++) {
            store(i, col0 + cc * WG_X, v_lo[cc]);
            store(i, col0 + (cc + 4u) * WG_X, v_hi[cc]);
        }
    }
}
