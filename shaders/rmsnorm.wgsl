// rmsnorm.wgsl — RMSNorm over the last axis, forward and backward.
//
// Computes, for rows m < M of x (M, D) and a gain w (D):
//   rmsnorm_fwd             rstd[m] = 1 / sqrt(mean_j x[m,j]^2 + eps)
//                           y[m,j]  = x[m,j] * rstd[m] * w[j]
//   rmsnorm_bwd_dx          with g = dy * w and xhat = x * rstd[m]:
//                           dx[m,j] (+)= rstd[m] * (g[m,j] - xhat[m,j] * mean_j(g * xhat))
//   rmsnorm_bwd_dw_partial  partial[c,j] = sum over rows m of chunk c (ascending) of
//                           dy[m,j] * x[m,j] * rstd[m]; chunk c holds rows [c*R, (c+1)*R)
//   rmsnorm_bwd_dw_finish   dw[j] (+)= sum over c = 0..C-1 (ascending) of partial[c,j]
//   rmsnorm_fwd_rows        the forward, one invocation per row (row-serial strategy)
//   rmsnorm_bwd_dx_rows     dx, one invocation per row (row-serial strategy)
// The gated, grouped variant (Mamba-2's MambaRMSNormGated, norm_before_gate=False), with
// u = x * silu(z) normalised over groups of S = group_size columns and G = D / S groups:
//   gated_fwd_rows          rstd[m,k] = 1 / sqrt(mean over group k of u^2 + eps)
//                           y[m,j]    = u[m,j] * rstd[m, j / S] * w[j]
//   gated_bwd_dx_rows       with g = dy * w, uhat = u * rstd and
//                           du = rstd * (g - uhat * mean over the group of g * uhat):
//                           dx = du * silu(z),  dz = du * x * silu'(z)     (overwritten)
//   gated_bwd_dw_partial    partial[c,j] = sum over rows m of chunk c of dy * uhat, then
//                           rmsnorm_bwd_dw_finish as above
// "(+)=" accumulates when params.accumulate != 0 and overwrites otherwise.
// Two strategies compute the same values: the tree entry points (rmsnorm_fwd,
// rmsnorm_bwd_dx) spread a row over a workgroup and reduce it through workgroup memory,
// which suits GPUs; the row-serial ones (*_rows) give each invocation a whole row and loop
// over D in column order, with no workgroup memory and no barriers, which suits CPU
// adapters (lavapipe, SwiftShader), where barriers are expensive.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 x        storage read        M*D f32
//   1 weight   storage read        D f32
//   2 y        storage read_write  M*D f32
//   3 rstd     storage read_write  M f32 (written by the forward, read by the backward)
//   4 dy       storage read        M*D f32 (upstream gradient)
//   5 dx       storage read_write  M*D f32
//   6 dw       storage read_write  D f32
//   7 partial  storage read_write  C*D f32 scratch, C = ceil(M / R)
//   8 params   uniform             Params
//   9 gate     storage read        M*D f32 (the gated variant's z)
//  10 dgate    storage read_write  M*D f32
// (the gated variant's rstd is M*G f32, one per row and group)
// Dispatch:
//   rmsnorm_fwd, rmsnorm_bwd_dx: one workgroup of WG invocations per row, the row index
//     folded as wid.y * nwg.x + wid.x (grid_1d(M, 1)); lane j handles columns j, j+WG, ...
//   rmsnorm_fwd_rows, rmsnorm_bwd_dx_rows: grid_1d(M, WG); invocation m handles row m.
//   gated_fwd_rows, gated_bwd_dx_rows: grid_1d(M*G, WG); invocation (m, k) handles group k of
//     row m (row-serial on every adapter: a group is short, S = d_inner / n_groups).
//   gated_bwd_dw_partial: as rmsnorm_bwd_dw_partial.
//   rmsnorm_bwd_dw_partial: (ceil(D / WG), C) workgroups; invocation (c, j).
//   rmsnorm_bwd_dw_finish: grid_1d(D, WG); invocation j.
// Determinism: row sums are a fixed binary tree in workgroup memory over lanes whose own
// partial sums run in column order (row-serial: one loop in column order); the dw
// reduction is two fixed-order loops. No atomics, so two runs give identical bits.
// Numerical hazards: mean(x^2) overflows f32 when |x| reaches ~1e19 (rstd then becomes 0);
// eps keeps rstd finite for an all-zero row. WG must be a power of two (the tree halves it).

