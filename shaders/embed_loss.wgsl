// embed_loss.wgsl — cosine distillation of pooled embeddings: centring, per-row loss, dL/dz.
//
// The served embedding is e = normalize(W (pool(h) - mu)); training pulls z = W (p - mu)
// towards teacher vectors T by cosine. This shader holds the two steps that are not a
// matmul or the pool (shaders/pool.wgsl); W is applied by shaders/matmul.wgsl.
// Computes, with p (B, D) the pooled unit vectors (pool.wgsl mean_l2), mu (D,), z and T (B, E):
//   centre   centred[b, d] = p[b, d] - mu[d]
//   cosine   for every row b < B, with zn = max(||z_b||, eps), tn = max(||T_b||, eps):
//              cos_b       = (z_b . T_b) / (zn tn)
//              row_loss[b] = 1 - cos_b
//              dz[b, e]    = -scale (T[b, e] / tn - cos_b z[b, e] / zn) / zn
//            (scale = 1 / B for the mean loss, 1 / (B * micro-batches) when accumulating);
//            the loss itself is scale * sum(row_loss), reduced by cross_entropy.wgsl's
//            loss_mean (a generic deterministic scaled sum).
// A zero target row has cos 0: loss 1 and zero gradient.
//
// Bindings (group 0; each entry point binds only the ones it uses):
//   0 z         storage read        B*E f32, row-major (B, E)          cosine
//   1 targets   storage read        B*E f32                            cosine
//   2 row_loss  storage read_write  B f32                              cosine
//   3 dz        storage read_write  B*E f32 (overwritten)              cosine
//   4 params    uniform             Params                             both
//   5 pooled    storage read        B*D f32                            centre
//   6 mu        storage read        D f32                              centre
//   7 centred   storage read_write  B*D f32                            centre
// Dispatch: centre: grid_1d(B*D, WG), one invocation per element, flat index
// (wid.y * nwg.x + wid.x) * WG + lid.x. cosine: one workgroup per row,
// b = wid.y * nwg.x + wid.x (2-D past 65,535 rows); the WG invocations stride over E.
// Determinism: fixed-shape tree reductions in workgroup memory (WG a power of two).
// Numerical hazards: the norms and the dot product are taken on z / max|z| and
// T / max|T|, so squaring neither overflows (|x| > 1.8e19) nor underflows (|x| < 1e-19);
// the cosine is formed from those scaled sums and never multiplies two large norms.
// A zero z row (its norm below eps) gets the gradient -scale T / (tn eps), as the reference.

struct Params {
    batch: u32,
    dim: u32,
    scale: f32,
    eps: f32,
}

@group(0) @binding(0) var<storage, read> z: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<f32>;
@group(0) @binding(2) var<storage, read_write> row_loss: array<f32>;
@group(0) @binding(3) var<storage, read_write> dz: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read> pooled: array<f32>;
@group(0) @binding(6) var<storage, read> mu: array<f32>;
@group(0) @binding(7) var<storage, read_write> centred: array<f32>;

override WG: u32 = 64;

var<workgroup> scratch: array<vec4<f32>, WG>;

// Tree reduction of scratch[0..WG) with max or +; every invocation returns the result.
// Must be called from uniform control flow by every invocation of the workgroup.
fn reduce_scratch(lid: u32, value: vec4<f32>, use_max: bool) -> vec4<f32> {
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
fn centre(@builtin(workgroup_id) wid: vec3<u32>,
          @builtin(local_invocation_id) lid3: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid3.x;
    if (i >= params.batch * params.dim) {
        return;
    }
    centred[i] = pooled[i] - mu[i % params.dim];
}

@compute @workgroup_size(WG)
fn cosine(@builtin(workgroup_id) wid: vec3<u32>,
          @builtin(local_invocation_id) lid3: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = wid.y * nwg.x + wid.x;
    if (b >= params.batch) {
        return;  // uniform across the workgroup
    }
    let lid = lid3.x;
    let dim = params.dim;
    let row = b * dim;

    // 1. The largest magnitudes of z_b and T_b.
    var local_max = vec4<f32>(0.0);
    for (var e = lid; e < dim; e += WG) {
        local_max = max(local_max, vec4<f32>(abs(z[row + e]), abs(targets[row + e]), 0.0, 0.0));
    }
    let scales = reduce_scratch(lid, local_max, true);
    let sz = scales.x;
    let st = scales.y;
    let inv_sz = select(0.0, 1.0 / sz, sz > 0.0);
    let inv_st = select(0.0, 1.0 / st, st > 0.0);

    // 2. Scaled sums of squares and the scaled dot product.
    var local_sum = vec4<f32>(0.0);
    for (var e = lid; e < dim; e += WG) {
        let zs = z[row + e] * inv_sz;
        let ts = targets[row + e] * inv_st;
        local_sum += vec4<f32>(zs * zs, ts * ts, zs * ts, 0.0);
    }
    let sums = reduce_scratch(lid, local_sum, false);
    let zn = max(sz * sqrt(sums.x), params.eps);
    let tn = max(st * sqrt(sums.y), params.eps);
    // (z . T) / (zn tn) = (sz / zn) (st / tn) (scaled dot): no product of two norms.
    let cos_b = (sz / zn) * (st / tn) * sums.z;
    if (lid == 0u) {
        row_loss[b] = 1.0 - cos_b;
    }
    let inv_zn = 1.0 / zn;
    let inv_tn = 1.0 / tn;
    let g = -params.scale * inv_zn;
    for (var e = lid; e < dim; e += WG) {
        dz[row + e] = g * (targets[row + e] * inv_tn - cos_b * z[row + e] * inv_zn);
    }
}
