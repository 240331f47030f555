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
//   (the vectorised entry points read bindings 0 and 1 through vec4 views, a_k4 and b_k4)
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
// Vectorised entry points (main_nt_k4, main_nn_v4, main_tn_v4, at the end of the file) compute
// the same 8 x 8 tiles with vec4 loads along whichever axis is contiguous in memory (k for a
// row-major A and for B stored N x K; the columns of B stored K x N; the rows of A stored
// K x M) when the sizes divide by 4. They run the same fmas in the same k order, so their
// results are bit-identical to main's. Measured on the nano model's matmuls: ~1.6-1.9x faster
// than main on lavapipe, ~1.15-1.25x on SwiftShader for NT and NN (TN unchanged there); the
// launcher uses them on CPU adapters.
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

// -- vectorised variants: the same products with vec4 loads ---------------------------------
// a_k4 / b_k4 view bindings 0 / 1 as vec4 (no entry point uses both views of a binding).
@group(0) @binding(0) var<storage, read> a_k4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b_k4: array<vec4<f32>>;

// Writes (or adds) columns 4*c4 .. 4*c4+3 of row i, plus the bias; out-of-range ones dropped.
fn store_run(i: u32, c4: u32, v: vec4<f32>) {
    for (var cc = 0u; cc < 4u; cc++) {
        let j = 4u * c4 + cc;
        if (j < params.n) {
            var value = v[cc];
            if (params.has_bias == 1u) {
                value = value + bias[j];
            }
            store(i, j, value);
        }
    }
}