struct Params {
    m: u32,
    d: u32,
    eps: f32,
    accumulate: u32,
    rows_per_chunk: u32,
    chunks: u32,
    group_size: u32,  // the gated variant's S (0 for plain RMSNorm, which ignores it)
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;
@group(0) @binding(6) var<storage, read_write> dw: array<f32>;
@group(0) @binding(7) var<storage, read_write> partial: array<f32>;
@group(0) @binding(8) var<uniform> params: Params;
@group(0) @binding(9) var<storage, read> gate: array<f32>;
@group(0) @binding(10) var<storage, read_write> dgate: array<f32>;

// Invocations per workgroup; a power of two <= 256 (the size of the reduction scratch).
override WG: u32 = 64;

var<workgroup> scratch: array<f32, 256>;

// Sum of `value` over the workgroup's lanes as a fixed binary tree. Every lane gets the
// total. Must be called from workgroup-uniform control flow (it holds barriers).
fn workgroup_sum(value: f32, lane: u32) -> f32 {
    scratch[lane] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            scratch[lane] = scratch[lane] + scratch[lane + stride];
        }
        workgroupBarrier();
    }
    let total = scratch[0];
    // Nobody may overwrite scratch[0] for a next sum before every lane has read it.
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn rmsnorm_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= params.m) { return; }  // uniform per workgroup, so the barriers stay legal
    let base = row * params.d;
    var sum_sq = 0.0;
    for (var j = lid.x; j < params.d; j += WG) {
        let v = x[base + j];
        sum_sq += v * v;
    }
    let total = workgroup_sum(sum_sq, lid.x);
    let r = inverseSqrt(total / f32(params.d) + params.eps);
    if (lid.x == 0u) {
        rstd[row] = r;
    }
    for (var j = lid.x; j < params.d; j += WG) {
        y[base + j] = x[base + j] * r * weight[j];
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= params.m) { return; }
    let base = row * params.d;
    let r = rstd[row];
    var dot = 0.0;  // sum_j g * xhat
    for (var j = lid.x; j < params.d; j += WG) {
        dot += dy[base + j] * weight[j] * (x[base + j] * r);
    }
    let mean_dot = workgroup_sum(dot, lid.x) / f32(params.d);
    for (var j = lid.x; j < params.d; j += WG) {
        let g = dy[base + j] * weight[j];
        let xhat = x[base + j] * r;
        var value = r * (g - xhat * mean_dot);
        if (params.accumulate != 0u) {
            value += dx[base + j];
        }
        dx[base + j] = value;
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dw_partial(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = wid.x * WG + lid.x;
    let chunk = wid.y;
    if (j >= params.d || chunk >= params.chunks) { return; }
    let first = chunk * params.rows_per_chunk;
    let last = min(first + params.rows_per_chunk, params.m);
    var acc = 0.0;
    for (var row = first; row < last; row++) {
        let i = row * params.d + j;
        acc += dy[i] * (x[i] * rstd[row]);
    }
    partial[chunk * params.d + j] = acc;
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dw_finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                         @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = (wid.y * nwg.x + wid.x) * WG + lid.x;
    if (j >= params.d) { return; }
    var acc = 0.0;
    for (var chunk = 0u; chunk < params.chunks; chunk++) {
        acc += partial[chunk * params.d + j];
    }
    if (params.accumulate != 0u) {
        acc += dw[j];
    }
    dw[j] = acc;
}

// -- row-serial strategy: one invocation per row, no workgroup memory, no barriers ----------

@compute @workgroup_size(WG)
fn rmsnorm_fwd_rows(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(local_invocation_id) lid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.y * nwg.x + wid.x) * WG + lid.x;
    if (row >= params.m) { return; }
    let base = row * params.d;
    var sum_sq = 0.0;
    for (var j = 0u; j < params.d; j++) {
        let v = x[base + j];
        sum_sq += v * v;
    }
    let r = inverseSqrt(sum_sq / f32(params.d) + params.eps);
    rstd[row] = r;
    for (var j = 0u; j < params.d; j++) {
        y[base + j] = x[base + j] * r * weight[j];
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dx_rows(@builtin(workgroup_id) wid: vec3<u32>,
                       @builtin(local_invocation_id) lid: vec3<u32>,
                       @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.y * nwg.x + wid.x) * WG + lid.x;
    if (row >= params.m) { return; }
    let base = row * params.d;
    let r = rstd[row];
    var dot = 0.0;  // sum_j g * xhat
    for (var j = 0u; j < params.d; j++) {
        dot += dy[base + j] * weight[j] * (x[base + j] * r);
    }
    let mean_dot = dot / f32(params.d);
    for (var j = 0u; j < params.d; j++) {
        let g = dy[base + j] * weight[j];
        let xhat = x[base + j] * r;
        var value = r * (g - xhat * mean_dot);
        if (params.accumulate != 0u) {
            value += dx[base + j];
        }
        dx[base + j] = value;
    }
}

// -- the gated, grouped variant (row-serial: one invocation per (row, group)) ---------------

// sigmoid without overflow: exponentiates non-positive numbers only.
fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) {
        return 1.0 / (1.0 + exp(-v));
    }
    let e = exp(v);
    return e / (1.0 + e);
}

