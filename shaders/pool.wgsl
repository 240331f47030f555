// pool.wgsl — mean-pool over the valid positions, then L2-normalise (sentence embeddings).
//
// Computes, for every batch row b < B with n = min(lengths[b], L) valid positions (the
// valid positions are a prefix of the sequence):
//   pooled[d] = (1 / n) * sum_{t < n} hidden[b, t, d]            (0 when n = 0)
//   out[b, d] = pooled[d] / max(||pooled||_2, eps)               (torch F.normalize)
// so a row with no valid positions, or an all-zero mean, comes out as the zero vector.
// Two more entry points serve the embedding objective (shaders/embed_loss.wgsl):
//   mean       out[b, d] = pooled[d]                           (no normalisation)
//   mean_bwd   dhidden[b, t, d] = grad_pooled[b, d] / n  for t < n, 0 elsewhere
// and the backward of mean_l2 (the embedding objective trains on the unit vectors, as the
// package's head applies to them), with u = out[b] and r = max(||pooled||, eps):
//   mean_l2_bwd  dp = (grad_pooled[b] - u (u . grad_pooled[b])) / r
//                dhidden[b, t, d] = dp[d] / n  for t < n, 0 elsewhere
//                (`out` is its scratch: it holds the raw mean afterwards)
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 hidden       storage read        B*L*D f32, row-major (B, L, D)     mean_l2, mean, mean_l2_bwd
//   1 lengths      storage read        B u32                              all
//   2 out          storage read_write  B*D f32                            mean_l2, mean, mean_l2_bwd
//   3 params       uniform             Params                             all
//   4 grad_pooled  storage read        B*D f32                            mean_bwd, mean_l2_bwd
//   5 dhidden      storage read_write  B*L*D f32 (overwritten)            mean_bwd, mean_l2_bwd
// Dispatch: mean_l2, mean and mean_l2_bwd: one workgroup per batch row, b = wid.y * nwg.x + wid.x (2-D
// past 65,535 rows); the WG invocations stride over D (d = lid.x, lid.x + WG, ...), so
// neighbouring invocations read neighbouring floats of each position. mean_bwd:
// grid_1d(B*L*D, WG), one invocation per element of dhidden.
// Determinism: the sum over t runs in order per invocation; the two reductions over D
// (max |x| and the sum of squares) are fixed-shape trees in workgroup memory (WG must be
// a power of two).
// Numerical hazards: the norm is computed as s * sqrt(sum((x / s)^2)) with s = max |x|, so
// squaring neither overflows (|x| > 1.8e19) nor underflows to zero (|x| < 1e-19), and a
// tiny but non-zero vector still normalises to unit length.

struct Params {
    batch: u32,
    seq_len: u32,
    dim: u32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> hidden: array<f32>;
@group(0) @binding(1) var<storage, read> lengths: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read> grad_pooled: array<f32>;
@group(0) @binding(5) var<storage, read_write> dhidden: array<f32>;

override WG: u32 = 128;

var<workgroup> scratch: array<f32, WG>;

// Tree reduction of scratch[0..WG) with max or +; every invocation returns the result.
// Must be called from uniform control flow by every invocation of the workgroup.
fn reduce_scratch(lid: u32, value: f32, use_max: bool) -> f32 {
    workgroupBarrier();  // earlier readers of scratch are done
    scratch[lid] = value;
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        workgroupBarrier();
        if (lid < stride) {
            let other = scratch[lid + stride];
            if (use_max) {
                scratch[lid] = max(scratch[lid], other);
            } else {
                scratch[lid] = scratch[lid] + other;
            }
        }
    }
    workgroupBarrier();
    return scratch[0];
}