// main_nt_k4 — the forward (TRANS_B, not TRANS_A) when K % 4 == 0. The same tile as main, but
// A's rows and B's rows (= columns of B') are read four k at a time as vec4 (a_k4, b_k4 alias
// bindings 0 and 1): 16 vector loads per 4 k instead of 64 scalar ones. The fmas run in the
// same k order as main, so the results are bit-identical to main's.
@compute @workgroup_size(WG_X, WG_Y)
fn main_nt_k4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = params.m;
    let n = params.n;
    let k4 = params.k / 4u;
    let row0 = (wid.y * WG_Y + lid.y) * TILE;
    let col0 = wid.x * WG_X * TILE + lid.x;
    if (row0 >= m || col0 >= n) {
        return;
    }
    let last_row = vec4<u32>(m - 1u);
    let last_col = vec4<u32>(n - 1u);
    let cols_lo = min(vec4<u32>(col0) + WG_X * vec4<u32>(0u, 1u, 2u, 3u), last_col);
    let cols_hi = min(vec4<u32>(col0) + WG_X * vec4<u32>(4u, 5u, 6u, 7u), last_col);
    // Offsets (in vec4) of the tile's rows of A and of B.
    let rows_lo = min(vec4<u32>(row0) + vec4<u32>(0u, 1u, 2u, 3u), last_row) * k4;
    let rows_hi = min(vec4<u32>(row0) + vec4<u32>(4u, 5u, 6u, 7u), last_row) * k4;
    let b_lo_at = cols_lo * k4;
    let b_hi_at = cols_hi * k4;
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
    for (var q = 0u; q < k4; q++) {
        // b<c>: B'[4q .. 4q+3, column c of the tile]; a<r>: A'[row r, 4q .. 4q+3].
        let b0 = b_k4[b_lo_at.x + q];
        let b1 = b_k4[b_lo_at.y + q];
        let b2 = b_k4[b_lo_at.z + q];
        let b3 = b_k4[b_lo_at.w + q];
        let b4 = b_k4[b_hi_at.x + q];
        let b5 = b_k4[b_hi_at.y + q];
        let b6 = b_k4[b_hi_at.z + q];
        let b7 = b_k4[b_hi_at.w + q];
        let a0 = a_k4[rows_lo.x + q];
        let a1 = a_k4[rows_lo.y + q];
        let a2 = a_k4[rows_lo.z + q];
        let a3 = a_k4[rows_lo.w + q];
        let a4 = a_k4[rows_hi.x + q];
        let a5 = a_k4[rows_hi.y + q];
        let a6 = a_k4[rows_hi.z + q];
        let a7 = a_k4[rows_hi.w + q];
        let b_lo_x = vec4<f32>(b0.x, b1.x, b2.x, b3.x);
        let b_hi_x = vec4<f32>(b4.x, b5.x, b6.x, b7.x);
        acc0_lo = fma(vec4<f32>(a0.x), b_lo_x, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.x), b_hi_x, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.x), b_lo_x, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.x), b_hi_x, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.x), b_lo_x, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.x), b_hi_x, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.x), b_lo_x, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.x), b_hi_x, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.x), b_lo_x, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.x), b_hi_x, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.x), b_lo_x, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.x), b_hi_x, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.x), b_lo_x, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.x), b_hi_x, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.x), b_lo_x, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.x), b_hi_x, acc7_hi);
        let b_lo_y = vec4<f32>(b0.y, b1.y, b2.y, b3.y);
        let b_hi_y = vec4<f32>(b4.y, b5.y, b6.y, b7.y);
        acc0_lo = fma(vec4<f32>(a0.y), b_lo_y, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.y), b_hi_y, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.y), b_lo_y, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.y), b_hi_y, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.y), b_lo_y, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.y), b_hi_y, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.y), b_lo_y, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.y), b_hi_y, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.y), b_lo_y, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.y), b_hi_y, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.y), b_lo_y, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.y), b_hi_y, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.y), b_lo_y, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.y), b_hi_y, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.y), b_lo_y, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.y), b_hi_y, acc7_hi);
        let b_lo_z = vec4<f32>(b0.z, b1.z, b2.z, b3.z);
        let b_hi_z = vec4<f32>(b4.z, b5.z, b6.z, b7.z);
        acc0_lo = fma(vec4<f32>(a0.z), b_lo_z, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.z), b_hi_z, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.z), b_lo_z, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.z), b_hi_z, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.z), b_lo_z, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.z), b_hi_z, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.z), b_lo_z, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.z), b_hi_z, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.z), b_lo_z, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.z), b_hi_z, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.z), b_lo_z, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.z), b_hi_z, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.z), b_lo_z, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.z), b_hi_z, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.z), b_lo_z, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.z), b_hi_z, acc7_hi);
        let b_lo_w = vec4<f32>(b0.w, b1.w, b2.w, b3.w);
        let b_hi_w = vec4<f32>(b4.w, b5.w, b6.w, b7.w);
        acc0_lo = fma(vec4<f32>(a0.w), b_lo_w, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.w), b_hi_w, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.w), b_lo_w, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.w), b_hi_w, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.w), b_lo_w, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.w), b_hi_w, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.w), b_lo_w, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.w), b_hi_w, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.w), b_lo_w, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.w), b_hi_w, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.w), b_lo_w, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.w), b_hi_w, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.w), b_lo_w, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.w), b_hi_w, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.w), b_lo_w, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.w), b_hi_w, acc7_hi);
    }
    let lo = array<vec4<f32>, 8>(acc0_lo, acc1_lo, acc2_lo, acc3_lo,
                                 acc4_lo, acc5_lo, acc6_lo, acc7_lo);
    let hi = array<vec4<f32>, 8>(acc0_hi, acc1_hi, acc2_hi, acc3_hi,
                                 acc4_hi, acc5_hi, acc6_hi, acc7_hi);
    var bias_lo = vec4<f32>(0.0);
    var bias_hi = vec4<f32>(0.0);
    if (params.has_bias == 1u) {
        bias_lo = vec4<f32>(bias[cols_lo.x], bias[cols_lo.y], bias[cols_lo.z], bias[cols_lo.w]);
        bias_hi = vec4<f32>(bias[cols_hi.x], bias[cols_hi.y], bias[cols_hi.z], bias[cols_hi.w]);
    }
    for (var r = 0u; r < TILE; r++) {
        let v_lo = lo[r] + bias_lo;
        let v_hi = hi[r] + bias_hi;
        for (var cc = 0u; cc < 4u; cc++) {
            store(row0 + r, col0 + cc * WG_X, v_lo[cc]);
            store(row0 + r, col0 + (cc + 4u) * WG_X, v_hi[cc]);
        }
    }
}