@compute @workgroup_size(WG)
fn gated_fwd_rows(@builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid.x;  // (row, group)
    let size = params.group_size;
    let groups = params.d / size;
    if (i >= params.m * groups) { return; }
    let base = i * size;  // (row * G + k) * S = row * D + k * S
    let col0 = (i % groups) * size;
    var sum_sq = 0.0;
    for (var j = 0u; j < size; j++) {
        let zv = gate[base + j];
        let u = x[base + j] * zv * sigmoid(zv);
        sum_sq += u * u;
    }
    let r = inverseSqrt(sum_sq / f32(size) + params.eps);
    rstd[i] = r;
    for (var j = 0u; j < size; j++) {
        let zv = gate[base + j];
        y[base + j] = x[base + j] * zv * sigmoid(zv) * r * weight[col0 + j];
    }
}

@compute @workgroup_size(WG)
fn gated_bwd_dx_rows(@builtin(workgroup_id) wid: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid.x;  // (row, group)
    let size = params.group_size;
    let groups = params.d / size;
    if (i >= params.m * groups) { return; }
    let base = i * size;
    let col0 = (i % groups) * size;
    let r = rstd[i];
    var dot = 0.0;  // sum over the group of g * uhat
    for (var j = 0u; j < size; j++) {
        let zv = gate[base + j];
        dot += dy[base + j] * weight[col0 + j] * (x[base + j] * zv * sigmoid(zv) * r);
    }
    let mean_dot = dot / f32(size);
    for (var j = 0u; j < size; j++) {
        let zv = gate[base + j];
        let xv = x[base + j];
        let sig = sigmoid(zv);
        let silu = zv * sig;
        let uhat = xv * silu * r;
        let du = r * (dy[base + j] * weight[col0 + j] - uhat * mean_dot);
        dx[base + j] = du * silu;
        dgate[base + j] = du * xv * sig * (1.0 + zv * (1.0 - sig));
    }
}

@compute @workgroup_size(WG)
fn gated_bwd_dw_partial(@builtin(workgroup_id) wid: vec3<u32>,
                        @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = wid.x * WG + lid.x;
    let chunk = wid.y;
    if (j >= params.d || chunk >= params.chunks) { return; }
    let groups = params.d / params.group_size;
    let k = j / params.group_size;
    let first = chunk * params.rows_per_chunk;
    let last = min(first + params.rows_per_chunk, params.m);
    var acc = 0.0;
    for (var row = first; row < last; row++) {
        let i = row * params.d + j;
        let zv = gate[i];
        acc += dy[i] * (x[i] * zv * sigmoid(zv) * rstd[row * groups + k]);
    }
    partial[chunk * params.d + j] = acc;
}