@compute @workgroup_size(WG)
fn mean_l2(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(local_invocation_id) lid3: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = wid.y * nwg.x + wid.x;
    if (b >= params.batch) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let dim = params.dim;
    let n = min(lengths[b], params.seq_len);
    let inv_n = select(0.0, 1.0 / f32(n), n > 0u);
    let row_in = b * params.seq_len * dim;
    let row_out = b * dim;

    // 1. Mean over the valid prefix; each invocation keeps its own columns' means in `out`
    //    (only it touches them, so no barrier is needed before it reads them back).
    var local_max = 0.0;
    for (var d = lid; d < dim; d += WG) {
        var sum = 0.0;
        for (var t = 0u; t < n; t++) {
            sum += hidden[row_in + t * dim + d];
        }
        let mean = sum * inv_n;
        out[row_out + d] = mean;
        local_max = max(local_max, abs(mean));
    }
    let scale = reduce_scratch(lid, local_max, true);

    // 2. Scaled sum of squares, then the norm. An all-zero mean (or n = 0) has scale 0:
    //    it stays zero (no early return: the barriers below need uniform control flow).
    let inv_scale = select(0.0, 1.0 / scale, scale > 0.0);
    var local_sq = 0.0;
    for (var d = lid; d < dim; d += WG) {
        let x = out[row_out + d] * inv_scale;
        local_sq += x * x;
    }
    let norm = scale * sqrt(reduce_scratch(lid, local_sq, false));
    let inv_norm = 1.0 / max(norm, params.eps);
    for (var d = lid; d < dim; d += WG) {
        out[row_out + d] = out[row_out + d] * inv_norm;
    }
}

@compute @workgroup_size(WG)
fn mean(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = wid.y * nwg.x + wid.x;
    if (b >= params.batch) {
        return;
    }
    let dim = params.dim;
    let n = min(lengths[b], params.seq_len);
    let inv_n = select(0.0, 1.0 / f32(n), n > 0u);
    let row_in = b * params.seq_len * dim;
    for (var d = lid3.x; d < dim; d += WG) {
        var sum = 0.0;
        for (var t = 0u; t < n; t++) {
            sum += hidden[row_in + t * dim + d];
        }
        out[b * dim + d] = sum * inv_n;
    }
}

@compute @workgroup_size(WG)
fn mean_bwd(@builtin(workgroup_id) wid: vec3<u32>,
            @builtin(local_invocation_id) lid3: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid3.x;
    let dim = params.dim;
    let per_row = params.seq_len * dim;
    if (i >= params.batch * per_row) {
        return;
    }
    let b = i / per_row;
    let t = (i % per_row) / dim;
    let d = i % dim;
    let n = min(lengths[b], params.seq_len);
    var value = 0.0;
    if (t < n) {
        value = grad_pooled[b * dim + d] / f32(n);
    }
    dhidden[i] = value;
}

@compute @workgroup_size(WG)
fn mean_l2_bwd(@builtin(workgroup_id) wid: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = wid.y * nwg.x + wid.x;
    if (b >= params.batch) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let dim = params.dim;
    let seq_len = params.seq_len;
    let n = min(lengths[b], seq_len);
    let inv_n = select(0.0, 1.0 / f32(n), n > 0u);
    let row_in = b * seq_len * dim;
    let row_out = b * dim;

    // 1. The raw mean, as mean_l2 computes it, kept in `out` (own columns only).
    var local_max = 0.0;
    for (var d = lid; d < dim; d += WG) {
        var sum = 0.0;
        for (var t = 0u; t < n; t++) {
            sum += hidden[row_in + t * dim + d];
        }
        let mean = sum * inv_n;
        out[row_out + d] = mean;
        local_max = max(local_max, abs(mean));
    }
    let scale = reduce_scratch(lid, local_max, true);

    // 2. Its norm r (overflow-safe, as in mean_l2), then u . g with u = mean / r.
    let inv_scale = select(0.0, 1.0 / scale, scale > 0.0);
    var local_sq = 0.0;
    for (var d = lid; d < dim; d += WG) {
        let x = out[row_out + d] * inv_scale;
        local_sq += x * x;
    }
    let norm = scale * sqrt(reduce_scratch(lid, local_sq, false));
    let inv_r = 1.0 / max(norm, params.eps);
    var local_dot = 0.0;
    for (var d = lid; d < dim; d += WG) {
        local_dot += out[row_out + d] * inv_r * grad_pooled[row_out + d];
    }
    let dot = reduce_scratch(lid, local_dot, false);

    // 3. dp = (g - u dot) / r, spread evenly over the valid prefix; padding gets 0.
    for (var d = lid; d < dim; d += WG) {
        let u = out[row_out + d] * inv_r;
        let dp = (grad_pooled[row_out + d] - u * dot) * inv_r * inv_n;
        for (var t = 0u; t < seq_len; t++) {
            dhidden[row_in + t * dim + d] = select(0.0, dp, t < n);
        }
    }
}