// main_nn_v4 — the input gradient (neither transposed) when K % 4 == 0 and N % 4 == 0. Each
// invocation owns 8 rows (as main) and two runs of 4 adjacent columns: vec4 columns c4 and
// c4 + WG_X, c4 = wid.x*WG_X*2 + lid.x (a workgroup still spans WG_X*8 columns). A is read
// four k at a time, B four columns at a time: 16 vector loads per 4 k instead of 64 scalar
// ones, fmas in main's k order (bit-identical results).
@compute @workgroup_size(WG_X, WG_Y)
fn main_nn_v4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = params.m;
    let n = params.n;
    let k4 = params.k / 4u;
    let n4 = n / 4u;
    let row0 = (wid.y * WG_Y + lid.y) * TILE;
    let c4 = wid.x * WG_X * 2u + lid.x;
    if (row0 >= m || c4 >= n4) {
        return;
    }
    let last_row = vec4<u32>(m - 1u);
    let rows_lo = min(vec4<u32>(row0) + vec4<u32>(0u, 1u, 2u, 3u), last_row) * k4;
    let rows_hi = min(vec4<u32>(row0) + vec4<u32>(4u, 5u, 6u, 7u), last_row) * k4;
    let c4_hi = min(c4 + WG_X, n4 - 1u);
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
    for (var q = 0u; q < k4; q++) {
        // a<r>: A'[row r, 4q .. 4q+3]; b_<lo|hi>_<s>: B'[4q + s, the run's 4 columns].
        let a0 = a_k4[rows_lo.x + q];
        let a1 = a_k4[rows_lo.y + q];
        let a2 = a_k4[rows_lo.z + q];
        let a3 = a_k4[rows_lo.w + q];
        let a4 = a_k4[rows_hi.x + q];
        let a5 = a_k4[rows_hi.y + q];
        let a6 = a_k4[rows_hi.z + q];
        let a7 = a_k4[rows_hi.w + q];
        let b_lo_x = b_k4[(4u * q + 0u) * n4 + c4];
        let b_hi_x = b_k4[(4u * q + 0u) * n4 + c4_hi];
        acc0_lo = fma(vec4<f32>(a0.x), b_lo_x, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.x), b_hi_x, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.x), b_lo_x, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.x), b_hi_x, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.x), b_lo_x, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.x), b_hi_x, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.x), b_lo_x, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.x), b_hi_x, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.x), b_lo_x, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.x), b_hi_x, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.x), b_lo_x, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.x), b_hi_x, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.x), b_lo_x, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.x), b_hi_x, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.x), b_lo_x, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.x), b_hi_x, acc7_hi);
        let b_lo_y = b_k4[(4u * q + 1u) * n4 + c4];
        let b_hi_y = b_k4[(4u * q + 1u) * n4 + c4_hi];
        acc0_lo = fma(vec4<f32>(a0.y), b_lo_y, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.y), b_hi_y, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.y), b_lo_y, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.y), b_hi_y, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.y), b_lo_y, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.y), b_hi_y, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.y), b_lo_y, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.y), b_hi_y, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.y), b_lo_y, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.y), b_hi_y, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.y), b_lo_y, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.y), b_hi_y, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.y), b_lo_y, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.y), b_hi_y, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.y), b_lo_y, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.y), b_hi_y, acc7_hi);
        let b_lo_z = b_k4[(4u * q + 2u) * n4 + c4];
        let b_hi_z = b_k4[(4u * q + 2u) * n4 + c4_hi];
        acc0_lo = fma(vec4<f32>(a0.z), b_lo_z, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.z), b_hi_z, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.z), b_lo_z, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.z), b_hi_z, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.z), b_lo_z, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.z), b_hi_z, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.z), b_lo_z, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.z), b_hi_z, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.z), b_lo_z, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.z), b_hi_z, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.z), b_lo_z, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.z), b_hi_z, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.z), b_lo_z, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.z), b_hi_z, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.z), b_lo_z, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.z), b_hi_z, acc7_hi);
        let b_lo_w = b_k4[(4u * q + 3u) * n4 + c4];
        let b_hi_w = b_k4[(4u * q + 3u) * n4 + c4_hi];
        acc0_lo = fma(vec4<f32>(a0.w), b_lo_w, acc0_lo);
        acc0_hi = fma(vec4<f32>(a0.w), b_hi_w, acc0_hi);
        acc1_lo = fma(vec4<f32>(a1.w), b_lo_w, acc1_lo);
        acc1_hi = fma(vec4<f32>(a1.w), b_hi_w, acc1_hi);
        acc2_lo = fma(vec4<f32>(a2.w), b_lo_w, acc2_lo);
        acc2_hi = fma(vec4<f32>(a2.w), b_hi_w, acc2_hi);
        acc3_lo = fma(vec4<f32>(a3.w), b_lo_w, acc3_lo);
        acc3_hi = fma(vec4<f32>(a3.w), b_hi_w, acc3_hi);
        acc4_lo = fma(vec4<f32>(a4.w), b_lo_w, acc4_lo);
        acc4_hi = fma(vec4<f32>(a4.w), b_hi_w, acc4_hi);
        acc5_lo = fma(vec4<f32>(a5.w), b_lo_w, acc5_lo);
        acc5_hi = fma(vec4<f32>(a5.w), b_hi_w, acc5_hi);
        acc6_lo = fma(vec4<f32>(a6.w), b_lo_w, acc6_lo);
        acc6_hi = fma(vec4<f32>(a6.w), b_hi_w, acc6_hi);
        acc7_lo = fma(vec4<f32>(a7.w), b_lo_w, acc7_lo);
        acc7_hi = fma(vec4<f32>(a7.w), b_hi_w, acc7_hi);
    }
    let lo = array<vec4<f32>, 8>(acc0_lo, acc1_lo, acc2_lo, acc3_lo,
                                 acc4_lo, acc5_lo, acc6_lo, acc7_lo);
    let hi = array<vec4<f32>, 8>(acc0_hi, acc1_hi, acc2_hi, acc3_hi,
                                 acc4_hi, acc5_hi, acc6_hi, acc7_hi);
    for (var r = 0u; r < TILE; r++) {
        store_run(row0 + r, c4, lo[r]);
        store_run(row0 + r, c4 + WG_X, hi[r]);
    }
}

// main_tn_v4 — the weight gradient (TRANS_A, not TRANS_B) when M % 4 == 0 and N % 4 == 0.
// Each invocation owns two runs of 4 adjacent rows (vec4 rows r4 and r4 + WG_Y, r4 =
// wid.y*WG_Y*2 + lid.y) and two runs of 4 adjacent columns (as main_nn_v4): per k, A' and
// B' each give two vec4 loads, 4 instead of main's 16; fmas in k order (bit-identical).
@compute @workgroup_size(WG_X, WG_Y)
fn main_tn_v4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m4 = params.m / 4u;
    let n4 = params.n / 4u;
    let r4 = wid.y * WG_Y * 2u + lid.y;
    let c4 = wid.x * WG_X * 2u + lid.x;
    if (r4 >= m4 || c4 >= n4) {
        return;
    }
    let r4_hi = min(r4 + WG_Y, m4 - 1u);
    let c4_hi = min(c4 + WG_X, n4 - 1u);
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
        let a_lo = a_k4[kk * m4 + r4];
        let a_hi = a_k4[kk * m4 + r4_hi];
        let b_lo = b_k4[kk * n4 + c4];
        let b_hi = b_k4[kk * n4 + c4_hi];
        acc0_lo = fma(vec4<f32>(a_lo.x), b_lo, acc0_lo);
        acc0_hi = fma(vec4<f32>(a_lo.x), b_hi, acc0_hi);
        acc1_lo = fma(vec4<f32>(a_lo.y), b_lo, acc1_lo);
        acc1_hi = fma(vec4<f32>(a_lo.y), b_hi, acc1_hi);
        acc2_lo = fma(vec4<f32>(a_lo.z), b_lo, acc2_lo);
        acc2_hi = fma(vec4<f32>(a_lo.z), b_hi, acc2_hi);
        acc3_lo = fma(vec4<f32>(a_lo.w), b_lo, acc3_lo);
        acc3_hi = fma(vec4<f32>(a_lo.w), b_hi, acc3_hi);
        acc4_lo = fma(vec4<f32>(a_hi.x), b_lo, acc4_lo);
        acc4_hi = fma(vec4<f32>(a_hi.x), b_hi, acc4_hi);
        acc5_lo = fma(vec4<f32>(a_hi.y), b_lo, acc5_lo);
        acc5_hi = fma(vec4<f32>(a_hi.y), b_hi, acc5_hi);
        acc6_lo = fma(vec4<f32>(a_hi.z), b_lo, acc6_lo);
        acc6_hi = fma(vec4<f32>(a_hi.z), b_hi, acc6_hi);
        acc7_lo = fma(vec4<f32>(a_hi.w), b_lo, acc7_lo);
        acc7_hi = fma(vec4<f32>(a_hi.w), b_hi, acc7_hi);
    }
    let lo = array<vec4<f32>, 8>(acc0_lo, acc1_lo, acc2_lo, acc3_lo,
                                 acc4_lo, acc5_lo, acc6_lo, acc7_lo);
    let hi = array<vec4<f32>, 8>(acc0_hi, acc1_hi, acc2_hi, acc3_hi,
                                 acc4_hi, acc5_hi, acc6_hi, acc7_hi);
    // Tile rows 0..3 are 4*r4 + r, rows 4..7 are 4*(r4 + WG_Y) + r.
    for (var r = 0u; r < 4u; r++) {
        store_run(4u * r4 + r, c4, lo[r]);
        store_run(4u * r4 + r, c4 + WG_X, hi[r]);
        store_run(4u * (r4 + WG_Y) + r, c4, lo[r + 4u]);
        store_run(4u * (r4 + WG_Y) + r, c4 + WG_X, hi[r + 4u]);
    }
}
